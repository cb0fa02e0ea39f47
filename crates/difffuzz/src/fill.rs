//! The placeholders of the command table filled in ([`Keys`]): keys from
//! a pool of fourteen, nine of them under three hash tags, so commands
//! collide on keys, types and slots; multi-key commands take their keys
//! from one tag (same slot) or, where the command allows it, from
//! anywhere (several slots). In the users mode keys carry route prefixes
//! ([`crate::routing`]).

use crate::grammar::Fill;
use crate::rng::Rng;
use crate::routing;
use crate::spec::{LIBRARY, SCRIPTS, USER_SCRIPTS, VALUES};
use crate::world::{CUT, World};

/// How many databases the targets serve (`--databases`): with more than
/// one, sequences switch databases (`db`: a database below it) and move
/// keys between them.
pub static DATABASES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

pub const TAGS: &[&str] = &["a", "b", "c"];
pub const CHANNELS: &[&str] = &["ch1", "ch2", "c71"];
const PLAIN_KEYS: &[&str] = &["k1", "k2", "k3", "k4", "k5"];
const MEMBERS: &[&str] = &["m1", "m2", "m3", "m4", "10", "-1"];
const FIELDS: &[&str] = &["f1", "f2", "f3", "n"];
const STREAM_IDS: &[&str] = &["1-1", "1-2", "2-0", "3-5", "0-1", "5"];

/// Placeholder values for one command: the first key decides the slot of
/// `key2`; `tag` forces every key under one hash tag (inside MULTI). In
/// the users mode every key gets `prefix` (a route's), but the keys after
/// the first of a command orthrus splits (`split`), which get any.
pub struct Keys<'w> {
    tag: Option<&'static str>,
    first: Option<String>,
    prefix: &'static str,
    split: bool,
    world: Option<&'w World>,
}

pub fn tag_key(rng: &mut Rng, tag: &str) -> String {
    format!("{{{tag}}}{}", rng.range(1, 3))
}

pub fn any_key(rng: &mut Rng) -> String {
    if rng.chance(60) {
        let tag = *rng.pick(TAGS);
        tag_key(rng, tag)
    } else {
        (*rng.pick(PLAIN_KEYS)).to_string()
    }
}

// === impl Keys ===

impl Keys<'_> {
    /// Keys for one command outside MULTI (`tag` none) or inside it.
    pub fn new<'w>(
        tag: Option<&'static str>,
        prefix: &'static str,
        split: bool,
        world: Option<&'w World>,
    ) -> Keys<'w> {
        Keys {
            tag,
            first: None,
            prefix,
            split,
            world,
        }
    }

    /// The first key (or, after it, one in its slot), without a prefix.
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

    /// `key` under the command's prefix.
    fn routed(&self, key: String) -> String {
        format!("{}{key}", self.prefix)
    }

    /// A script and its keys (`lua`: by body, `sha`: by SHA1); in the
    /// users mode sometimes one of [`USER_SCRIPTS`], its key in the slot
    /// of `a` and on the default upstream (no prefix, or `m:`).
    fn script(&mut self, word: &str, rng: &mut Rng) -> Vec<Vec<u8>> {
        // Not under `c:`: `{a}o` is on the default upstream, and MULTI
        // keeps to one route.
        // Not in a MULTI on another hash tag either.
        let user_script = self.world.is_some()
            && self.prefix != CUT
            && self.tag.is_none_or(|t| t == "a")
            && rng.chance(25);
        let (body, nkeys, sha) = match user_script {
            true => *rng.pick(USER_SCRIPTS),
            false => *rng.pick(SCRIPTS),
        };
        let head = if word == "lua" { body } else { sha };
        let mut out = vec![head.as_bytes().to_vec(), nkeys.to_string().into_bytes()];
        if user_script {
            out.push(format!("{}{}", self.prefix, tag_key(rng, "a")).into_bytes());
        } else {
            for i in 0..nkeys {
                let k = if i == 0 {
                    self.key(rng)
                } else {
                    self.key2(rng)
                };
                out.push(self.routed(k).into_bytes());
            }
        }
        out.push(rng.pick(VALUES).as_bytes().to_vec());
        out
    }

    /// SORT's BY (`by`) or GET pattern: in the first key's slot when it
    /// has a hash tag (Redis Cluster refuses others), never under a prefix
    /// orthrus removes (it does not cut patterns).
    fn sort_pattern(&mut self, by: bool, rng: &mut Rng) -> String {
        let plain = if by { "nosort" } else { "#" };
        let cut = self.world.is_some_and(|w| w.cut) && self.prefix == CUT;
        let tag = self
            .first
            .as_deref()
            .and_then(|f| f.strip_prefix('{'))
            .and_then(|r| r.split_once('}'))
            .map(|(t, _)| t.to_string());
        match tag {
            Some(tag) if !cut && rng.chance(70) => format!("{}{{{tag}}}*", self.prefix),
            _ => plain.to_string(),
        }
    }
}

impl Fill for Keys<'_> {
    fn fill(&mut self, word: &str, rng: &mut Rng) -> Option<Vec<Vec<u8>>> {
        let one = |s: String| Some(vec![s.into_bytes()]);
        let num = |rng: &mut Rng, lo: i64, hi: i64| {
            Some(vec![rng.range(lo, hi).to_string().into_bytes()])
        };
        match word {
            "key" => {
                let k = self.key(rng);
                one(self.routed(k))
            }
            "key2" => {
                let k = self.key2(rng);
                one(self.routed(k))
            }
            "keyx" => {
                let k = self.keyx(rng);
                match self.split {
                    true => one(format!("{}{k}", routing::any(rng))),
                    false => one(self.routed(k)),
                }
            }
            "sortby" => one(self.sort_pattern(true, rng)),
            "sortget" => one(self.sort_pattern(false, rng)),
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
                    out.push(self.routed(k).into_bytes());
                }
                Some(out)
            }
            "library" => one(LIBRARY.to_string()),
            "luabody" => one(rng.pick(SCRIPTS).0.to_string()),
            "shaonly" => one(rng.pick(SCRIPTS).2.to_string()),
            "lua" | "sha" => Some(self.script(word, rng)),
            "val" => one((*rng.pick(VALUES)).to_string()),
            "int" => num(rng, -3, 20),
            "nat" => num(rng, 0, 5),
            "db" => {
                let n = DATABASES.load(std::sync::atomic::Ordering::Relaxed);
                num(rng, 0, i64::from(n.saturating_sub(1)))
            }
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
