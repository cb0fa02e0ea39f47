//! SIGSTOP and SIGCONT for a child process.
//!
//! `std::process::Child` can only send SIGKILL, and `libc::kill` is `unsafe`,
//! which the workspace forbids. `nix` wraps kill(2) safely and is already in
//! the build (the `ctrlc` crate depends on it), so it costs nothing extra and
//! avoids forking a `kill` process per signal, which would also be slower and
//! could fail on a machine without procps.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::DevError;

/// Freezes the process: it keeps its sockets open but answers nothing, which
/// is how a hung node looks to its peers and clients.
pub(crate) fn stop(pid: u32) -> Result<(), DevError> {
    send(pid, Signal::SIGSTOP)
}

/// Lets a stopped process run again.
pub(crate) fn resume(pid: u32) -> Result<(), DevError> {
    send(pid, Signal::SIGCONT)
}

fn send(pid: u32, signal: Signal) -> Result<(), DevError> {
    let raw = i32::try_from(pid).map_err(|_| DevError::Signal {
        signal: signal.as_str(),
        pid,
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    kill(Pid::from_raw(raw), signal).map_err(|errno| DevError::Signal {
        signal: signal.as_str(),
        pid,
        source: errno.into(),
    })
}
