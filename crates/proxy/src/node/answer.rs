//! What orthrus answers itself for a request the cluster did not answer
//! (no owner, still redirecting at the deadline), the one way an error
//! reply is made, and what every redirect implies whoever follows it.

use bytes::{Bytes, BytesMut};
use orthrus_cluster::{Action, NodeAddr, SlotMap};
use orthrus_resp::encode;

use super::Env;
use crate::observe::stats::WorkerStats;
use crate::route::prefix::{Place, Upstream};

/// Does what every redirect decision implies whoever follows it (shared
/// requests, blocking commands, transactions): count it, point the slot at
/// its new owner after MOVED, ask for a refresh when the topology changed.
pub fn note(env: &Env, action: &Action, upstream: Upstream) {
    let stats = env.stats();
    match action {
        Action::Done => {}
        Action::Moved { slot, addr } => {
            WorkerStats::bump(&stats.moved);
            env.shared.patch_slot(
                Place {
                    upstream,
                    slot: *slot,
                },
                addr,
            );
            env.shared.request_refresh_of(upstream);
        }
        Action::Ask { .. } => WorkerStats::bump(&stats.ask),
        Action::RetryAfter { refresh: true, .. } => {
            WorkerStats::bump(&stats.clusterdown);
            env.shared.request_refresh_of(upstream);
        }
        Action::RetryAfter { refresh: false, .. } => WorkerStats::bump(&stats.tryagain),
        Action::Fail(_) => WorkerStats::bump(&stats.backend_errors),
    }
}

/// The reply to a request the cluster was still redirecting when its
/// deadline came: the nodes did not agree on the slot's owner in time.
pub fn still_moving(env: &Env, addr: &NodeAddr, upstream: Upstream) -> Bytes {
    let setting = env.shared.request_timeout_setting(upstream);
    error_reply(&format!(
        "TRYAGAIN orthrus: the cluster was still redirecting this request (last to {addr}) when its deadline ({setting}) passed; retry"
    ))
}

/// The reply to a request whose slot has no owner in the slot map.
pub fn no_owner(map: &SlotMap) -> Bytes {
    if map.covered_slots() == 0 {
        error_reply(
            "CLUSTERDOWN orthrus: the cluster topology is not known yet (no seed node has answered)",
        )
    } else {
        error_reply("CLUSTERDOWN Hash slot not served")
    }
}

/// A RESP error reply (`msg` starts with its code, e.g. `ERR ...`).
pub fn error_reply(msg: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(msg.len() + 3);
    encode::error(&mut out, msg.as_bytes());
    out.freeze()
}
