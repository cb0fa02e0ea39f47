//! A request as forwarded, the second of a request's two stages
//! (`session::dispatch` runs the first): reached only by requests that
//! passed every check, on the request as the client sent it. Here and
//! nowhere else a route's prefix is cut from its keys (`remove_prefix`)
//! and a route's mirrors get their copies, for single requests, blocking
//! commands and scripts ([`request`]) and for each part of a split command
//! ([`part`]) alike.
//!
//! Each key is copied by its own route: a mirror gets the keys of the
//! routes that mirror to it. A command orthrus can split (MSET, DEL, ...)
//! whose keys' routes mirror differently is copied as one command of
//! each mirror's keys; any other command (RENAME, a script, ...) goes
//! whole to the mirrors of every route among its keys.

use std::ops::ControlFlow;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use orthrus_resp::{Request, encode};

use crate::cmd::{mirror, script};
use crate::route::kind::Merge;
use crate::route::prefix::{Mirror, Place, Prefixes};
use crate::route::table::CommandInfo;
use crate::route::table::cut::cut;
use crate::worker::WorkerCtx;

/// The mirrors a request's keys name: none, one route's for every key,
/// or several (or some keys mirrored and others not).
enum Mirrors<'p> {
    None,
    All(&'p Mirror),
    Mixed(Vec<&'p Mirror>),
}

/// `req`, to go to `place` in database `db`, as its upstream is to get
/// it: its keys cut where their route removes its prefix, and (with
/// `copies`) its copies sent to the mirrors of its keys' routes. `None`
/// when it goes as it is.
#[cold]
pub fn request(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    (place, db): (Place, u32),
    info: Option<&Arc<CommandInfo>>,
    copies: bool,
) -> Option<Request> {
    let info = info?;
    let prefixes = ctx.prefixes();
    let mirrors = if copies && prefixes.mirrors() {
        mirrors_of(&prefixes, info, req)
    } else {
        Mirrors::None
    };
    let sent = match prefixes.strips() {
        true => cut(req, info, &prefixes),
        false => None,
    };
    let readonly = info.readonly;
    match mirrors {
        Mirrors::None => {}
        Mirrors::All(mirror) => {
            let frame = for_mirror(ctx, sent.as_ref().unwrap_or(req));
            mirror::copy(ctx, mirror, (place, db), &frame, readonly);
        }
        Mirrors::Mixed(mirrors) => match info.split {
            Some(merge) => {
                let step = step_of(merge);
                let keys = req.arg_count().saturating_sub(1).checked_div(step);
                let keys = 0..keys.unwrap_or(0);
                copy_by_route(ctx, (req, step, &prefixes), keys, (place, db), readonly);
            }
            None => {
                let frame = for_mirror(ctx, sent.as_ref().unwrap_or(req));
                for mirror in mirrors {
                    mirror::copy(ctx, mirror, (place, db), &frame, readonly);
                }
            }
        },
    }
    sent
}

/// What a mirror gets of `req`: its frame, or for an EVALSHA whose body
/// orthrus holds, the EVAL of that body (the mirror may lack the script,
/// and nothing would load it there: its replies are not read for
/// `NOSCRIPT`).
fn for_mirror(ctx: &WorkerCtx, req: &Request) -> Bytes {
    let name = req.arg(0).unwrap_or_default();
    if name.eq_ignore_ascii_case(b"evalsha") || name.eq_ignore_ascii_case(b"evalsha_ro") {
        let body = req.arg(1).and_then(|sha| ctx.shared.scripts.body(sha));
        if let Some(frame) = body.and_then(|body| script::as_eval(req, &body)) {
            return frame;
        }
    }
    req.frame().clone()
}

/// The frame of one part of a split command: the keys numbered `keys` of
/// `req` (whose keys come every `step` arguments from the first, with
/// their values), cut where their route removes its prefix; the mirrors
/// of their routes get their copies (`to`: the part's place and the
/// client's database).
pub fn part(
    ctx: &Rc<WorkerCtx>,
    (req, step, prefixes): (&Request, usize, &Prefixes),
    keys: impl Iterator<Item = usize> + Clone,
    to: (Place, u32),
    readonly: bool,
) -> Bytes {
    let frame = frame_of_keys((req, step, prefixes), keys.clone());
    if prefixes.mirrors() {
        let mut mirrored = keys.clone().map(|k| mirror_of_key(prefixes, req, step, k));
        let first = mirrored.next().flatten();
        match first {
            Some(mirror) if mirrored.all(|m| m.is_some_and(|m| std::ptr::eq(m, mirror))) => {
                mirror::copy(ctx, mirror, to, &frame, readonly);
            }
            _ => copy_by_route(ctx, (req, step, prefixes), keys, to, readonly),
        }
    }
    frame
}

/// Each mirror among the routes of keys `keys` gets a command of the keys
/// whose route mirrors to it.
#[cold]
fn copy_by_route(
    ctx: &Rc<WorkerCtx>,
    (req, step, prefixes): (&Request, usize, &Prefixes),
    keys: impl Iterator<Item = usize> + Clone,
    to: (Place, u32),
    readonly: bool,
) {
    let mut seen: Vec<&Mirror> = Vec::new();
    for k in keys.clone() {
        let Some(mirror) = mirror_of_key(prefixes, req, step, k) else {
            continue;
        };
        if seen.iter().any(|m| std::ptr::eq(*m, mirror)) {
            continue;
        }
        seen.push(mirror);
        let its = keys.clone().filter(|&k| {
            mirror_of_key(prefixes, req, step, k).is_some_and(|m| std::ptr::eq(m, mirror))
        });
        let frame = frame_of_keys((req, step, prefixes), its);
        mirror::copy(ctx, mirror, to, &frame, readonly);
    }
}

/// The mirrors the keys of `req` name.
fn mirrors_of<'p>(prefixes: &'p Prefixes, info: &CommandInfo, req: &Request) -> Mirrors<'p> {
    let mut found: Vec<&Mirror> = Vec::new();
    let (mut keys, mut mirrored) = (0usize, 0usize);
    let _ = info.for_each_key(req, |key, _| {
        keys = keys.saturating_add(1);
        if let Some(mirror) = prefixes.mirror_of(key) {
            mirrored = mirrored.saturating_add(1);
            if !found.iter().any(|m| std::ptr::eq(*m, mirror)) {
                found.push(mirror);
            }
        }
        ControlFlow::Continue(())
    });
    match found.as_slice() {
        [] => Mirrors::None,
        [one] if mirrored == keys => Mirrors::All(one),
        _ => Mirrors::Mixed(found),
    }
}

fn mirror_of_key<'p>(
    prefixes: &'p Prefixes,
    req: &Request,
    step: usize,
    k: usize,
) -> Option<&'p Mirror> {
    prefixes.mirror_of(arg_of_key(req, k, step, 0)?)
}

/// The command of `req`'s name and the keys numbered `keys`, each with its
/// `step - 1` values, the keys cut where their route removes its prefix.
fn frame_of_keys(
    (req, step, prefixes): (&Request, usize, &Prefixes),
    keys: impl Iterator<Item = usize> + Clone,
) -> Bytes {
    let name = req.arg(0).unwrap_or_default();
    let strips = prefixes.strips();
    let arg = |k: usize, j: usize| {
        let arg = arg_of_key(req, k, step, j).unwrap_or_default();
        if strips && j == 0 {
            prefixes.stripped(arg)
        } else {
            arg
        }
    };
    let mut one = keys.clone();
    if let (Some(k), None) = (one.next(), one.next()) {
        // One key (with its value, for MSET): its arguments in place,
        // which encode in a fraction of what the general chain costs.
        let value = if step > 1 { arg(k, 1) } else { &[] };
        let args = [name, arg(k, 0), value];
        return encode::command(args.get(..=step.min(2)).unwrap_or_default());
    }
    encode::command(
        std::iter::once(name).chain(keys.flat_map(move |k| (0..step).map(move |j| arg(k, j)))),
    )
}

/// How many arguments each key of a split command takes, itself included.
pub fn step_of(merge: Merge) -> usize {
    if merge == Merge::Ok { 2 } else { 1 }
}

/// Argument `j` of key number `k` (0 is the first key) of a command whose
/// keys come every `step` arguments after the name; `None` past the end.
pub fn arg_of_key(req: &Request, k: usize, step: usize, j: usize) -> Option<&[u8]> {
    let i = k.checked_mul(step)?.checked_add(j)?.checked_add(1)?;
    req.arg(i)
}
