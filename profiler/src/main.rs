//! `hpcrun-rs`: measure a command (or a running process) with sampled call paths.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

use profiler::bundling;
use profiler::db::Profile;
use profiler::events::{self, EventSpec};
use profiler::groups;
use profiler::hold::Backpressure;
use profiler::job::JobPlace;
use profiler::launch;
use profiler::measurements::{self, Destination};
use profiler::output::{Output, Placement};
use profiler::perf::{DEFAULT_STACK_SIZE, MAX_STACK_SIZE};
use profiler::report::{self, Notice};
use profiler::session::{self, Options, RunError, Target};

/// Sampling call-path profiler: runs COMMAND and records where it spends its time, by full
/// calling context, into a profile for `hpcprof-rs`.
#[derive(Parser, Debug)]
#[command(
    name = "hpcrun-rs",
    version,
    after_help = "Examples:\n  hpcrun-rs ./app arg1 arg2             sample cycles (or cpu-clock) at 1000 Hz\n  \
                  hpcrun-rs -e cpu-clock@f4000 -e page-faults ./app\n  \
                  hpcrun-rs -p 1234                     attach until it exits or Ctrl-C\n  \
                  hpcrun-rs --show profile.db           print what a profile holds\n\n\
                  The exit status is the command's (128+N if it died of signal N); 127 if it\n\
                  does not exist; 2 for bad options or events; 1 if the measurement failed."
)]
struct Cli {
    /// Event to sample, `NAME[@PERIOD|@fFREQUENCY]`; repeat for several metrics
    /// (default: cycles@f1000, falling back to cpu-clock where there is no PMU). A group
    /// `{LEADER[@RATE],MEMBER,...}` samples the leader and reads the members' counts with each
    /// sample, so that their ratios per context come from the same instants. `mem`,
    /// `mem-loads` and `mem-stores` sample memory accesses precisely (Intel PEBS, AMD IBS)
    /// with where each was served from and its latency, and imply --data
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    events: Vec<String>,

    /// Also measure off-CPU time (the `off-cpu` event): each switch of a thread away from the
    /// CPU, with the calling context it blocked in (sleeping, waiting for I/O or a lock, or
    /// preempted), weighs the time until it runs again. Needs kernel sampling (root, or
    /// kernel.perf_event_paranoid <= 1)
    #[arg(long)]
    off_cpu: bool,

    /// Where to write the profile [default: profile.db; under an MPI launcher or Slurm,
    /// hpctoolkit-rs-APP-measurements[-JOBID]/APP-RANK-HOST-PID.db]. A directory (an existing
    /// one, a name ending in /, or under a launcher any name but *.db) is a measurement
    /// directory: one file per process in it. An existing file is kept as FILE.old; if another
    /// run writes FILE meanwhile, this profile goes to the first free numbered name beside it
    /// (profile.1.db, ...; stderr names it), never over another run's
    #[arg(short, long, value_name = "FILE|DIR")]
    output: Option<PathBuf>,

    /// Bytes of user stack copied with each sample, for unwinding (8..=65528) [default: 8192;
    /// 32768 for a Python interpreter or script, see --python]
    #[arg(long, value_name = "BYTES")]
    stack_size: Option<u32>,

    /// Sample buffer per CPU in KiB, a power of two (default: as root 64 MiB over all CPUs,
    /// 2048 to 16384 each; else 4096 or what the locked-memory limit allows)
    #[arg(long, value_name = "KIB")]
    buffer_kib: Option<usize>,

    /// When to pause the command now and then while hpcrun-rs copies its samples, so that a
    /// burst waits instead of losing records: `auto` where hpcrun-rs cannot have real-time
    /// priority (an ordinary user), `on`, or `off` (records that do not fit are lost and
    /// counted). The command's CPU time is unchanged; its wall time grows by the copies
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = BackpressureArg::Auto)]
    backpressure: BackpressureArg,

    /// Also record what data each sample touched: the faulting address of page-fault
    /// samples, the memory operand of the interrupted instruction for clock samples, each
    /// resolved to a heap block, static variable, stack frame or mapping (see --show)
    #[arg(long)]
    data: bool,

    /// With --data: track heap blocks of at least BYTES (their allocation, calling context and
    /// free); 0 tracks every block
    #[arg(long, value_name = "BYTES", default_value_t = 4096, requires = "data")]
    alloc_min: u64,

    /// Also record a trace: per thread, the time and calling context of every sample of the
    /// first event (for hpcview-rs --timeline), about 5 bytes a sample; with --data also the
    /// time and data reference of its data samples (for hpcview-rs --memmap)
    #[arg(short = 't', long)]
    trace: bool,

    /// With -t: the most memory (and file space) the trace may take, in MiB, and with --data
    /// the data trace as much again; samples past it are counted as dropped
    #[arg(long, value_name = "MIB", default_value_t = 256, requires = "trace")]
    trace_max_mib: usize,

    /// Watch data with hardware watchpoints for producer/consumer bindings (hpcview-rs
    /// --bindings): `VAR[,VAR]` watches up to 4 named statics of the executable exactly
    /// (reads and writes by function); `sample[@HZ]` moves one watchpoint over its static data
    /// and its threads' stacks (with --data also over the live heap blocks) HZ times a second
    /// (default 50) and estimates the bindings of the whole run
    #[arg(long, value_name = "VAR|sample[@HZ]")]
    watch: Vec<String>,

    /// Python programs: `auto` shows each Python function, with its file and line, in the
    /// calling context between the native frames. As root, for a Python interpreter or script
    /// (CPython 3.11 to 3.13), or a process attached to that runs one, an eBPF program reads
    /// the interpreter's frames at each sample; otherwise CPython's perf trampolines are turned
    /// on in the command's environment (PYTHONPERFSUPPORT=1 unless it is set; 3.12 and later,
    /// functions without lines). A Python command gets 32 KiB of stack copied per sample (a
    /// Python call takes about 500 bytes of native stack); `off` does none of this
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = AutoOff::Auto)]
    python: AutoOff,

    /// Java programs (HotSpot JVMs, OpenJDK 17 and later): `auto` adds -XX:+DumpPerfMapAtExit
    /// and -XX:+PreserveFramePointer to JAVA_TOOL_OPTIONS in the command's environment, so that
    /// each JVM names its compiled methods in /tmp/perf-PID.map when it exits and hpcprof-rs
    /// shows them in the calling context, with paths through them; `off` leaves it alone
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = AutoOff::Auto)]
    java: AutoOff,

    /// Copy every binary the profile names (executable, libraries, the vDSO) and the separate
    /// debug files found for them into the measurement (PROFILE.modules/ beside a profile,
    /// DIR/modules/ in a measurement directory), found again by build-id: `hpcprof-rs` then
    /// gives the same database on another machine, where those files are gone or differ
    #[arg(long)]
    bundle: bool,

    /// No summary at the end
    #[arg(short, long)]
    quiet: bool,

    /// Attach to a running process (all its threads) instead of running a command
    #[arg(short, long, value_name = "PID", conflicts_with = "command")]
    pid: Option<u32>,

    /// List the events this machine supports, and what each costs
    #[arg(short = 'L', long = "list-events", exclusive = true)]
    list_events: bool,

    /// Print a readable summary of an existing profile (modules, threads, hottest raw paths)
    #[arg(long, value_name = "PROFILE", exclusive = true)]
    show: Option<PathBuf>,

    /// The command to measure, with its arguments
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// `--python`'s and `--java`'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AutoOff {
    Auto,
    Off,
}

/// `--backpressure`'s values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum BackpressureArg {
    Auto,
    On,
    Off,
}

impl From<BackpressureArg> for Backpressure {
    fn from(arg: BackpressureArg) -> Self {
        match arg {
            BackpressureArg::Auto => Backpressure::Auto,
            BackpressureArg::On => Backpressure::On,
            BackpressureArg::Off => Backpressure::Off,
        }
    }
}

/// Write to stderr, ignoring failures: a closed or full stderr must neither stop a measurement
/// nor change the exit status the command earned.
macro_rules! say {
    ($($arg:tt)*) => {{
        // One write: `write!` on stderr writes each piece of the format apart, and a caller
        // reading stdout and stderr together would see other output cut into a line.
        use std::io::Write as _;
        let text = format!($($arg)*);
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }};
}

/// Write a listing to stdout; a reader that went away (`hpcrun-rs --show p.db | head`) ends
/// it quietly, any other failure is an error.
fn print_listing(text: &str) -> Result<u8, Failure> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure {
            status: 1,
            error: anyhow::Error::new(e).context("cannot write to standard output"),
        }),
        _ => Ok(0),
    }
}

/// A failure with the exit status it deserves.
struct Failure {
    status: u8,
    error: anyhow::Error,
}

fn usage(error: anyhow::Error) -> Failure {
    Failure { status: 2, error }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure { status: 1, error }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(status) => ExitCode::from(status),
        Err(f) => {
            say!("hpcrun-rs: {:#}\n", f.error);
            ExitCode::from(f.status)
        }
    }
}

/// The stack copied per sample where `--stack-size` is not given: more for a Python command
/// when `python` (trampolines on) says its calls will show.
fn default_stack_size(command: &[OsString], python: bool) -> u32 {
    let program = command.first().and_then(|c| launch::resolve(c).ok());
    match program {
        Some(p) if python && profiler::python::is_python(&p) => profiler::python::PYTHON_STACK_SIZE,
        _ => DEFAULT_STACK_SIZE,
    }
}

fn run(cli: Cli) -> Result<u8, Failure> {
    if cli.list_events {
        return print_listing(&report::list_events());
    }
    if let Some(path) = &cli.show {
        let profile = Profile::read(path).map_err(|e| usage(e.into()))?;
        return print_listing(&report::show(&profile, 10));
    }
    let events = parse_events(&cli.events, cli.off_cpu).map_err(usage)?;
    let watch =
        profiler::watch::WatchRequest::parse(&cli.watch).map_err(|e| usage(anyhow::anyhow!(e)))?;
    let python = cli.python == AutoOff::Auto;
    let stack_size = cli
        .stack_size
        .unwrap_or_else(|| default_stack_size(&cli.command, python));
    if !stack_size.is_multiple_of(8) || !(8..=MAX_STACK_SIZE).contains(&stack_size) {
        return Err(usage(anyhow::anyhow!(
            "--stack-size must be a multiple of 8 between 8 and {MAX_STACK_SIZE}"
        )));
    }
    let ring_pages = match cli.buffer_kib {
        Some(kib) if kib >= 8 && kib.is_power_of_two() => Some(kib / 4),
        Some(_) => {
            return Err(usage(anyhow::anyhow!(
                "--buffer-kib must be a power of two >= 8"
            )))
        }
        None => None,
    };
    let target = match (cli.pid, cli.command.is_empty()) {
        (Some(pid), _) => Target::Attach(pid),
        (None, false) => Target::Launch(cli.command.clone()),
        (None, true) => {
            return Err(usage(anyhow::anyhow!(
                "no command to measure (try `hpcrun-rs --help`)"
            )))
        }
    };
    let job = JobPlace::from_env();
    let (output, directory) = prepare_output(cli.output.as_deref(), &target, &job)?;
    let opts = Options {
        events,
        stack_size,
        ring_pages,
        target,
        data: cli.data,
        alloc_min: cli.alloc_min,
        trace: cli.trace.then_some(cli.trace_max_mib << 20),
        notify: if cli.quiet { notify_quiet } else { notify },
        watch,
        backpressure: cli.backpressure.into(),
        python,
        java: cli.java == AutoOff::Auto,
    };
    let measurement = session::run(&opts).map_err(|e| match e {
        RunError::Launch(l) => Failure {
            status: l.exit_status() as u8,
            error: l.into(),
        },
        RunError::Event(msg) => usage(anyhow::anyhow!(msg)),
        other => other.into(),
    })?;
    if !cli.quiet {
        for notice in &measurement.notices {
            say!("hpcrun-rs: {notice}\n");
        }
    }
    let status = measurement.ended.map(|e| e.exit_status()).unwrap_or(0);
    let duration = measurement.duration.as_secs_f64();
    let mut notes: Vec<String> = measurement
        .recording
        .modules
        .unreadable
        .iter()
        .map(|(path, why)| format!("no unwind information for {path}: {why}"))
        .collect();
    if let Some(profiler::launch::Ended::Signaled(sig)) = measurement.ended {
        notes.push(format!(
            "the command was killed by signal {sig} (exit status {status})"
        ));
        if sig == libc::SIGTRAP && !cli.watch.is_empty() {
            notes.push(
                "warning: with --watch, a SIGTRAP may be a watchpoint trap that the kernel \
                 delivered to the command as a signal (seen rarely on a virtual machine); the \
                 profile holds the run up to then, and running it again usually completes"
                    .to_string(),
            );
        }
    }
    if measurement.holds > 0 {
        notes.push(format!(
            "the measured program was held {} times while its samples were copied (--backpressure)",
            measurement.holds
        ));
    }
    notes.push(own_cpu_note(measurement.attached_cpu));
    let files = cli.bundle.then(|| measurement.recording.modules.files());
    let mut profile = session::into_profile(measurement);
    profile.job = job;
    if !cli.trace && !profile.traces.threads.is_empty() {
        let line = profile.traces.summary("trace");
        notes.push(format!(
            "{line}, kept to place OpenMP worker threads' samples"
        ));
    }
    if cli.trace {
        notes.push(profile.traces.summary("trace"));
        if !profile.data.traces.threads.is_empty() {
            notes.push(profile.data.traces.summary("data trace"));
        }
    }
    let written = write_output(&profile, &output, &mut notes)?;
    if let Some(files) = files {
        let store = profiler::bundle::store_for(&written, directory.as_deref());
        notes.extend(bundling::bundle(&profile, &files, &store).lines());
    }
    if !cli.quiet {
        say!(
            "{}",
            report::summary(&profile, duration, &written.display().to_string(), &notes)
        );
    }
    Ok(status.clamp(0, 255) as u8)
}

impl From<RunError> for Failure {
    fn from(error: RunError) -> Self {
        Failure {
            status: 1,
            error: error.into(),
        }
    }
}

/// Tell the user at once what cannot wait for the summary.
fn notify(notice: Notice) {
    say!("hpcrun-rs: {notice}\n");
}

/// [`notify`] under `--quiet`: only what the user must act on (a command that stopped itself
/// and waits for SIGCONT).
fn notify_quiet(notice: Notice) {
    if matches!(notice, Notice::Stopped(..)) {
        notify(notice);
    }
}

/// What measuring cost: hpcrun-rs's own CPU time (user + system), beside the command's (or,
/// attached, the process's while it was measured).
fn own_cpu_note(attached_cpu: Option<f64>) -> String {
    let cpu = |who| {
        nix::sys::resource::getrusage(who)
            .map(|u| {
                let t =
                    |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
                t(u.user_time()) + t(u.system_time())
            })
            .unwrap_or(0.0)
    };
    let own = cpu(nix::sys::resource::UsageWho::RUSAGE_SELF);
    match attached_cpu {
        Some(used) => {
            format!("hpcrun-rs used {own:.3} s of CPU; the process {used:.3} s while attached")
        }
        None => format!(
            "hpcrun-rs used {own:.3} s of CPU; the command {:.3} s",
            cpu(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        ),
    }
}

fn parse_events(texts: &[String], off_cpu: bool) -> Result<Vec<EventSpec>> {
    let mut specs = Vec::new();
    if texts.is_empty() {
        specs.push(EventSpec::parse("cycles").expect("cycles is known"));
    }
    for text in texts.iter().flat_map(|t| groups::split_event_list(t)) {
        match text.starts_with('{') {
            true => specs.extend(groups::parse_group(text)?),
            false => specs.extend(EventSpec::parse_all(text)?),
        }
    }
    if off_cpu && !specs.iter().any(|s| s.event.is_off_cpu()) {
        specs.push(EventSpec::parse(events::OFF_CPU).expect("off-cpu is known"));
    }
    events::check_together(&specs, profiler::pmu::machine())?;
    Ok(specs)
}

/// Decide where the profile goes ([`measurements::destination`]), create the measurement
/// directory if it is one, and check that the profile can be written there; the measurement
/// directory, if it is one.
fn prepare_output(
    output: Option<&Path>,
    target: &Target,
    job: &JobPlace,
) -> Result<(Output, Option<PathBuf>), Failure> {
    let program = match target {
        Target::Launch(command) => command.first().map(|c| c.to_string_lossy()),
        Target::Attach(_) => None,
    };
    let app = measurements::app_name(program.as_deref());
    let (path, directory) = match measurements::destination(output, &app, job) {
        Destination::File(path) => (path, None),
        Destination::Directory(dir) => {
            measurements::create(&dir).map_err(|e| usage(e.into()))?;
            let host = nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default();
            let file = measurements::file_name(&app, job, &host, std::process::id());
            (dir.join(file), Some(dir))
        }
    };
    let output = Output::prepare(&path).map_err(|e| usage(e.into()))?;
    Ok((output, directory))
}

/// Write the profile (see [`profiler::output`]) and say where it went when that is not where
/// it was asked to go.
fn write_output(
    profile: &Profile,
    output: &Output,
    notes: &mut Vec<String>,
) -> Result<PathBuf, Failure> {
    let bytes = profile.to_bytes().context("cannot encode the profile")?;
    let (path, how) = output.place(&bytes).map_err(anyhow::Error::from)?;
    match how {
        Placement::Requested { kept_old: None } => {}
        Placement::Requested {
            kept_old: Some(old),
        } => notes.push(format!(
            "the previous profile was kept as {}",
            old.display()
        )),
        Placement::Sibling => say!(
            "hpcrun-rs: another run wrote {} meanwhile; this profile is {}\n",
            output.path().display(),
            path.display()
        ),
        Placement::Fallback(why) => say!(
            "hpcrun-rs: {why}; saved the profile as {} instead\n",
            path.display()
        ),
    }
    Ok(path)
}
