//! `remove_prefix`: a route that cuts its prefix from its keys on the way
//! to its upstream. Routing has already placed each key by the key as cut
//! ([`crate::route::prefix::Prefixes::place_of`]); this is the rewrite of a
//! request's keys, done once it has passed every check, and the commands
//! such a route refuses: those whose replies name keys (blocking pops,
//! LMPOP/ZMPOP, XREAD), which would give them back without their prefix,
//! and WATCH, whose keys are watched on a connection of its own.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use orthrus_resp::Request;

use super::{CommandInfo, Rejection, Route};
use crate::route::prefix::Prefixes;

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

/// Why `req`, routed `route`, cannot go with its keys cut, if it cannot.
pub(super) fn refusal(
    route: &Route,
    req: &Request,
    info: &Arc<CommandInfo>,
    prefixes: &Prefixes,
) -> Option<Rejection> {
    let why = match route {
        Route::Slot(_) | Route::Blocking(_) if NAMING_KEYS.contains(&&*info.name) => NAMES_KEYS,
        Route::Transaction => "a route with remove_prefix takes no transaction",
        _ => return None,
    };
    cuts_any(req, Some(info), prefixes).then(|| Rejection::Unsupported(Arc::clone(info), why))
}

/// `req` with every key that loses a prefix cut, or `None` when none
/// does.
pub fn cut(req: &Request, info: &CommandInfo, prefixes: &Prefixes) -> Option<Request> {
    let mut keys = HashSet::new();
    let _ = info.for_each_key(req, |key, _| {
        if prefixes.stripped(key).len() != key.len() {
            keys.insert(key.as_ptr());
        }
        ControlFlow::Continue(())
    });
    if keys.is_empty() {
        return None;
    }
    let args: Vec<&[u8]> = req
        .args()
        .map(|arg| match keys.contains(&arg.as_ptr()) {
            true => prefixes.stripped(arg),
            false => arg,
        })
        .collect();
    Some(Request::from_args(&args))
}
