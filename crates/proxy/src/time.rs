//! Timers, kept by one thread of their own for the whole process.
//!
//! A worker's runtime has no time driver. With one, tokio's park looks at
//! its timer wheel, reads the clock twice and takes the wheel's lock on
//! every turn, whether a timer is due or not: about 900 instructions a
//! request with one client, which is two turns a request. The workers'
//! timers are few and mostly long (a node connection's one reply timer, a
//! request's deadline once it needs one, an idle client, CLIENT PAUSE), so
//! they are registered with the runtime of the `orthrus-timers` thread
//! instead: a timer made here keeps that runtime's handle, and when it
//! fires, that thread wakes the task waiting for it (a wake from another
//! thread, which a worker's runtime takes like any other).
//!
//! Every timer of the crate is made here (clippy's `disallowed-methods`
//! refuses tokio's own constructors): one made with tokio's would panic on
//! a worker, whose runtime has no timers to give it.

use std::future::IntoFuture;
use std::io;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, Interval, Sleep, Timeout};

/// The timer thread's runtime, started at its first use; `None` if it
/// could not be started, when timers are made by the calling runtime
/// (`orthrus` itself refuses to start then: [`start_keeper`]).
fn keeper() -> Option<&'static Handle> {
    static KEEPER: OnceLock<Option<Handle>> = OnceLock::new();
    KEEPER
        .get_or_init(|| match start() {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the timer thread");
                None
            }
        })
        .as_ref()
}

fn start() -> io::Result<Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("orthrus-timers".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

/// Starts the timer thread now: the workers' runtimes cannot keep a
/// timer without it.
pub fn start_keeper() -> io::Result<()> {
    match keeper() {
        Some(_) => Ok(()),
        None => Err(io::Error::other("cannot start the timer thread")),
    }
}

/// [`tokio::time::sleep`], kept by the timer thread.
#[allow(clippy::disallowed_methods)]
pub fn sleep(duration: Duration) -> Sleep {
    let _keeper = keeper().map(Handle::enter);
    tokio::time::sleep(duration)
}

/// [`tokio::time::sleep_until`], kept by the timer thread.
#[allow(clippy::disallowed_methods)]
pub fn sleep_until(deadline: Instant) -> Sleep {
    let _keeper = keeper().map(Handle::enter);
    tokio::time::sleep_until(deadline)
}

/// [`tokio::time::timeout`], kept by the timer thread.
#[allow(clippy::disallowed_methods)]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    let _keeper = keeper().map(Handle::enter);
    tokio::time::timeout(duration, future)
}

/// [`tokio::time::timeout_at`], kept by the timer thread.
#[allow(clippy::disallowed_methods)]
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    let _keeper = keeper().map(Handle::enter);
    tokio::time::timeout_at(deadline, future)
}

/// [`tokio::time::interval`], kept by the timer thread.
#[allow(clippy::disallowed_methods)]
pub fn interval(period: Duration) -> Interval {
    let _keeper = keeper().map(Handle::enter);
    tokio::time::interval(period)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime with no time driver, as a worker's: its tasks' timers
    /// fire, from the timer thread, and no earlier than asked.
    #[test]
    fn timers_fire_on_a_runtime_without_a_time_driver() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build_local(tokio::runtime::LocalOptions::default())
            .expect("runtime");
        runtime.block_on(async {
            let started = Instant::now();
            sleep(Duration::from_millis(30)).await;
            assert!(started.elapsed() >= Duration::from_millis(30));
            let mut sleeping =
                std::pin::pin!(sleep_until(Instant::now() + Duration::from_secs(60)));
            sleeping
                .as_mut()
                .reset(Instant::now() + Duration::from_millis(10));
            sleeping.await;
            let never = std::future::pending::<()>();
            assert!(timeout(Duration::from_millis(20), never).await.is_err());
            let soon = timeout_at(Instant::now() + Duration::from_secs(60), async { 7 });
            assert_eq!(soon.await.ok(), Some(7));
            let mut tick = interval(Duration::from_millis(5));
            tick.tick().await;
            tick.tick().await;
            assert!(started.elapsed() >= Duration::from_millis(65));
        });
    }

    /// tokio's own constructors do need a time driver: what this module
    /// is for (if they stopped needing one, a worker could use them).
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn tokios_own_timers_refuse_a_runtime_without_a_time_driver() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        let made = std::panic::catch_unwind(|| {
            let _in = runtime.enter();
            drop(tokio::time::sleep(Duration::from_millis(1)));
        });
        assert!(made.is_err());
    }
}
