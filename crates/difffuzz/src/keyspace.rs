//! A server's keyspace as data, read directly (not through orthrus): every
//! key with its type, whether it has a time to live, and its value read by
//! type (GET, LRANGE, SMEMBERS sorted, ZRANGE WITHSCORES, HGETALL sorted by
//! field, XRANGE), so two servers holding the same data compare equal
//! whatever the order of their hash tables (DUMP would not: a set or hash
//! in a hash table is serialised in its table's order).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use orthrus_resp::{Limits, scan_reply};

use crate::compare::sorted;
use crate::frame::{bulk_payload, elements};
use crate::run::{READ_TIMEOUT, encode};
use crate::sequence::Args;

/// Key to its canonical value (type, TTL or not, contents).
pub type Keyspace = BTreeMap<Vec<u8>, Vec<u8>>;

/// A key whose values differ: the key, and each side's value (`None`:
/// absent).
pub type KeyDifference = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);

/// A plain blocking connection that sends pipelines and reads their replies.
pub struct Wire {
    stream: TcpStream,
    buf: Vec<u8>,
    limits: Limits,
}

// === impl Wire ===

impl Wire {
    /// Connects, and authenticates with `password` (the default user's)
    /// when one is given.
    pub fn connect(addr: SocketAddr, password: Option<&str>) -> Result<Wire, String> {
        let stream = TcpStream::connect_timeout(&addr, READ_TIMEOUT)
            .map_err(|e| format!("{addr}: connect: {e}"))?;
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let mut wire = Wire {
            stream,
            buf: Vec::new(),
            limits: Limits::for_replies(),
        };
        if let Some(pw) = password {
            let reply = wire.call(&["AUTH", pw])?;
            if !reply.starts_with(b"+OK") {
                return Err(format!("{addr}: AUTH: {}", crate::diff::show(&reply)));
            }
        }
        Ok(wire)
    }

    /// One command, its reply.
    pub fn call(&mut self, args: &[&str]) -> Result<Vec<u8>, String> {
        let args: Args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let mut replies = self.pipeline(&[args])?;
        replies.pop().ok_or_else(|| "no reply".to_string())
    }

    /// Sends `cmds` in one write and reads a reply to each.
    pub fn pipeline(&mut self, cmds: &[Args]) -> Result<Vec<Vec<u8>>, String> {
        let mut bytes = Vec::new();
        cmds.iter().for_each(|c| encode(c, &mut bytes));
        self.stream
            .write_all(&bytes)
            .map_err(|e| format!("write: {e}"))?;
        (0..cmds.len()).map(|_| self.read_frame()).collect()
    }

    fn read_frame(&mut self) -> Result<Vec<u8>, String> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(n) = scan_reply(&self.buf, &self.limits).map_err(|e| e.to_string())? {
                let rest = self.buf.split_off(n);
                return Ok(std::mem::replace(&mut self.buf, rest));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }
}

/// Runs each command on `addr` (after AUTH with `password`) and wants
/// `+OK` from each.
pub fn all_ok(addr: SocketAddr, password: Option<&str>, cmds: &[&[&str]]) -> Result<(), String> {
    let mut wire = Wire::connect(addr, password)?;
    for cmd in cmds {
        let reply = wire.call(cmd)?;
        if !reply.starts_with(b"+OK") {
            return Err(format!(
                "{addr}: {} answered {}",
                cmd.join(" "),
                crate::diff::show(&reply)
            ));
        }
    }
    Ok(())
}

/// Every key of the server at `addr`, with `prefix` put before each name
/// (a route's prefix that orthrus removed on the way there).
pub fn dump(addr: SocketAddr, password: Option<&str>, prefix: &[u8]) -> Result<Keyspace, String> {
    let mut wire = Wire::connect(addr, password)?;
    let keys_reply = wire.call(&["KEYS", "*"])?;
    let keys: Vec<Vec<u8>> = elements(&keys_reply)
        .iter()
        .filter_map(|k| bulk_payload(k).map(<[u8]>::to_vec))
        .collect();
    if keys.is_empty() {
        return Ok(Keyspace::new());
    }
    let word = |w: &str| w.as_bytes().to_vec();
    let mut meta = Vec::with_capacity(keys.len() * 2);
    for k in &keys {
        meta.push(vec![word("TYPE"), k.clone()]);
        meta.push(vec![word("PTTL"), k.clone()]);
    }
    let meta = wire.pipeline(&meta)?;
    let types: Vec<String> = meta
        .chunks(2)
        .map(|c| {
            String::from_utf8_lossy(&c[0])
                .trim()
                .trim_start_matches('+')
                .to_string()
        })
        .collect();
    let reads: Vec<Args> = keys
        .iter()
        .zip(&types)
        .map(|(k, t)| {
            let k = k.clone();
            match t.as_str() {
                "string" => vec![word("GET"), k],
                "list" => vec![word("LRANGE"), k, word("0"), word("-1")],
                "set" => vec![word("SMEMBERS"), k],
                "zset" => vec![word("ZRANGE"), k, word("0"), word("-1"), word("WITHSCORES")],
                "hash" => vec![word("HGETALL"), k],
                "stream" => vec![word("XRANGE"), k, word("-"), word("+")],
                _ => vec![word("TYPE"), k],
            }
        })
        .collect();
    let values = wire.pipeline(&reads)?;
    let mut out = Keyspace::new();
    for (i, key) in keys.into_iter().enumerate() {
        let ttl = meta[2 * i + 1].first() == Some(&b':') && !meta[2 * i + 1].starts_with(b":-");
        let value = match types[i].as_str() {
            "set" => sorted(&values[i], 1),
            "hash" => sorted(&values[i], 2),
            _ => values[i].clone(),
        };
        let mut canonical = format!("{} ttl={} ", types[i], ttl).into_bytes();
        canonical.extend_from_slice(&value);
        out.insert([prefix, &key].concat(), canonical);
    }
    Ok(out)
}

/// The first key whose value differs (or that one side lacks), with both
/// sides' values (`None`: absent).
pub fn first_difference(a: &Keyspace, b: &Keyspace) -> Option<KeyDifference> {
    let keys: std::collections::BTreeSet<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    keys.into_iter().find_map(|k| {
        let (va, vb) = (a.get(k), b.get(k));
        (va != vb).then(|| (k.clone(), va.cloned(), vb.cloned()))
    })
}

/// The keys of `space` that start with `prefix`.
pub fn under(space: &Keyspace, prefix: &[u8]) -> Keyspace {
    space
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
