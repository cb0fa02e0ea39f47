//! Which route prefixes a command's keys may take in the users mode
//! ([`crate::world`]), by orthrus's documented rules (docs/operations.md,
//! "Several clusters"): keys of a route that removes its prefix are
//! refused in MULTI and WATCH and for commands whose replies name keys
//! (blocking pops, LMPOP, ZMPOP, XREAD, XREADGROUP); a mirrored route
//! copies no command inside MULTI and no blocking command, so its keys are
//! kept out of both (the mirror would miss what they do). Keys of one
//! command share a route, but for the commands orthrus splits per route.

use crate::rng::Rng;
use crate::world::{CUT, MIRRORED, World};

/// Commands orthrus splits per upstream and slot: their keys may mix routes.
pub const SPLIT: &[&str] = &["MGET", "MSET", "DEL", "UNLINK", "EXISTS", "TOUCH"];

/// Commands whose replies name keys (and blocking ones, which may too).
const NAMING_REPLIES: &[&str] = &[
    "LMPOP",
    "ZMPOP",
    "XREAD",
    "XREADGROUP",
    "BLPOP",
    "BRPOP",
    "BLMPOP",
    "BZPOPMIN",
    "BZPOPMAX",
    "BZMPOP",
    "BLMOVE",
    "BRPOPLPUSH",
];

/// Where a command is sent from: free, inside MULTI (or WATCH), or
/// blocking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    Free,
    Transaction,
    Blocking,
}

/// A prefix for a command named `name` (upper case), sent in `ctx`.
pub fn pick(rng: &mut Rng, world: &World, name: &str, ctx: Context) -> &'static str {
    let mut out = vec![""];
    let cut_refused = ctx != Context::Free || NAMING_REPLIES.contains(&name);
    if !(world.cut && cut_refused) {
        out.push(CUT);
    }
    if ctx == Context::Free {
        out.push(MIRRORED);
    }
    let picked: &&'static str = rng.pick(&out);
    picked
}

/// Any prefix: a key of a split command.
pub fn any(rng: &mut Rng) -> &'static str {
    const ALL: [&str; 3] = ["", CUT, MIRRORED];
    let picked: &&'static str = rng.pick(&ALL);
    picked
}
