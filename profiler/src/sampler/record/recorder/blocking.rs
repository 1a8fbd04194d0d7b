//! Why a thread left the CPU (`off-cpu`): the kernel's call chain at the switch (kernel frames
//! only), named with `/proc/kallsyms`, says how it blocked. The innermost function hpcrun-rs
//! knows decides: a preemption point (`preempt_schedule*`, `exit_to_user_mode_loop`,
//! `__cond_resched`: runnable, put aside), an I/O wait (pipes, sockets, terminals, pages,
//! `poll`/`select`/`epoll`), a lock (futexes, kernel mutexes and semaphores), a sleep
//! (`do_nanosleep`), else another wait. Names, not addresses, so any kernel build reads alike;
//! where the symbols cannot be read (addresses hidden from an ordinary user) the reason is
//! unknown, never guessed.

use linux_perf_event_reader::constants::PERF_CONTEXT_MAX;
use linux_perf_event_reader::SampleRecord;

use super::Recorder;
use crate::format::db::BlockReason;

impl Recorder {
    /// Why the thread of off-CPU sample `s` left the CPU, from its kernel call chain.
    pub(super) fn block_reason(&mut self, s: &SampleRecord<'_>) -> BlockReason {
        let chain: Vec<u64> = (s.callchain.as_ref())
            .map(|c| (0..c.len()).filter_map(|i| c.get(i)).collect())
            .unwrap_or_default();
        let symbols = self.kernel_symbols.get_or_insert_with(KernelSymbols::load);
        classify(&chain, symbols.as_ref())
    }
}

/// The kernel's function symbols, sorted by address.
pub(crate) struct KernelSymbols {
    starts: Vec<u64>,
    names: Vec<String>,
}

impl KernelSymbols {
    /// The running kernel's symbols, if `/proc/kallsyms` shows their addresses.
    pub(crate) fn load() -> Option<KernelSymbols> {
        let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
        KernelSymbols::parse(&text)
    }

    /// Symbols from `kallsyms` text (`ADDRESS TYPE NAME [MODULE]` lines); `None` where every
    /// address is hidden (zero).
    fn parse(text: &str) -> Option<KernelSymbols> {
        let mut symbols: Vec<(u64, &str)> = (text.lines())
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let addr = u64::from_str_radix(fields.next()?, 16).ok()?;
                let kind = fields.next()?;
                let name = fields.next()?;
                (addr != 0 && matches!(kind, "t" | "T")).then_some((addr, name))
            })
            .collect();
        if symbols.is_empty() {
            return None;
        }
        symbols.sort_unstable_by_key(|s| s.0);
        Some(KernelSymbols {
            starts: symbols.iter().map(|s| s.0).collect(),
            names: symbols.iter().map(|s| s.1.to_string()).collect(),
        })
    }

    /// The function holding kernel address `ip`.
    fn name(&self, ip: u64) -> Option<&str> {
        let i = self.starts.partition_point(|&s| s <= ip);
        i.checked_sub(1).map(|i| self.names[i].as_str())
    }
}

/// The reason a switch away from the CPU happened, from its kernel call chain (innermost
/// first; context markers skipped).
pub(crate) fn classify(chain: &[u64], symbols: Option<&KernelSymbols>) -> BlockReason {
    let Some(symbols) = symbols else {
        return BlockReason::Unknown;
    };
    let mut named = false;
    for &ip in chain.iter().filter(|&&ip| ip < PERF_CONTEXT_MAX) {
        let Some(name) = symbols.name(ip) else {
            continue;
        };
        named = true;
        if let Some(reason) = reason_of(name) {
            return reason;
        }
    }
    match named {
        true => BlockReason::Other,
        false => BlockReason::Unknown,
    }
}

/// The reason a kernel function stands for, if it tells one.
fn reason_of(name: &str) -> Option<BlockReason> {
    const PREEMPTED: &[&str] = &[
        "preempt_schedule",
        "__cond_resched",
        "_cond_resched",
        "exit_to_user_mode",
        "irqentry_exit",
    ];
    const IO: &[&str] = &[
        "pipe_read",
        "pipe_write",
        "io_schedule",
        "wait_woken",
        "sk_wait_data",
        "unix_stream_read",
        "ep_poll",
        "do_select",
        "do_sys_poll",
        "n_tty_read",
        "folio_wait",
        "wait_on_page",
        "wait_for_completion_io",
        "inet_csk_accept",
    ];
    const LOCK: &[&str] = &[
        "futex",
        "mutex_lock",
        "rwsem_down",
        "down_read",
        "down_write",
    ];
    const SLEEP: &[&str] = &["do_nanosleep", "sys_pause", "sigsuspend", "msleep"];
    let has = |names: &[&str]| names.iter().any(|n| name.contains(n));
    // Preemption first: a task preempted inside a read is runnable, not waiting for data.
    [
        (PREEMPTED, BlockReason::Preempted),
        (IO, BlockReason::Io),
        (LOCK, BlockReason::Lock),
        (SLEEP, BlockReason::Sleep),
    ]
    .into_iter()
    .find_map(|(names, reason)| has(names).then_some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "ffffffff81000000 T _stext\n\
        ffffffff81415200 T exit_to_user_mode_loop\n\
        ffffffff8143f200 t futex_do_wait\n\
        ffffffff816c5f00 t anon_pipe_read\n\
        ffffffff816d0000 D some_data\n\
        ffffffff821ecc00 T do_syscall_64\n\
        ffffffff821f8c00 T schedule\n\
        ffffffff821ffb00 t do_nanosleep\n\
        ffffffffc0000000 t helper\t[kvm]\n";

    #[test]
    fn the_innermost_known_function_names_the_reason() {
        let syms = KernelSymbols::parse(KALLSYMS).unwrap();
        let chain = |names: &[u64]| {
            let mut c = vec![0xffff_ffff_ffff_ff80]; // PERF_CONTEXT_KERNEL
            c.extend_from_slice(names);
            c
        };
        let (schedule, syscall) = (0xffffffff821f8c03, 0xffffffff821ecc51);
        assert_eq!(
            classify(
                &chain(&[schedule, 0xffffffff8143f236, syscall]),
                Some(&syms)
            ),
            BlockReason::Lock
        );
        assert_eq!(
            classify(
                &chain(&[schedule, 0xffffffff816c5f46, syscall]),
                Some(&syms)
            ),
            BlockReason::Io
        );
        assert_eq!(
            classify(
                &chain(&[schedule, 0xffffffff821ffb7e, syscall]),
                Some(&syms)
            ),
            BlockReason::Sleep
        );
        assert_eq!(
            classify(
                &chain(&[schedule, 0xffffffff81415241, syscall]),
                Some(&syms)
            ),
            BlockReason::Preempted
        );
        assert_eq!(
            classify(&chain(&[schedule, syscall]), Some(&syms)),
            BlockReason::Other
        );
        assert_eq!(classify(&chain(&[schedule]), None), BlockReason::Unknown);
        assert_eq!(classify(&[], Some(&syms)), BlockReason::Unknown);
    }

    #[test]
    fn hidden_addresses_give_no_symbols() {
        let hidden = "0000000000000000 T _stext\n0000000000000000 t schedule\n";
        assert!(KernelSymbols::parse(hidden).is_none());
    }
}
