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
//!
//! [`Tick`] is the request path's clock: when a request was read, written
//! to its node and answered.

use std::future::IntoFuture;
use std::io;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, Interval, Sleep, Timeout};

/// A moment of `CLOCK_MONOTONIC` (the clock `Instant` reads on Linux) in
/// nanoseconds: the request path's stamps (when a request was read, sent,
/// answered), whose differences are its latency figures. A difference is a
/// subtraction, where an `Instant`'s is a call into std of about 50
/// instructions; a stamp that becomes a deadline is turned into an
/// `Instant` then ([`Tick::instant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tick(u64);

impl Tick {
    #[inline]
    pub fn now() -> Tick {
        // CLOCK_MONOTONIC cannot fail on Linux; elsewhere every stamp
        // would be 0 and every latency figure 0.
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(Tick(0), |t| {
            let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
            Tick(secs.wrapping_mul(1_000_000_000).wrapping_add(nanos))
        })
    }

    /// `self - earlier` (zero if `earlier` is later).
    #[inline]
    pub fn since(self, earlier: Tick) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - earlier` in whole microseconds (zero if `earlier` is
    /// later): a request's latency, counted as it is in every figure.
    #[inline]
    pub fn micros_since(self, earlier: Tick) -> u64 {
        self.0.saturating_sub(earlier.0) / 1_000
    }

    /// How long ago this was.
    pub fn elapsed(self) -> Duration {
        Tick::now().since(self)
    }

    /// The same moment as an `Instant`, for a deadline or a timer (two
    /// clock reads: not for every request).
    pub fn instant(self) -> std::time::Instant {
        let now = std::time::Instant::now();
        now.checked_sub(self.elapsed()).unwrap_or(now)
    }
}

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

    #[test]
    fn ticks_differ_by_the_time_between_them_and_never_below_zero() {
        let start = Tick(5_000_000_000);
        let later = Tick(5_030_000_000);
        assert_eq!(later.since(start), Duration::from_millis(30));
        assert_eq!(start.since(later), Duration::ZERO);
        let now = Tick::now();
        std::thread::sleep(Duration::from_millis(20));
        let took = Tick::now().since(now);
        assert!(took >= Duration::from_millis(20), "{took:?}");
        // The same clock as `Instant`: a tick of a moment ago is an
        // instant of about as long ago.
        let ago = now.instant().elapsed();
        assert!(
            ago >= took && ago < took + Duration::from_secs(1),
            "{ago:?}"
        );
    }

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
