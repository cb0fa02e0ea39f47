//! Ctrl-C, SIGTERM and SIGHUP: stop everything the driver started, then
//! exit.
//!
//! The signal handler only raises a flag. The driver's main thread checks it
//! wherever it waits (for workers, for a proxy to come up) and returns an
//! [`Interrupted`] error, and unwinding drops every worker, proxy and
//! redis-server handle, each of which kills and reaps its process and
//! removes its temporary directory. Doing the killing in the main thread
//! keeps the ownership of those processes in one place. If the main thread
//! is stuck somewhere that does not check the flag, the handler exits the
//! process after [`FORCE_EXIT_AFTER`]; a second signal exits at once.

use std::process;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result};

/// How long the main thread gets to clean up after the first signal.
pub const FORCE_EXIT_AFTER: Duration = Duration::from_secs(20);
/// The exit code of a run stopped by a signal (128 + SIGINT, as shells do).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Whether a stop was asked for.
#[derive(Clone, Debug, Default)]
pub struct Interrupt {
    flag: Arc<AtomicBool>,
}

/// The error a check returns once a signal came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

// === impl Interrupt ===

impl Interrupt {
    /// Installs the process's signal handler. Only one per process.
    pub fn install() -> Result<Interrupt> {
        let interrupt = Interrupt::default();
        let flag = Arc::clone(&interrupt.flag);
        ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                eprintln!("orthrus-bench: second signal, exiting now");
                process::exit(i32::from(EXIT_INTERRUPTED));
            }
            eprintln!("orthrus-bench: interrupted, stopping workers and targets...");
            thread::spawn(|| {
                thread::sleep(FORCE_EXIT_AFTER);
                eprintln!("orthrus-bench: cleanup took too long, exiting");
                process::exit(i32::from(EXIT_INTERRUPTED));
            });
        })
        .context("installing the Ctrl-C handler")?;
        Ok(interrupt)
    }

    /// Raises the flag, as a signal would.
    pub fn raise(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether a signal came in.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// `Err(Interrupted)` once a signal came in.
    pub fn check(&self) -> Result<(), Interrupted> {
        if self.is_set() {
            Err(Interrupted)
        } else {
            Ok(())
        }
    }
}

// === impl Interrupted ===

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted by a signal")
    }
}

impl std::error::Error for Interrupted {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_is_seen_by_clones() {
        let a = Interrupt::default();
        let b = a.clone();
        assert_eq!(b.check(), Ok(()));
        a.raise();
        assert!(b.is_set());
        assert_eq!(b.check(), Err(Interrupted));
        let err = anyhow::Error::from(Interrupted);
        assert!(err.downcast_ref::<Interrupted>().is_some());
    }
}
