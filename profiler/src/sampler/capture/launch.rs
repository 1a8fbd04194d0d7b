//! Starting the measured command so that sampling begins exactly at its `exec`.
//!
//! The child is forked and waits on a pipe while the parent opens the events on it (with
//! `enable_on_exec`); then the parent lets it go. An `exec` failure comes back through a
//! second, close-on-exec pipe, so the parent can report it the way a shell would.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, pipe2, ForkResult, Pid};

/// Why a command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such file, or not found in `PATH` (shell exit status 127).
    #[error("{0}: command not found")]
    NotFound(String),
    /// Found but not executable (shell exit status 126).
    #[error("{name}: {reason}")]
    NotExecutable {
        /// The command.
        name: String,
        /// Why it cannot be executed.
        reason: String,
    },
    /// fork or pipe failed.
    #[error("cannot start the command: {0}")]
    System(#[from] nix::Error),
}

impl LaunchError {
    /// The exit status a shell would give for this failure.
    pub fn exit_status(&self) -> i32 {
        match self {
            LaunchError::NotFound(_) => 127,
            LaunchError::NotExecutable { .. } => 126,
            LaunchError::System(_) => 1,
        }
    }
}

/// Find `command` the way `execvp` will: as a path if it contains a slash, else in `PATH`.
pub fn resolve(command: &OsStr) -> Result<PathBuf, LaunchError> {
    let name = command.to_string_lossy().into_owned();
    let candidates: Vec<PathBuf> = if command.as_bytes().contains(&b'/') {
        vec![PathBuf::from(command)]
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join(command)).collect())
            .unwrap_or_default()
    };
    let found = candidates.into_iter().find(|p| p.is_file());
    match found {
        Some(p) if is_executable(&p) => Ok(p),
        Some(_) => Err(LaunchError::NotExecutable {
            name,
            reason: "Permission denied".into(),
        }),
        None => Err(LaunchError::NotFound(name)),
    }
}

fn is_executable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// A forked child blocked before `exec`.
pub struct Blocked {
    /// The child's pid.
    pub pid: Pid,
    go: OwnedFd,
    exec_error: OwnedFd,
}

/// Fork a child that will `execvp(argv)` once [`Blocked::release`] is called.
pub fn spawn_blocked(argv: &[OsString]) -> Result<Blocked, LaunchError> {
    spawn_blocked_with(argv, &[], &[])
}

/// [`spawn_blocked`], with `env` set in the command's environment (each pair replacing any
/// variable of that name) and the descriptors `keep` left open across its `exec` (they are
/// close-on-exec in hpcrun-rs, so no other child inherits them). The allocation shim needs
/// both: `LD_PRELOAD` and its settings, and its socket.
pub fn spawn_blocked_with(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    keep: &[BorrowedFd<'_>],
) -> Result<Blocked, LaunchError> {
    spawn(argv, env, keep, false)
}

/// [`spawn_blocked_with`], the child stopping (ptrace, `SIGTRAP`) right after a successful
/// `exec`, where its load map is known: [`Blocked::release_stopped`] lets it go.
pub fn spawn_blocked_stopping(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    keep: &[BorrowedFd<'_>],
) -> Result<Blocked, LaunchError> {
    spawn(argv, env, keep, true)
}

fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    keep: &[BorrowedFd<'_>],
    stop_at_exec: bool,
) -> Result<Blocked, LaunchError> {
    let name = argv
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| LaunchError::NotFound(name))?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // The environment is built before the fork: the child may only make async-signal-safe calls.
    let envs = (!env.is_empty()).then(|| environment_with(env));
    let mut env_ptrs: Vec<*const libc::c_char> =
        envs.iter().flatten().map(|c| c.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let keep: Vec<i32> = keep.iter().map(|fd| fd.as_raw_fd()).collect();
    let (go_r, go_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (err_r, err_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: the child only calls async-signal-safe functions (prctl, read, fcntl, ptrace, write,
    // execvp, execvpe, _exit) on data prepared before the fork.
    match unsafe { fork()? } {
        ForkResult::Child => unsafe {
            libc::close(go_w.as_raw_fd());
            libc::close(err_r.as_raw_fd());
            // Die with hpcrun-rs, even a SIGKILLed one, instead of running on unmeasured.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            let mut byte = 0u8;
            let n = libc::read(go_r.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
            if n != 1 {
                libc::_exit(125);
            }
            for &fd in &keep {
                libc::fcntl(fd, libc::F_SETFD, 0);
            }
            if stop_at_exec && libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                libc::_exit(125);
            }
            if envs.is_some() {
                libc::execvpe(ptrs[0], ptrs.as_ptr(), env_ptrs.as_ptr());
            } else {
                libc::execvp(ptrs[0], ptrs.as_ptr());
            }
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::write(err_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        },
        ForkResult::Parent { child } => Ok(Blocked {
            pid: child,
            go: go_w,
            exec_error: err_r,
        }),
    }
}

/// hpcrun-rs's environment with `overrides` replacing or adding variables, as `NAME=value`.
fn environment_with(overrides: &[(OsString, OsString)]) -> Vec<CString> {
    std::env::vars_os()
        .filter(|(name, _)| !overrides.iter().any(|(n, _)| n == name))
        .chain(overrides.iter().cloned())
        .filter_map(|(name, value)| {
            let mut entry = name.into_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            CString::new(entry).ok()
        })
        .collect()
}

impl Blocked {
    /// Let the child exec; returns the exec error if there was one.
    pub fn release(self, name: &str) -> Result<Pid, LaunchError> {
        let Blocked {
            pid,
            go,
            exec_error,
        } = self;
        nix::unistd::write(&go, &[1u8]).map_err(LaunchError::System)?;
        drop(go);
        let mut buf = [0u8; 4];
        let n = nix::unistd::read(&exec_error, &mut buf).unwrap_or(0);
        if n == 4 {
            let _ = waitpid(pid, None);
            let errno = i32::from_ne_bytes(buf);
            let reason = nix::errno::Errno::from_raw(errno).desc().to_string();
            return Err(match errno {
                libc::ENOENT => LaunchError::NotFound(name.to_string()),
                _ => LaunchError::NotExecutable {
                    name: name.to_string(),
                    reason,
                },
            });
        }
        Ok(pid)
    }

    /// [`Blocked::release`] for a child from [`spawn_blocked_stopping`]: returns once it is
    /// stopped after its `exec`; `at_exec` runs then (on failure the child is killed), and the
    /// child is let go.
    pub fn release_stopped<T, E>(
        self,
        name: &str,
        at_exec: impl FnOnce(Pid) -> Result<T, E>,
    ) -> Result<Result<(Pid, T), E>, LaunchError> {
        let pid = self.release(name)?;
        match waitpid(pid, None) {
            Ok(nix::sys::wait::WaitStatus::Stopped(_, _)) => {}
            Ok(_) => {
                return Err(LaunchError::System(nix::errno::Errno::ESRCH));
            }
            Err(e) => return Err(LaunchError::System(e)),
        }
        match at_exec(pid) {
            Ok(t) => {
                detach(pid).map_err(LaunchError::System)?;
                Ok(Ok((pid, t)))
            }
            Err(e) => {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = detach(pid);
                let _ = waitpid(pid, None);
                Ok(Err(e))
            }
        }
    }

    /// Give up: kill the blocked child and reap it.
    pub fn abandon(self) {
        let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

/// Let a ptrace-stopped child of ours go on, no longer traced.
fn detach(pid: Pid) -> Result<(), nix::Error> {
    // SAFETY: PTRACE_DETACH takes no pointers; the signal argument 0 delivers none.
    match unsafe { libc::ptrace(libc::PTRACE_DETACH, pid.as_raw(), 0, 0) } {
        0 => Ok(()),
        _ => Err(nix::errno::Errno::last()),
    }
}

/// How the measured command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Exited with this status.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
}

impl Ended {
    /// The shell's exit status for it: the status, or 128 + the signal.
    pub fn exit_status(self) -> i32 {
        match self {
            Ended::Exited(code) => code,
            Ended::Signaled(sig) => 128 + sig,
        }
    }
}

/// A descriptor that becomes readable when process `pid` exits (`pidfd_open`, Linux 5.3+);
/// `None` where the kernel lacks it (the caller then notices the exit at its next timeout).
pub fn exit_fd(pid: Pid) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    // SAFETY: a non-negative result is a descriptor we now own.
    (fd >= 0).then(|| unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// What the child is doing, as far as `waitpid` tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Running, or nothing new to tell.
    Running,
    /// It has just been stopped by this signal (SIGSTOP it raised itself, a SIGTSTP).
    Stopped(i32),
    /// It has ended.
    Ended(Ended),
}

/// What the child is doing (without blocking); a stop is reported once, when it happens.
pub fn poll_child(pid: Pid) -> ChildState {
    match waitpid(pid, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
        Ok(WaitStatus::Exited(_, code)) => ChildState::Ended(Ended::Exited(code)),
        Ok(WaitStatus::Signaled(_, sig, _)) => ChildState::Ended(Ended::Signaled(sig as i32)),
        Ok(WaitStatus::Stopped(_, sig)) => ChildState::Stopped(sig as i32),
        Ok(_) => ChildState::Running,
        Err(_) => ChildState::Ended(Ended::Exited(0)),
    }
}

/// The library `name` beside the executable `exe` (or beside the build directory's, for a
/// test or example binary in `deps` or `examples`), if it is there.
pub(crate) fn beside_exe(exe: &Path, name: &str) -> Option<PathBuf> {
    let dir = exe.parent().unwrap_or(Path::new("."));
    let mut candidates = vec![dir.join(name)];
    if dir.ends_with("deps") || dir.ends_with("examples") {
        candidates.extend(dir.parent().map(|d| d.join(name)));
    }
    candidates.into_iter().find(|p| p.is_file())
}
