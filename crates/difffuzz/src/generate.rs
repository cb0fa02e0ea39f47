//! The generator: a random but valid [`Sequence`] from a seed.
//!
//! It keeps a model of each connection (in MULTI and on which hash tag,
//! subscribed, replies off) so that what it makes is something a correct
//! client could send: commands queued in MULTI share the transaction's
//! slot, a RESP2 subscriber sends only what Redis allows there, a blocked
//! connection is woken by another. Keys and values come from [`crate::fill`].
//! In the users mode ([`sequence_in`]) each connection logs in first, and
//! keys take route prefixes by [`crate::routing`]'s rules.

use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use crate::fill::{CHANNELS, Keys, TAGS, any_key, tag_key};
use crate::grammar::{self, Entry};
use crate::rng::Rng;
use crate::routing::{self, Context};
use crate::sequence::{Action, Args, Proto, Sequence, Step};
use crate::spec::{COMMANDS, DB_COMMANDS, USER_COMMANDS};
use crate::world::World;

const PATTERNS: &[&str] = &["ch*", "c?1", "*"];

/// How large sequences are.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub min_steps: usize,
    pub max_steps: usize,
    pub max_conns: usize,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            min_steps: 20,
            max_steps: 120,
            max_conns: 3,
        }
    }
}

#[derive(Clone, Default)]
struct ConnModel {
    resp3: bool,
    /// Inside MULTI: the transaction's hash tag and route prefix.
    multi: Option<(&'static str, &'static str)>,
    /// The users mode: the index of the user the connection logged in as.
    user: Option<usize>,
    channels: Vec<&'static str>,
    patterns: Vec<&'static str>,
    shards: Vec<&'static str>,
    reply_off: bool,
}

/// The sequence number `index` of the run seeded with `seed`.
pub fn sequence(seed: u64, index: u64, shape: Shape) -> Sequence {
    sequence_in(seed, index, shape, None)
}

/// The same, in the users mode when `world` is given: each connection
/// first logs in as a user drawn for it (root among them), and keys take
/// route prefixes by [`routing`]'s rules.
pub fn sequence_in(seed: u64, index: u64, shape: Shape, world: Option<&World>) -> Sequence {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0xa076_1d64_78bd_642f));
    let n_conns = rng.range(1, shape.max_conns.max(1) as i64) as usize;
    let mut models: Vec<ConnModel> = (0..n_conns)
        .map(|_| ConnModel {
            resp3: rng.chance(30),
            ..ConnModel::default()
        })
        .collect();
    let conns = models
        .iter()
        .map(|m| if m.resp3 { Proto::Resp3 } else { Proto::Resp2 })
        .collect();
    let target = rng.range(shape.min_steps as i64, shape.max_steps as i64) as usize;
    let mut steps = Vec::with_capacity(target + 4);
    if let Some(w) = world {
        for (c, m) in models.iter_mut().enumerate() {
            let u = rng.below(w.users.len());
            m.user = Some(u);
            steps.push(auth(c, w, u, m.resp3));
        }
    }
    while steps.len() < target {
        // A connection whose replies are off keeps the turn until CLIENT
        // REPLY ON: nothing tells when its silent commands ran, and the
        // reply to ON, coming after them, does.
        let c = match models.iter().position(|m| m.reply_off) {
            Some(off) => off,
            None => rng.below(n_conns),
        };
        next_steps(&mut rng, &mut models, c, &mut steps, world);
    }
    Sequence { conns, steps }
}

/// Connection `c` logs in as user `u` of `world` (a RESP3 one with
/// `HELLO 3 AUTH`: the `HELLO 3` it opened with was refused, `-NOAUTH`).
fn auth(c: usize, world: &World, u: usize, resp3: bool) -> Step {
    let user = &world.users[u];
    let (name, pw) = (user.name.as_str(), user.password.as_str());
    let args = match resp3 {
        true => words(&["HELLO", "3", "AUTH", name, pw]),
        false => words(&["AUTH", name, pw]),
    };
    Step {
        conn: c,
        action: Action::Call(args),
    }
}

/// The plain table with [`DB_COMMANDS`].
fn db_table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        COMMANDS
            .iter()
            .chain(DB_COMMANDS)
            .filter_map(|(w, spec)| grammar::parse(*w, spec).ok())
            .collect()
    })
}

/// The parsed command table.
pub fn table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        COMMANDS
            .iter()
            .filter_map(|(w, spec)| grammar::parse(*w, spec).ok())
            .collect()
    })
}

/// The users mode's table: the plain one without the reads of the whole
/// keyspace (KEYS, DBSIZE, RANDOMKEY: through orthrus they see every
/// upstream's keys as stored, the mirror's and cut names included), with
/// [`USER_COMMANDS`].
pub fn user_table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let whole = |spec: &str| ["KEYS", "DBSIZE", "RANDOMKEY"].contains(&first_word(spec));
        COMMANDS
            .iter()
            .filter(|(_, spec)| !whole(spec))
            .chain(USER_COMMANDS)
            .filter_map(|(w, spec)| grammar::parse(*w, spec).ok())
            .collect()
    })
}

/// Entries never queued in MULTI: the `!` ones, and in the users mode
/// SORT_RO and SORT with BY and GET patterns (orthrus refuses BY and GET
/// to users without `~*` at queue time, aborting the transaction, where
/// Redis queues them and fails that one at EXEC: the EXEC would differ).
fn skipped_in_multi(e: &Entry, world: Option<&World>) -> bool {
    let word = |want: &str| {
        e.body
            .iter()
            .any(|n| matches!(n, grammar::Node::Word(w) if w == want))
    };
    e.no_multi || (world.is_some() && (word("SORT_RO") || word("sortby")))
}

fn first_word(spec: &str) -> &str {
    spec.trim_start_matches('!')
        .split(' ')
        .next()
        .unwrap_or_default()
}

fn next_steps(
    rng: &mut Rng,
    models: &mut [ConnModel],
    c: usize,
    out: &mut Vec<Step>,
    world: Option<&World>,
) {
    let step = |action| Step { conn: c, action };
    let m = &mut models[c];
    // CLIENT REPLY is sent only as root (a refused OFF would leave both
    // sides reading a frame too few). HELLO and RESET go as every user:
    // both run whatever the user's command rules (`no-auth`).
    let trusted = match (world, m.user) {
        (Some(w), Some(u)) => w.users[u].is_root(),
        _ => true,
    };
    if m.subscribed() && !m.resp3 {
        out.push(step(Action::Call(subscriber_command(rng, m))));
        return;
    }
    if let Some((tag, prefix)) = m.multi {
        let roll = rng.below(100);
        if roll < 20 {
            m.multi = None;
            out.push(step(Action::Call(words(&["EXEC"]))));
        } else if roll < 24 {
            m.multi = None;
            out.push(step(Action::Call(words(&["DISCARD"]))));
        } else {
            let args = command_in(rng, Some((tag, prefix)), true, world);
            out.push(step(Action::Call(args)));
        }
        return;
    }
    if m.reply_off {
        if rng.chance(30) {
            m.reply_off = false;
            out.push(step(Action::Call(words(&["CLIENT", "REPLY", "ON"]))));
        } else {
            out.push(step(Action::Call(command_in(rng, None, false, world))));
        }
        return;
    }
    let free = !m.subscribed();
    match rng.below(100) {
        0..=2 if free => {
            let tag = *rng.pick(TAGS);
            let prefix = match world {
                Some(w) => routing::pick(rng, w, "MULTI", Context::Transaction),
                None => "",
            };
            let watched = rng.chance(40);
            if watched {
                let mut args = words(&["WATCH"]);
                args.push(format!("{prefix}{}", tag_key(rng, tag)).into_bytes());
                out.push(step(Action::Call(args)));
            }
            m.multi = Some((tag, prefix));
            out.push(step(Action::Call(words(&["MULTI"]))));
            if watched && let Some(d) = writer(rng, models, c) {
                // Another client touches the watched key (or one beside it).
                let key = format!("{prefix}{}", tag_key(rng, tag));
                let args = words(&["SET", &key, "w"]);
                out.push(Step {
                    conn: d,
                    action: Action::Call(args),
                });
            }
        }
        3..=5 => out.push(step(Action::Call(subscriber_command(rng, m)))),
        6 if free && trusted => {
            if rng.chance(50) {
                m.reply_off = true;
                out.push(step(Action::Call(words(&["CLIENT", "REPLY", "OFF"]))));
            } else {
                out.push(step(Action::Call(words(&["CLIENT", "REPLY", "SKIP"]))));
                out.push(step(Action::Call(command_in(rng, None, false, world))));
                // Its reply says the skipped command ran.
                out.push(step(Action::Call(words(&["PING"]))));
            }
        }
        7..=9 => {
            let n = rng.range(2, 6);
            let cmds = (0..n)
                .map(|_| command_in(rng, None, !free, world))
                .collect();
            out.push(step(Action::Pipeline(cmds)));
        }
        10 if free => wake_up(rng, models, c, out, world),
        11..=12 => out.push(step(Action::Scan(scan_command(rng, world)))),
        13 if free => {
            let publish = if rng.chance(70) {
                "PUBLISH"
            } else {
                "SPUBLISH"
            };
            let chan = *rng.pick(CHANNELS);
            out.push(step(Action::Call(words(&[publish, chan, "msg"]))));
        }
        14 if rng.chance(10) => {
            let user = m.user;
            *m = ConnModel {
                user,
                ..ConnModel::default()
            };
            out.push(step(Action::Call(words(&["RESET"]))));
            // RESET logs out (to the default user, who has a password).
            if let (Some(w), Some(u)) = (world, user) {
                out.push(auth(c, w, u, false));
            }
        }
        // The protocol switched in the middle (not while subscribed: RESP2
        // subscriber mode would refuse most of what follows).
        15 if free && rng.chance(30) => {
            m.resp3 = !m.resp3;
            let to = if m.resp3 { "3" } else { "2" };
            out.push(step(Action::Call(words(&["HELLO", to]))));
        }
        // A subscriber (RESP3) sends no PUBLISH: the message to itself may
        // come before or after the reply, both correct.
        _ => out.push(step(Action::Call(command_in(rng, None, !free, world)))),
    }
}

/// Another connection that can run a plain command now, if there is one.
fn writer(rng: &mut Rng, models: &[ConnModel], c: usize) -> Option<usize> {
    let others: Vec<usize> = (0..models.len())
        .filter(|&d| d != c && models[d].multi.is_none() && !models[d].reply_off)
        .filter(|&d| !models[d].subscribed())
        .collect();
    (!others.is_empty()).then(|| *rng.pick(&others))
}

/// A blocking command on one connection, woken by a push on another (it
/// blocks for 2 s at most, so a busy machine does not make it time out).
fn wake_up(
    rng: &mut Rng,
    models: &[ConnModel],
    c: usize,
    out: &mut Vec<Step>,
    world: Option<&World>,
) {
    let Some(d) = writer(rng, models, c) else {
        return;
    };
    let prefix = match world {
        Some(w) => routing::pick(rng, w, "BLPOP", Context::Blocking),
        None => "",
    };
    let key = format!("{prefix}{}", any_key(rng));
    let (block, wake): (&[&str], &[&str]) = match rng.below(4) {
        0 => (&["BLPOP", &key, "2"], &["RPUSH", &key, "v"]),
        1 => (&["BZPOPMIN", &key, "2"], &["ZADD", &key, "1", "m1"]),
        2 => (&["BRPOP", &key, "2"], &["LPUSH", &key, "w"]),
        _ => (
            &["XREAD", "BLOCK", "2000", "STREAMS", &key, "$"],
            &["XADD", &key, "9-9", "f", "v"],
        ),
    };
    out.push(Step {
        conn: c,
        action: Action::Send(words(block)),
    });
    out.push(Step {
        conn: d,
        action: Action::Call(words(wake)),
    });
    out.push(Step {
        conn: c,
        action: Action::Collect,
    });
}

/// A (un)subscribe command (or PING), updating the model.
fn subscriber_command(rng: &mut Rng, m: &mut ConnModel) -> Args {
    let chan = *rng.pick(CHANNELS);
    let pat = *rng.pick(PATTERNS);
    let add = |list: &mut Vec<&'static str>, item| {
        if !list.contains(&item) {
            list.push(item);
        }
    };
    match rng.below(9) {
        0..=1 => {
            add(&mut m.channels, chan);
            words(&["SUBSCRIBE", chan])
        }
        2 => {
            add(&mut m.patterns, pat);
            words(&["PSUBSCRIBE", pat])
        }
        3 => {
            add(&mut m.shards, chan);
            words(&["SSUBSCRIBE", chan])
        }
        4 => {
            m.channels.clear();
            words(&["UNSUBSCRIBE"])
        }
        5 => {
            m.patterns.clear();
            words(&["PUNSUBSCRIBE"])
        }
        6 => {
            m.shards.clear();
            words(&["SUNSUBSCRIBE"])
        }
        7 => {
            m.channels.retain(|c| *c != chan);
            words(&["UNSUBSCRIBE", chan])
        }
        _ => words(&["PING"]),
    }
}

/// A SCAN-family command; in the users mode never SCAN itself (through
/// orthrus it walks every upstream's keys as stored).
fn scan_command(rng: &mut Rng, world: Option<&World>) -> Args {
    let whole = world.is_none() && rng.chance(60);
    let mut args = if whole {
        words(&["SCAN", "0"])
    } else {
        let name = *rng.pick(&["HSCAN", "SSCAN", "ZSCAN"]);
        let prefix = world.map_or("", |_| routing::any(rng));
        words(&[name, &format!("{prefix}{}", any_key(rng)), "0"])
    };
    if rng.chance(40) {
        let pat = *rng.pick(&["*", "k*", "{a}*", "m?", "f*"]);
        args.extend(words(&["MATCH", pat]));
    }
    if rng.chance(40) {
        args.extend(words(&["COUNT", &rng.range(1, 20).to_string()]));
    }
    if args[0] == b"SCAN" && rng.chance(20) {
        let typ = *rng.pick(&["string", "list", "set", "zset", "hash", "stream"]);
        args.extend(words(&["TYPE", typ]));
    }
    args
}

/// One command from the table, its keys under `tag` when one is given;
/// `restricted` leaves out the `!` entries (inside MULTI, on a subscriber).
pub fn command(rng: &mut Rng, tag: Option<&'static str>, restricted: bool) -> Args {
    command_in(rng, tag.map(|t| (t, "")), restricted, None)
}

/// The same in the users mode when `world` is given; inside MULTI `tx`
/// gives the transaction's hash tag and route prefix.
fn command_in(
    rng: &mut Rng,
    tx: Option<(&'static str, &'static str)>,
    restricted: bool,
    world: Option<&World>,
) -> Args {
    let in_multi = restricted;
    let entries = if world.is_some() {
        user_table()
    } else if crate::fill::DATABASES.load(Ordering::Relaxed) > 1 {
        db_table()
    } else {
        table()
    };
    let total: u64 = entries
        .iter()
        .filter(|e| !(in_multi && skipped_in_multi(e, world)))
        .map(|e| u64::from(e.weight))
        .sum();
    let mut roll = rng.next_u64() % total.max(1);
    let mut chosen = None;
    for e in entries
        .iter()
        .filter(|e| !(in_multi && skipped_in_multi(e, world)))
    {
        if roll < u64::from(e.weight) {
            chosen = Some(e);
            break;
        }
        roll -= u64::from(e.weight);
    }
    let Some(entry) = chosen else {
        return words(&["PING"]);
    };
    let (tag, mut prefix) = match tx {
        Some((tag, prefix)) => (Some(tag), prefix),
        None => (None, ""),
    };
    let mut split = false;
    if let (Some(w), None) = (world, tx) {
        let (name, ctx) = match entry.body.first() {
            Some(grammar::Node::Word(name)) => (name.as_str(), Context::Free),
            _ => ("", Context::Blocking),
        };
        prefix = routing::pick(rng, w, name, ctx);
        split = routing::SPLIT.contains(&name);
    }
    let mut keys = Keys::new(tag, prefix, split, world);
    let mut out = Vec::new();
    grammar::expand(&entry.body, rng, &mut keys, &mut out);
    out
}

fn words(ws: &[&str]) -> Args {
    ws.iter().map(|w| w.as_bytes().to_vec()).collect()
}

// === impl ConnModel ===

impl ConnModel {
    fn subscribed(&self) -> bool {
        !(self.channels.is_empty() && self.patterns.is_empty() && self.shards.is_empty())
    }
}
