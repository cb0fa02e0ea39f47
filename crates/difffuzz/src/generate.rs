//! The generator: a random but valid [`Sequence`] from a seed.
//!
//! It keeps a model of each connection (in MULTI and on which hash tag,
//! subscribed, replies off) so that what it makes is something a correct
//! client could send: commands queued in MULTI share the transaction's
//! slot, a RESP2 subscriber sends only what Redis allows there, a blocked
//! connection is woken by another. Keys come from a pool of fourteen, nine
//! of them under three hash tags, so commands collide on keys, types and
//! slots; multi-key commands take their keys from one tag (same slot) or,
//! where the command allows it, from anywhere (several slots).

use std::sync::OnceLock;

use crate::grammar::{self, Entry, Fill};
use crate::rng::Rng;
use crate::sequence::{Action, Args, Proto, Sequence, Step};
use crate::spec::{COMMANDS, LIBRARY, SCRIPTS, VALUES};

const TAGS: &[&str] = &["a", "b", "c"];
const PLAIN_KEYS: &[&str] = &["k1", "k2", "k3", "k4", "k5"];
const MEMBERS: &[&str] = &["m1", "m2", "m3", "m4", "10", "-1"];
const FIELDS: &[&str] = &["f1", "f2", "f3", "n"];
const CHANNELS: &[&str] = &["ch1", "ch2", "c71"];
const PATTERNS: &[&str] = &["ch*", "c?1", "*"];
const STREAM_IDS: &[&str] = &["1-1", "1-2", "2-0", "3-5", "0-1", "5"];

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
    multi: Option<&'static str>,
    channels: Vec<&'static str>,
    patterns: Vec<&'static str>,
    shards: Vec<&'static str>,
    reply_off: bool,
}

/// Placeholder values for one command: the first key decides the slot of
/// `key2`; `tag` forces every key under one hash tag (inside MULTI).
struct Keys {
    tag: Option<&'static str>,
    first: Option<String>,
}

/// The sequence number `index` of the run seeded with `seed`.
pub fn sequence(seed: u64, index: u64, shape: Shape) -> Sequence {
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
    while steps.len() < target {
        // A connection whose replies are off keeps the turn until CLIENT
        // REPLY ON: nothing tells when its silent commands ran, and the
        // reply to ON, coming after them, does.
        let c = match models.iter().position(|m| m.reply_off) {
            Some(off) => off,
            None => rng.below(n_conns),
        };
        next_steps(&mut rng, &mut models, c, &mut steps);
    }
    Sequence { conns, steps }
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

fn next_steps(rng: &mut Rng, models: &mut [ConnModel], c: usize, out: &mut Vec<Step>) {
    let step = |action| Step { conn: c, action };
    let m = &mut models[c];
    if m.subscribed() && !m.resp3 {
        out.push(step(Action::Call(subscriber_command(rng, m))));
        return;
    }
    if let Some(tag) = m.multi {
        let roll = rng.below(100);
        if roll < 20 {
            m.multi = None;
            out.push(step(Action::Call(words(&["EXEC"]))));
        } else if roll < 24 {
            m.multi = None;
            out.push(step(Action::Call(words(&["DISCARD"]))));
        } else {
            out.push(step(Action::Call(command(rng, Some(tag), true))));
        }
        return;
    }
    if m.reply_off {
        if rng.chance(30) {
            m.reply_off = false;
            out.push(step(Action::Call(words(&["CLIENT", "REPLY", "ON"]))));
        } else {
            out.push(step(Action::Call(command(rng, None, false))));
        }
        return;
    }
    let free = !m.subscribed();
    match rng.below(100) {
        0..=2 if free => {
            let tag = *rng.pick(TAGS);
            let watched = rng.chance(40);
            if watched {
                let mut args = words(&["WATCH"]);
                args.push(tag_key(rng, tag).into_bytes());
                out.push(step(Action::Call(args)));
            }
            m.multi = Some(tag);
            out.push(step(Action::Call(words(&["MULTI"]))));
            if watched && let Some(d) = writer(rng, models, c) {
                // Another client touches the watched key (or one beside it).
                let args = words(&["SET", &tag_key(rng, tag), "w"]);
                out.push(Step {
                    conn: d,
                    action: Action::Call(args),
                });
            }
        }
        3..=5 => out.push(step(Action::Call(subscriber_command(rng, m)))),
        6 if free => {
            if rng.chance(50) {
                m.reply_off = true;
                out.push(step(Action::Call(words(&["CLIENT", "REPLY", "OFF"]))));
            } else {
                out.push(step(Action::Call(words(&["CLIENT", "REPLY", "SKIP"]))));
                out.push(step(Action::Call(command(rng, None, false))));
                // Its reply says the skipped command ran.
                out.push(step(Action::Call(words(&["PING"]))));
            }
        }
        7..=9 => {
            let n = rng.range(2, 6);
            let cmds = (0..n).map(|_| command(rng, None, !free)).collect();
            out.push(step(Action::Pipeline(cmds)));
        }
        10 if free => wake_up(rng, models, c, out),
        11..=12 => out.push(step(Action::Scan(scan_command(rng)))),
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
            *m = ConnModel::default();
            out.push(step(Action::Call(words(&["RESET"]))));
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
        _ => out.push(step(Action::Call(command(rng, None, !free)))),
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
fn wake_up(rng: &mut Rng, models: &[ConnModel], c: usize, out: &mut Vec<Step>) {
    let Some(d) = writer(rng, models, c) else {
        return;
    };
    let key = any_key(rng);
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

fn scan_command(rng: &mut Rng) -> Args {
    let mut args = if rng.chance(60) {
        words(&["SCAN", "0"])
    } else {
        let name = *rng.pick(&["HSCAN", "SSCAN", "ZSCAN"]);
        words(&[name, &any_key(rng), "0"])
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
    let in_multi = restricted;
    let entries = table();
    let total: u64 = entries
        .iter()
        .filter(|e| !(in_multi && e.no_multi))
        .map(|e| u64::from(e.weight))
        .sum();
    let mut roll = rng.next_u64() % total.max(1);
    let mut chosen = None;
    for e in entries.iter().filter(|e| !(in_multi && e.no_multi)) {
        if roll < u64::from(e.weight) {
            chosen = Some(e);
            break;
        }
        roll -= u64::from(e.weight);
    }
    let Some(entry) = chosen else {
        return words(&["PING"]);
    };
    let mut keys = Keys { tag, first: None };
    let mut out = Vec::new();
    grammar::expand(&entry.body, rng, &mut keys, &mut out);
    out
}

fn words(ws: &[&str]) -> Args {
    ws.iter().map(|w| w.as_bytes().to_vec()).collect()
}

fn tag_key(rng: &mut Rng, tag: &str) -> String {
    format!("{{{tag}}}{}", rng.range(1, 3))
}

fn any_key(rng: &mut Rng) -> String {
    if rng.chance(60) {
        let tag = *rng.pick(TAGS);
        tag_key(rng, tag)
    } else {
        (*rng.pick(PLAIN_KEYS)).to_string()
    }
}

// === impl ConnModel ===

impl ConnModel {
    fn subscribed(&self) -> bool {
        !(self.channels.is_empty() && self.patterns.is_empty() && self.shards.is_empty())
    }
}

// === impl Keys ===

impl Keys {
    fn key(&mut self, rng: &mut Rng) -> String {
        let key = match (self.tag, &self.first) {
            (Some(tag), _) => tag_key(rng, tag),
            (None, Some(_)) => return self.key2(rng),
            (None, None) => any_key(rng),
        };
        self.first.get_or_insert(key).clone()
    }

    /// A key in the slot of the first key.
    fn key2(&mut self, rng: &mut Rng) -> String {
        match self.first.clone() {
            None => self.key(rng),
            Some(first) => match first.strip_prefix('{').and_then(|r| r.split_once('}')) {
                Some((tag, _)) => tag_key(rng, tag),
                None => first,
            },
        }
    }

    /// A key in the first key's slot or, half of the time, anywhere.
    fn keyx(&mut self, rng: &mut Rng) -> String {
        if self.tag.is_some() || rng.chance(50) {
            self.key2(rng)
        } else {
            any_key(rng)
        }
    }
}

impl Fill for Keys {
    fn fill(&mut self, word: &str, rng: &mut Rng) -> Option<Vec<Vec<u8>>> {
        let one = |s: String| Some(vec![s.into_bytes()]);
        let num = |rng: &mut Rng, lo: i64, hi: i64| {
            Some(vec![rng.range(lo, hi).to_string().into_bytes()])
        };
        match word {
            "key" => one(self.key(rng)),
            "key2" => one(self.key2(rng)),
            "keyx" => one(self.keyx(rng)),
            "nk" | "nkx" | "nk2" => {
                let n = rng.range(1, 3);
                let mut out = vec![n.to_string().into_bytes()];
                for i in 0..n {
                    let k = match (word, i) {
                        ("nk2", _) => self.key2(rng),
                        (_, 0) => self.key(rng),
                        ("nkx", _) => self.keyx(rng),
                        _ => self.key2(rng),
                    };
                    out.push(k.into_bytes());
                }
                Some(out)
            }
            "library" => one(LIBRARY.to_string()),
            "luabody" => one(rng.pick(SCRIPTS).0.to_string()),
            "shaonly" => one(rng.pick(SCRIPTS).2.to_string()),
            "lua" | "sha" => {
                let (body, nkeys, sha) = *rng.pick(SCRIPTS);
                let head = if word == "lua" { body } else { sha };
                let mut out = vec![head.as_bytes().to_vec(), nkeys.to_string().into_bytes()];
                for i in 0..nkeys {
                    let k = if i == 0 {
                        self.key(rng)
                    } else {
                        self.key2(rng)
                    };
                    out.push(k.into_bytes());
                }
                out.push(rng.pick(VALUES).as_bytes().to_vec());
                Some(out)
            }
            "val" => one((*rng.pick(VALUES)).to_string()),
            "int" => num(rng, -3, 20),
            "nat" => num(rng, 0, 5),
            "cnt" => num(rng, 1, 4),
            "idx" => num(rng, -4, 4),
            "ttl" => num(rng, 1000, 5000),
            "ttlms" => num(rng, 1_000_000, 5_000_000),
            "abst" => num(rng, 4_000_000_000, 4_000_000_100),
            "off" => num(rng, 0, 40),
            "bit" => num(rng, 0, 1),
            "num" => one((*rng.pick(&["1.5", "-2", "0.1", "3e2", "10"])).to_string()),
            "score" => one((*rng.pick(&["1", "2", "2.5", "-1", "0", "100"])).to_string()),
            "bound" => one((*rng.pick(&["-inf", "+inf", "1", "(1", "2.5", "0"])).to_string()),
            "lex" => one((*rng.pick(&["-", "+", "[m1", "(m2", "[a"])).to_string()),
            "mem" => one((*rng.pick(MEMBERS)).to_string()),
            "fld" => one((*rng.pick(FIELDS)).to_string()),
            "sid" => one((*rng.pick(STREAM_IDS)).to_string()),
            "grp" => one((*rng.pick(&["g1", "g2"])).to_string()),
            "cons" => one((*rng.pick(&["c1", "c2"])).to_string()),
            "pat" => one((*rng.pick(&["*", "k*", "{a}*", "*1", "{?}2"])).to_string()),
            "chan" => one((*rng.pick(CHANNELS)).to_string()),
            "name" => one((*rng.pick(&["app", "worker-1"])).to_string()),
            "lon" => one((*rng.pick(&["13.361389", "15.087269", "-0.1", "2.35"])).to_string()),
            "lat" => one((*rng.pick(&["38.115556", "37.502669", "51.5", "48.85"])).to_string()),
            "tmo" => one((*rng.pick(&["0.01", "0.02"])).to_string()),
            "tmoms" => num(rng, 10, 20),
            _ => None,
        }
    }
}
