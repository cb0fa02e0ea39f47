//! The redirect decision: what to do with a backend's reply, as a pure
//! function of (reply bytes, attempts so far, policy).
//!
//! There is no count budget: a request follows redirections and retries
//! until its deadline, which the caller keeps. The policy only says how long
//! to wait between attempts, so that a cluster that needs a moment to agree
//! (a slot migration finished in an awkward order) is not hammered.

use std::time::Duration;

use orthrus_resp::{ReplyClass, classify};

use crate::{NodeAddr, Redirect, Slot};

/// How fast one request retries while it tries to reach the right node.
#[derive(Clone, Debug)]
pub struct RedirectPolicy {
    /// MOVED/ASK redirects followed at once; later ones wait
    /// [`RedirectPolicy::redirect_delay`] first. Default 2 (a MOVED then an
    /// ASK is an ordinary migration).
    pub free_redirects: u32,
    /// First wait before a MOVED/ASK past the free ones, doubled per
    /// attempt. Default 5 ms.
    pub redirect_backoff: Duration,
    /// Cap on the wait before a MOVED/ASK: redirects that bounce between
    /// nodes stop within a few milliseconds of the nodes agreeing. Default
    /// 100 ms.
    pub max_redirect_backoff: Duration,
    /// First back-off after TRYAGAIN (a multi-key request hit a slot being
    /// migrated), doubled per attempt. Default 10 ms.
    pub tryagain_backoff: Duration,
    /// First back-off after CLUSTERDOWN, doubled per attempt. Default 100 ms.
    pub clusterdown_backoff: Duration,
    /// Cap on any back-off. Default 1 s.
    pub max_backoff: Duration,
}

/// What the proxy does with one backend reply.
///
/// A `Moved`/`Ask` address may have an empty host (Redis 7's `:port` form);
/// resolve it against the node that answered with [`Action::with_origin`]
/// before connecting.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Action {
    /// Not a redirect: hand the reply to the client as it is (ordinary
    /// errors included).
    Done,
    /// Patch the slot map, resend the same frame to `addr`, and schedule a
    /// topology refresh.
    Moved { slot: Slot, addr: NodeAddr },
    /// Send `ASKING` and the command to `addr`; the slot map is untouched.
    Ask { addr: NodeAddr },
    /// Resend to the same slot after `delay`; with `refresh`, refresh the
    /// topology first (CLUSTERDOWN: a slot may have lost its owner).
    RetryAfter { delay: Duration, refresh: bool },
    /// Give the client [`FailReason::message`] as an error.
    Fail(FailReason),
}

/// Why a request is given up.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum FailReason {
    /// A node sent a MOVED/ASK that does not parse.
    MalformedRedirect,
}

// === impl RedirectPolicy ===

impl RedirectPolicy {
    /// `base` doubled `attempt` times, capped at `max_backoff`.
    pub fn backoff(&self, base: Duration, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        base.saturating_mul(factor).min(self.max_backoff)
    }

    /// How long to wait before following the redirect that is the
    /// request's `attempt`-th retry: nothing for the first
    /// `free_redirects`, then a doubling wait up to `max_redirect_backoff`.
    /// Two nodes that send a request back and forth (each believes the
    /// other owns the slot) are thus asked a few times per 100 ms, not
    /// thousands of times, until they agree.
    pub fn redirect_delay(&self, attempt: u32) -> Duration {
        match attempt.checked_sub(self.free_redirects) {
            None => Duration::ZERO,
            Some(n) => {
                let factor = 1u32.checked_shl(n).unwrap_or(u32::MAX);
                self.redirect_backoff
                    .saturating_mul(factor)
                    .min(self.max_redirect_backoff)
            }
        }
    }
}

impl Default for RedirectPolicy {
    fn default() -> RedirectPolicy {
        RedirectPolicy {
            free_redirects: 2,
            redirect_backoff: Duration::from_millis(5),
            max_redirect_backoff: Duration::from_millis(100),
            tryagain_backoff: Duration::from_millis(10),
            clusterdown_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        }
    }
}

// === impl Action ===

impl Action {
    /// Resolves an empty redirect host against `origin`, the node whose reply
    /// was decided on. Other actions are returned unchanged.
    pub fn with_origin(self, origin: &NodeAddr) -> Action {
        match self {
            Action::Moved { slot, addr } => Action::Moved {
                slot,
                addr: addr.or_host_of(origin),
            },
            Action::Ask { addr } => Action::Ask {
                addr: addr.or_host_of(origin),
            },
            other => other,
        }
    }
}

// === impl FailReason ===

impl FailReason {
    /// The error text the proxy sends (without the leading `-` and the
    /// CRLF). The `ERR orthrus:` prefix is stable; the rest is prose.
    pub fn message(self) -> &'static str {
        match self {
            FailReason::MalformedRedirect => {
                "ERR orthrus: a cluster node sent a malformed MOVED/ASK redirect"
            }
        }
    }
}

/// Decides what to do with `reply`, a complete reply frame from a backend.
/// `attempt` is how many redirects and retries this request already took
/// (0 for the reply to the first send); it sets the back-off, never a
/// limit.
///
/// The reply is classified in place by `orthrus_resp::classify` (its first
/// bytes only); only a MOVED or ASK is parsed further.
pub fn decide(reply: &[u8], attempt: u32, policy: &RedirectPolicy) -> Action {
    match classify(reply) {
        ReplyClass::Normal | ReplyClass::Error => Action::Done,
        ReplyClass::Moved | ReplyClass::Ask => match Redirect::parse(reply) {
            Some(Redirect::Moved { slot, addr }) => Action::Moved { slot, addr },
            Some(Redirect::Ask { addr, .. }) => Action::Ask { addr },
            None => Action::Fail(FailReason::MalformedRedirect),
        },
        ReplyClass::TryAgain => Action::RetryAfter {
            delay: policy.backoff(policy.tryagain_backoff, attempt),
            refresh: false,
        },
        ReplyClass::ClusterDown => Action::RetryAfter {
            delay: policy.backoff(policy.clusterdown_backoff, attempt),
            refresh: true,
        },
    }
}

/// Whether a replica's reply to a read means "ask the master instead"
/// rather than being the client's answer: a redirect (the node is not, or
/// no longer, a replica of the slot's master, or its connection did not
/// send `READONLY`), `TRYAGAIN`/`CLUSTERDOWN`, or a node that cannot
/// serve now: `LOADING` (a full sync or a restart), `MASTERDOWN` (its link
/// to the master is down and `replica-serve-stale-data` is off), `BUSY` (a
/// script or function runs too long), `READONLY` (it took the command for a
/// write). Any other reply, errors such as `WRONGTYPE` included, is the
/// answer.
pub fn replica_declined(reply: &[u8]) -> bool {
    const NOT_NOW: [&[u8]; 4] = [b"LOADING", b"MASTERDOWN", b"BUSY", b"READONLY"];
    match classify(reply) {
        ReplyClass::Normal => false,
        ReplyClass::Moved | ReplyClass::Ask | ReplyClass::TryAgain | ReplyClass::ClusterDown => {
            true
        }
        ReplyClass::Error => NOT_NOW.contains(&error_code(reply)),
    }
}

/// The first word of an error reply (`-CODE text` or RESP3 `!len CODE
/// text`): empty if there is none.
fn error_code(reply: &[u8]) -> &[u8] {
    let text = match reply.split_first() {
        Some((b'-', text)) => text,
        Some((b'!', rest)) => rest
            .iter()
            .position(|&b| b == b'\n')
            .and_then(|lf| rest.get(lf + 1..))
            .unwrap_or_default(),
        _ => return &[],
    };
    let end = text
        .iter()
        .position(|&b| b == b' ' || b == b'\r')
        .unwrap_or(text.len());
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ordinary_replies_are_done() {
        let policy = RedirectPolicy::default();
        let replies: &[&[u8]] = &[
            b"+OK\r\n",
            b":1\r\n",
            b"$5\r\nMOVED\r\n",
            b"*1\r\n$3\r\nASK\r\n",
            b"-ERR unknown command 'FOO'\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            b"-CROSSSLOT Keys in request don't hash to the same slot\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-ERR MOVED 1 h:1\r\n",
            b"!3\r\nERR\r\n",
            b"-MOVED\r\n",
            b"-TRYAGAINX\r\n",
            b"",
        ];
        for reply in replies {
            assert_eq!(
                decide(reply, 0, &policy),
                Action::Done,
                "{:?}",
                String::from_utf8_lossy(reply)
            );
        }
    }

    #[test]
    fn moved_and_ask() {
        let policy = RedirectPolicy::default();
        assert_eq!(
            decide(b"-MOVED 3999 127.0.0.1:6381\r\n", 0, &policy),
            Action::Moved {
                slot: Slot::new(3999).unwrap(),
                addr: NodeAddr::new("127.0.0.1", 6381)
            }
        );
        assert_eq!(
            decide(b"-ASK 3999 127.0.0.1:6382\r\n", 4, &policy),
            Action::Ask {
                addr: NodeAddr::new("127.0.0.1", 6382)
            }
        );
        assert_eq!(
            decide(b"!16\r\nASK 1 [::1]:7001\r\n", 0, &policy),
            Action::Ask {
                addr: NodeAddr::new("::1", 7001)
            }
        );
    }

    #[test]
    fn empty_host_resolves_against_origin() {
        let origin = NodeAddr::new("10.0.0.3", 7000);
        let action = decide(b"-MOVED 12 :7004\r\n", 0, &RedirectPolicy::default());
        assert_eq!(
            action.with_origin(&origin),
            Action::Moved {
                slot: Slot::new(12).unwrap(),
                addr: NodeAddr::new("10.0.0.3", 7004)
            }
        );
        let action = decide(b"-ASK 12 :7005\r\n", 0, &RedirectPolicy::default());
        assert_eq!(
            action.with_origin(&origin),
            Action::Ask {
                addr: NodeAddr::new("10.0.0.3", 7005)
            }
        );
        assert_eq!(Action::Done.with_origin(&origin), Action::Done);
    }

    #[test]
    fn malformed_redirect_fails() {
        let policy = RedirectPolicy::default();
        for reply in [
            &b"-MOVED 3999\r\n"[..],
            b"-MOVED 20000 h:1\r\n",
            b"-ASK x h:1\r\n",
            b"-MOVED 1 h:0\r\n",
        ] {
            assert_eq!(
                decide(reply, 0, &policy),
                Action::Fail(FailReason::MalformedRedirect)
            );
        }
    }

    #[test]
    fn tryagain_backs_off_and_caps() {
        let policy = RedirectPolicy::default();
        let delay = |attempt| match decide(
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            attempt,
            &policy,
        ) {
            Action::RetryAfter {
                delay,
                refresh: false,
            } => delay,
            other => panic!("attempt {attempt}: {other:?}"),
        };
        assert_eq!(delay(0), ms(10));
        assert_eq!(delay(1), ms(20));
        assert_eq!(delay(2), ms(40));
        assert_eq!(delay(6), ms(640));
        assert_eq!(delay(7), ms(1000));
        assert_eq!(delay(39), ms(1000));
    }

    #[test]
    fn clusterdown_refreshes() {
        let policy = RedirectPolicy::default();
        assert_eq!(
            decide(b"-CLUSTERDOWN Hash slot not served\r\n", 0, &policy),
            Action::RetryAfter {
                delay: ms(100),
                refresh: true
            }
        );
        assert_eq!(
            decide(b"-CLUSTERDOWN The cluster is down\r\n", 3, &policy),
            Action::RetryAfter {
                delay: ms(800),
                refresh: true
            }
        );
        assert_eq!(
            decide(b"-CLUSTERDOWN\r\n", 4, &policy),
            Action::RetryAfter {
                delay: ms(1000),
                refresh: true
            }
        );
    }

    #[test]
    fn no_count_budget() {
        // The deadline, kept by the caller, is the only limit.
        let policy = RedirectPolicy::default();
        let moved = b"-MOVED 1 127.0.0.1:7000\r\n";
        assert!(matches!(decide(moved, 5, &policy), Action::Moved { .. }));
        assert!(matches!(
            decide(moved, u32::MAX, &policy),
            Action::Moved { .. }
        ));
        let ask = b"-ASK 1 127.0.0.1:7000\r\n";
        assert!(matches!(decide(ask, 500, &policy), Action::Ask { .. }));
        assert_eq!(
            decide(b"-MOVED x\r\n", 50, &policy),
            Action::Fail(FailReason::MalformedRedirect)
        );
        assert!(matches!(
            decide(b"-TRYAGAIN\r\n", 50, &policy),
            Action::RetryAfter { refresh: false, .. }
        ));
        assert!(matches!(
            decide(b"-CLUSTERDOWN x\r\n", 50, &policy),
            Action::RetryAfter { refresh: true, .. }
        ));
    }

    #[test]
    fn redirects_back_off_after_the_free_ones() {
        let policy = RedirectPolicy::default();
        assert_eq!(policy.redirect_delay(0), Duration::ZERO);
        assert_eq!(policy.redirect_delay(1), Duration::ZERO);
        assert_eq!(policy.redirect_delay(2), ms(5));
        assert_eq!(policy.redirect_delay(3), ms(10));
        assert_eq!(policy.redirect_delay(6), ms(80));
        assert_eq!(policy.redirect_delay(7), ms(100));
        assert_eq!(policy.redirect_delay(u32::MAX), ms(100));
    }

    #[test]
    fn backoff_saturates() {
        let policy = RedirectPolicy {
            max_backoff: Duration::MAX,
            ..RedirectPolicy::default()
        };
        assert_eq!(policy.backoff(ms(10), 31), ms(10) * (1 << 31));
        assert_eq!(policy.backoff(ms(10), 32), ms(10) * u32::MAX);
        assert_eq!(policy.backoff(Duration::MAX, 3), Duration::MAX);
    }

    #[test]
    fn messages_are_stable() {
        let reason = FailReason::MalformedRedirect;
        assert!(reason.message().starts_with("ERR orthrus: "));
        assert!(!reason.message().contains('\n'));
    }

    #[test]
    fn what_a_replica_declines() {
        let declined: &[&[u8]] = &[
            b"-MOVED 3999 127.0.0.1:6381\r\n",
            b"-ASK 3999 127.0.0.1:6381\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
            b"-BUSY Redis is busy running a script.\r\n",
            b"-READONLY You can't write against a read only replica.\r\n",
            b"!7\r\nLOADING\r\n",
            b"-LOADING\r\n",
        ];
        for reply in declined {
            assert!(
                replica_declined(reply),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
        let answers: &[&[u8]] = &[
            b"$1\r\nx\r\n",
            b"$-1\r\n",
            b"+OK\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            b"-ERR unknown command\r\n",
            b"-LOADINGX not a code we know\r\n",
            b"-BUSYKEY Target key name already exists.\r\n",
            b"$7\r\nLOADING\r\n",
            b"",
        ];
        for reply in answers {
            assert!(
                !replica_declined(reply),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
    }
}
