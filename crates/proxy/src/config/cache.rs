//! `[cache]`: the reply cache (off by default), kept exact by the nodes'
//! invalidations (`crate::cache`).

use serde::{Deserialize, Serialize};

/// The read-only single-key commands cached by default: their reply
/// depends only on the key's value (not on the clock, not random); and
/// MGET, whose keys are looked up as their GETs.
pub const DEFAULT_COMMANDS: &[&str] = &[
    "get",
    "mget",
    "getrange",
    "strlen",
    "exists",
    "type",
    "hget",
    "hmget",
    "hgetall",
    "hexists",
    "hlen",
    "hstrlen",
    "hkeys",
    "hvals",
    "smembers",
    "sismember",
    "smismember",
    "scard",
    "zscore",
    "zmscore",
    "zrange",
    "zcard",
    "zrank",
    "zrevrank",
    "zcount",
    "lrange",
    "llen",
    "lindex",
    "getbit",
    "bitcount",
];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Serve repeated reads of hot keys from orthrus's memory. Reloadable
    /// (off empties the cache and frees its memory). Default false.
    pub enabled: bool,
    /// All the reply cache's memory, in MiB, for the whole process whatever
    /// the number of workers: its tables and its entries (docs/cache.md);
    /// the least useful entries are evicted beyond it. Reloadable.
    /// Default 64.
    pub max_memory_mb: u64,
    /// An entry is served for at most this long after it was filled, in
    /// milliseconds (a bound on top of the nodes' invalidations, which end
    /// it at once). Reloadable. Default 60000.
    pub max_age_ms: u64,
    /// Cache only keys that start with one of these; empty: every key.
    /// Reloadable. Default empty.
    pub prefixes: Vec<String>,
    /// The commands cached (lower case), from those whose reply depends
    /// only on one key's value (MGET: each key's, as its GET's). Reloadable.
    /// Default: GET, MGET, GETRANGE, STRLEN,
    /// EXISTS (one key), TYPE, HGET, HMGET, HGETALL, HEXISTS, HLEN,
    /// HSTRLEN, HKEYS, HVALS, SMEMBERS, SISMEMBER, SMISMEMBER, SCARD,
    /// ZSCORE, ZMSCORE, ZRANGE (without STORE), ZCARD, ZRANK, ZREVRANK,
    /// ZCOUNT, LRANGE, LLEN, LINDEX, GETBIT, BITCOUNT.
    pub commands: Vec<String>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: false,
            max_memory_mb: 64,
            max_age_ms: 60_000,
            prefixes: Vec::new(),
            commands: DEFAULT_COMMANDS.iter().map(|c| (*c).to_owned()).collect(),
        }
    }
}
