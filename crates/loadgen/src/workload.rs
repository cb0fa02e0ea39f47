//! The three timed command sets and the check of every reply.
//!
//! Each set is a fixed round of commands repeated until `ops` commands have
//! been sent (rounded up to whole rounds, so that every round cleans up after
//! itself and a set leaves no keys behind):
//!
//! - keys (11 per round): SET, GET, EXISTS, APPEND, STRLEN, EXPIRE, TTL,
//!   INCR, MSET and MGET of three keys in three different slots, DEL;
//! - hash (8): HSET of 10 fields, HGET, HMGET, HINCRBY, HEXISTS, HLEN,
//!   HGETALL of the 11-field hash, HDEL of every field;
//! - list (9): LPUSH, RPUSH, LLEN, LRANGE 0 9, LINDEX, LSET, LPOP, RPOP,
//!   LPOP of the remaining 8.
//!
//! The `classic` workload ([`WorkloadKind::Classic`]) keeps to commands
//! Redis 3.2 knew, for proxies of that era that refuse newer forms: its
//! hash round sends HMSET instead of a 10-field HSET (and expects +OK), and
//! its list round ends LSET, LINDEX of the element just set, LPOP, RPOP,
//! DEL of the rest, instead of a counted LPOP. Rounds are as long as the
//! modern ones, so both send the same number of commands.
//!
//! Every key starts with the process's prefix and contains no `{`, so keys
//! spread over all slots. Every reply is compared with what the command must
//! answer — a GET returns what was SET, counters count, lengths match — and
//! the first mismatch fails the run naming the command, the reply and what
//! was expected: a benchmark that silently gets errors measures nothing.

use anyhow::{Result, bail, ensure};
use orthrus_resp::Value;

use crate::conn::{Conn, command_text, reply_text};
use crate::results::{PerSet, SetName, WorkloadKind};

/// Commands in one round of each set.
pub const ROUND_LEN: PerSet<u64> = PerSet {
    keys: 11,
    hash: 8,
    list: 9,
    proc: 28,
};

/// Counters INCRed by the keys set, and MSET/MGET triples, per process.
const SHARED_KEYS: usize = 16;
/// Fields HSET by each hash round.
const HASH_FIELDS: usize = 10;
/// Elements pushed by each list round.
const LIST_LEN: usize = 10;
/// What EXPIRE sets and TTL must report at most.
const EXPIRE_SECS: i64 = 600;
/// What APPEND adds.
const APPENDED: &[u8] = b"-tail";

/// One process's workload: its key prefix and its size.
#[derive(Debug, Clone)]
pub struct Workload {
    prefix: String,
    ops: u64,
    kind: WorkloadKind,
    /// Three keys in three different slots, per MSET/MGET pair.
    triples: Vec<[String; 3]>,
}

/// The reply a command must give.
enum Expect<'a> {
    Ok,
    Int(i64),
    IntIn(i64, i64),
    Bulk(&'a [u8]),
    Bulks(Vec<&'a [u8]>),
    /// HGETALL: field/value pairs in any order.
    Pairs(Vec<(&'a [u8], &'a [u8])>),
}

// === impl Workload ===

impl Workload {
    /// A workload of `kind` whose keys all start with `prefix:`. A `{` or
    /// `}` in the prefix is refused: a hash tag would pin every key to one
    /// slot.
    pub fn new(prefix: &str, ops: u64, kind: WorkloadKind) -> Result<Workload> {
        ensure!(
            !prefix.contains(['{', '}']),
            "key prefix {prefix:?} contains a brace: a hash tag would put every key in one slot"
        );
        ensure!(ops > 0, "--ops must be at least 1");
        let triples = (0..SHARED_KEYS).map(|j| spread_triple(prefix, j)).collect();
        Ok(Workload {
            prefix: prefix.to_owned(),
            ops,
            kind,
            triples,
        })
    }

    /// Commands one process sends per set (and in all, as `proc`).
    pub fn commands(ops: u64) -> PerSet<u64> {
        let per = |len: u64| ops.div_ceil(len) * len;
        let (keys, hash, list) = (
            per(ROUND_LEN.keys),
            per(ROUND_LEN.hash),
            per(ROUND_LEN.list),
        );
        PerSet {
            keys,
            hash,
            list,
            proc: keys + hash + list,
        }
    }

    /// Deletes the keys that outlive a round (the counters and the MSET
    /// keys), so that counting starts from zero; not timed.
    pub fn prepare(&self, conn: &mut Conn) -> Result<()> {
        for key in self.shared_keys() {
            let reply = conn.call(&["DEL", key.as_str()])?;
            check(&["DEL", key.as_str()], &reply, &Expect::IntIn(0, 1))?;
        }
        Ok(())
    }

    /// Runs one set; returns the commands sent. `Proc` is not a set.
    pub fn run(&self, conn: &mut Conn, set: SetName) -> Result<u64> {
        let round_len = *ROUND_LEN.get(set);
        if set == SetName::Proc {
            bail!("proc is the whole process, not a set to run");
        }
        let rounds = self.ops.div_ceil(round_len);
        let mut counters = [0i64; SHARED_KEYS];
        for i in 0..rounds {
            match set {
                SetName::Keys => self.keys_round(conn, i, &mut counters)?,
                SetName::Hash => self.hash_round(conn, i)?,
                SetName::List => self.list_round(conn, i)?,
                SetName::Proc => {}
            }
        }
        Ok(rounds * round_len)
    }

    /// Deletes what [`Workload::prepare`] deletes, after the timed sets.
    pub fn cleanup(&self, conn: &mut Conn) -> Result<()> {
        self.prepare(conn)
    }

    fn shared_keys(&self) -> impl Iterator<Item = String> + '_ {
        let counters = (0..SHARED_KEYS).map(|j| format!("{}:c:{j}", self.prefix));
        counters.chain(self.triples.iter().flatten().cloned())
    }

    fn keys_round(&self, conn: &mut Conn, i: u64, counters: &mut [i64; SHARED_KEYS]) -> Result<()> {
        let key = format!("{}:k:{i}", self.prefix);
        let k = key.as_bytes();
        let value = format!("value-{i:010}");
        let v = value.as_bytes();
        let len = (v.len() + APPENDED.len()) as i64;
        let secs = EXPIRE_SECS.to_string();
        call(conn, &[b"SET", k, v], Expect::Ok)?;
        call(conn, &[b"GET", k], Expect::Bulk(v))?;
        call(conn, &[b"EXISTS", k], Expect::Int(1))?;
        call(conn, &[b"APPEND", k, APPENDED], Expect::Int(len))?;
        call(conn, &[b"STRLEN", k], Expect::Int(len))?;
        call(conn, &[b"EXPIRE", k, secs.as_bytes()], Expect::Int(1))?;
        call(conn, &[b"TTL", k], Expect::IntIn(1, EXPIRE_SECS))?;

        // The counter and the MSET triple of this round, out of SHARED_KEYS.
        let j = (i % SHARED_KEYS as u64) as usize;
        let counter = format!("{}:c:{j}", self.prefix);
        let count = counters.get_mut(j).map_or(0, |c| {
            *c += 1;
            *c
        });
        call(conn, &[b"INCR", counter.as_bytes()], Expect::Int(count))?;

        let [a, b, c] = self
            .triples
            .get(j)
            .map_or([""; 3], |t| [t[0].as_str(), t[1].as_str(), t[2].as_str()]);
        let values: Vec<String> = (0..3).map(|n| format!("m{i}.{n}")).collect();
        let [va, vb, vc] = [0, 1, 2].map(|n| values[n].as_bytes());
        let mset = [
            b"MSET".as_slice(),
            a.as_bytes(),
            va,
            b.as_bytes(),
            vb,
            c.as_bytes(),
            vc,
        ];
        call(conn, &mset, Expect::Ok)?;
        let mget = [b"MGET".as_slice(), a.as_bytes(), b.as_bytes(), c.as_bytes()];
        call(conn, &mget, Expect::Bulks(vec![va, vb, vc]))?;

        call(conn, &[b"DEL", k], Expect::Int(1))
    }

    fn hash_round(&self, conn: &mut Conn, i: u64) -> Result<()> {
        let key = format!("{}:h:{i}", self.prefix);
        let h = key.as_bytes();
        let fields: Vec<String> = (0..HASH_FIELDS).map(|f| format!("f{f}")).collect();
        let values: Vec<String> = (0..HASH_FIELDS).map(|f| format!("v{i}.{f}")).collect();
        let field = |n: usize| fields[n].as_bytes();
        let value = |n: usize| values[n].as_bytes();

        let (set, set_reply): (&[u8], _) = match self.kind {
            WorkloadKind::Modern => (b"HSET", Expect::Int(HASH_FIELDS as i64)),
            WorkloadKind::Classic => (b"HMSET", Expect::Ok),
        };
        let mut hset: Vec<&[u8]> = vec![set, h];
        for n in 0..HASH_FIELDS {
            hset.extend([field(n), value(n)]);
        }
        call(conn, &hset, set_reply)?;
        call(conn, &[b"HGET", h, field(3)], Expect::Bulk(value(3)))?;
        let hmget = [b"HMGET".as_slice(), h, field(1), field(5), field(9)];
        call(
            conn,
            &hmget,
            Expect::Bulks(vec![value(1), value(5), value(9)]),
        )?;
        call(conn, &[b"HINCRBY", h, b"n", b"7"], Expect::Int(7))?;
        call(conn, &[b"HEXISTS", h, field(2)], Expect::Int(1))?;
        let total = HASH_FIELDS as i64 + 1;
        call(conn, &[b"HLEN", h], Expect::Int(total))?;
        let mut pairs: Vec<(&[u8], &[u8])> =
            (0..HASH_FIELDS).map(|n| (field(n), value(n))).collect();
        pairs.push((b"n", b"7"));
        call(conn, &[b"HGETALL", h], Expect::Pairs(pairs))?;
        let mut hdel: Vec<&[u8]> = vec![b"HDEL", h];
        hdel.extend((0..HASH_FIELDS).map(field));
        hdel.push(b"n");
        call(conn, &hdel, Expect::Int(total))
    }

    fn list_round(&self, conn: &mut Conn, i: u64) -> Result<()> {
        let key = format!("{}:l:{i}", self.prefix);
        let l = key.as_bytes();
        let elems: Vec<String> = (0..LIST_LEN).map(|n| format!("e{i}.{n}")).collect();
        let e = |n: usize| elems[n].as_bytes();
        let replaced = format!("x{i}");

        // LPUSH e2 e1 e0 leaves e0 at the head.
        call(conn, &[b"LPUSH", l, e(2), e(1), e(0)], Expect::Int(3))?;
        let mut rpush: Vec<&[u8]> = vec![b"RPUSH", l];
        rpush.extend((3..LIST_LEN).map(e));
        call(conn, &rpush, Expect::Int(LIST_LEN as i64))?;
        call(conn, &[b"LLEN", l], Expect::Int(LIST_LEN as i64))?;
        let all: Vec<&[u8]> = (0..LIST_LEN).map(e).collect();
        call(conn, &[b"LRANGE", l, b"0", b"9"], Expect::Bulks(all))?;
        if self.kind == WorkloadKind::Classic {
            // LINDEX after LSET, so that what LSET did is still checked
            // once the counted LPOP is gone.
            call(conn, &[b"LSET", l, b"4", replaced.as_bytes()], Expect::Ok)?;
            call(
                conn,
                &[b"LINDEX", l, b"4"],
                Expect::Bulk(replaced.as_bytes()),
            )?;
            call(conn, &[b"LPOP", l], Expect::Bulk(e(0)))?;
            call(conn, &[b"RPOP", l], Expect::Bulk(e(LIST_LEN - 1)))?;
            return call(conn, &[b"DEL", l], Expect::Int(1));
        }
        call(conn, &[b"LINDEX", l, b"4"], Expect::Bulk(e(4)))?;
        call(conn, &[b"LSET", l, b"4", replaced.as_bytes()], Expect::Ok)?;
        call(conn, &[b"LPOP", l], Expect::Bulk(e(0)))?;
        call(conn, &[b"RPOP", l], Expect::Bulk(e(LIST_LEN - 1)))?;
        let mut rest: Vec<&[u8]> = (1..LIST_LEN - 1).map(e).collect();
        if let Some(slot) = rest.get_mut(3) {
            *slot = replaced.as_bytes();
        }
        let count = (LIST_LEN - 2).to_string();
        call(conn, &[b"LPOP", l, count.as_bytes()], Expect::Bulks(rest))
    }
}

/// Sends `args` and checks the reply against `expect`.
fn call(conn: &mut Conn, args: &[&[u8]], expect: Expect<'_>) -> Result<()> {
    let reply = conn.call(args)?;
    check(args, &reply, &expect)
}

/// `Err` naming the command, the reply and the expectation on a mismatch.
fn check<A: AsRef<[u8]>>(args: &[A], reply: &Value, expect: &Expect<'_>) -> Result<()> {
    if matches(reply, expect) {
        return Ok(());
    }
    bail!(
        "wrong reply to `{}`: got {}, expected {}",
        command_text(args),
        reply_text(reply),
        expect_text(expect)
    )
}

fn matches(reply: &Value, expect: &Expect<'_>) -> bool {
    match (expect, reply) {
        (Expect::Ok, Value::Simple(s)) => &s[..] == b"OK",
        (Expect::Int(n), Value::Integer(got)) => got == n,
        (Expect::IntIn(lo, hi), Value::Integer(got)) => (*lo..=*hi).contains(got),
        (Expect::Bulk(want), Value::Bulk(got)) => &got[..] == *want,
        (Expect::Bulks(want), Value::Array(items)) => {
            items.len() == want.len()
                && items
                    .iter()
                    .zip(want)
                    .all(|(item, w)| matches!(item, Value::Bulk(b) if &b[..] == *w))
        }
        (Expect::Pairs(want), _) => reply.to_pairs().is_some_and(|got| {
            got.len() == want.len()
                && want.iter().all(|(f, v)| {
                    got.iter()
                        .any(|(gf, gv)| gf.as_bytes() == Some(*f) && gv.as_bytes() == Some(*v))
                })
        }),
        _ => false,
    }
}

fn expect_text(expect: &Expect<'_>) -> String {
    let quoted = |b: &[u8]| format!("{:?}", String::from_utf8_lossy(b));
    match expect {
        Expect::Ok => "status \"OK\"".to_owned(),
        Expect::Int(n) => format!("integer {n}"),
        Expect::IntIn(lo, hi) => format!("an integer in {lo}..={hi}"),
        Expect::Bulk(b) => quoted(b),
        Expect::Bulks(items) => {
            let shown: Vec<String> = items.iter().map(|b| quoted(b)).collect();
            format!("[{}]", shown.join(", "))
        }
        Expect::Pairs(pairs) => format!("{} field/value pairs", pairs.len()),
    }
}

/// Three keys `prefix:m:j:n` whose slots all differ, so that MSET and MGET
/// cross slots (and, on a cluster, nodes) as the benchmark intends.
fn spread_triple(prefix: &str, j: usize) -> [String; 3] {
    let mut keys: Vec<(String, u16)> = Vec::with_capacity(3);
    let mut n = 0usize;
    while keys.len() < 3 {
        let key = format!("{prefix}:m:{j}:{n}");
        let slot = slot(key.as_bytes());
        if keys.iter().all(|(_, s)| *s != slot) {
            keys.push((key, slot));
        }
        n += 1;
    }
    let mut it = keys.into_iter().map(|(k, _)| k);
    let mut next = || it.next().unwrap_or_default();
    [next(), next(), next()]
}

/// The cluster slot of a key.
fn slot(key: &[u8]) -> u16 {
    orthrus_cluster::Slot::for_key(key).get()
}

#[cfg(test)]
#[path = "workload_tests.rs"]
mod tests;
