//! `remove_prefix`: a keyed request whose keys a route takes goes to its
//! upstream with the route's prefix cut from them, in a frame of its own,
//! and to the slot of the keys as cut (a blocking command stays one).
//! Commands whose replies name keys (blocking pops, LMPOP/ZMPOP, XREAD)
//! would give them back without their prefix: on such a route they are
//! refused.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use orthrus_resp::Request;

use super::{CommandInfo, Rejection, Route};
use crate::route::prefix::{Place, Prefixes};

/// Commands whose replies name the keys they took.
const NAMING_KEYS: &[&str] = &[
    "blpop",
    "brpop",
    "blmpop",
    "bzpopmin",
    "bzpopmax",
    "bzmpop",
    "lmpop",
    "zmpop",
    "xread",
    "xreadgroup",
];

/// Why a command is refused on a route with `remove_prefix`.
const NAMES_KEYS: &str =
    "its reply names keys, which a route with remove_prefix would give back without their prefix";

/// What becomes of a request with routes that remove their prefixes.
pub enum Stripped {
    /// No key of it loses a prefix.
    Unchanged,
    /// Sent as this request, by this route.
    Rewritten(Request, Route),
    Refused(Rejection),
}

/// Whether a key of `req` loses a prefix on its way.
pub fn cuts_any(req: &Request, info: Option<&Arc<CommandInfo>>, prefixes: &Prefixes) -> bool {
    info.is_some_and(|info| {
        info.for_each_key(req, |key, _| {
            match prefixes.stripped(key).len() != key.len() {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            }
        })
        .is_break()
    })
}

/// The keys of `req` that lose a prefix, by where they are in its frame.
fn cut_keys(req: &Request, info: &CommandInfo, prefixes: &Prefixes) -> HashSet<*const u8> {
    let mut keys = HashSet::new();
    let _ = info.for_each_key(req, |key, _| {
        if prefixes.stripped(key).len() != key.len() {
            keys.insert(key.as_ptr());
        }
        ControlFlow::Continue(())
    });
    keys
}

/// `req` (routed `route`) with its keys as their upstream knows them.
#[cold]
pub fn strip(
    req: &Request,
    route: &Route,
    info: Option<&Arc<CommandInfo>>,
    prefixes: &Prefixes,
) -> Stripped {
    let Some(info) = info else {
        return Stripped::Unchanged;
    };
    let keys = cut_keys(req, info, prefixes);
    if keys.is_empty() {
        return Stripped::Unchanged;
    }
    let (place, blocking) = match route {
        Route::Slot(_) | Route::Blocking(_) if NAMING_KEYS.contains(&&*info.name) => {
            return Stripped::Refused(Rejection::Unsupported(Arc::clone(info), NAMES_KEYS));
        }
        Route::Slot(place) => (*place, false),
        Route::Blocking(place) => (*place, true),
        // WATCH is refused rather than sent with its keys uncut.
        Route::Transaction => {
            return Stripped::Refused(Rejection::Unsupported(
                Arc::clone(info),
                "a route with remove_prefix takes no transaction",
            ));
        }
        // Split commands cut their keys part by part.
        _ => return Stripped::Unchanged,
    };
    let args: Vec<&[u8]> = req
        .args()
        .map(|arg| {
            if keys.contains(&arg.as_ptr()) {
                prefixes.stripped(arg)
            } else {
                arg
            }
        })
        .collect();
    let cut = Request::from_args(&args);
    match info.slot(&cut) {
        Ok(Some(slot)) => {
            let place = Place {
                upstream: place.upstream,
                slot,
            };
            let route = match blocking {
                true => Route::Blocking(place),
                false => Route::Slot(place),
            };
            Stripped::Rewritten(cut, route)
        }
        Ok(None) => Stripped::Unchanged,
        Err(_) => Stripped::Refused(Rejection::CrossSlot),
    }
}
