//! The cached replies, one store for the whole process: entries keyed by
//! the request as sent (its database and protocol too), evicted by weight
//! (`quick_cache`'s S3-FIFO: a key read once leaves before the ones read
//! again), and kept exact by generations: every key has one (in a table of
//! 2^18, by the key's hash: keys that share one are made stale together),
//! bumped by each write through orthrus to the key and by each
//! invalidation a node sends for it, and the store has one (its epoch),
//! bumped when everything must go (a flush, a lost tracking connection, a
//! slot that moved). An entry is served only while both are what they were
//! when its request was sent to fill it.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use quick_cache::sync::Cache;
use quick_cache::{Equivalent, Lifecycle, Weighter};
use rustc_hash::FxBuildHasher;

use crate::config::CacheConfig;
use crate::route::counted;
use crate::time::Tick;

/// What an entry costs besides its bytes (the key, the entry, the
/// store's own bookkeeping), counted in its weight.
const ENTRY_OVERHEAD: u64 = 128;
/// Key generations (a power of two).
const GENERATIONS: usize = 1 << 18;
/// Entries expected per MiB of budget, to size the store's tables at
/// first (they grow when entries are smaller): one of 2 KiB each. Twice as
/// many held a quarter of a 64 MiB budget in empty slots and ghosts.
const ENTRIES_PER_MIB: u64 = 512;
/// The admission sketch each worker keeps (`cache::admission`: two rows
/// of 2^19 one-byte counters).
pub const SKETCH_BYTES: u64 = 1 << 20;

/// A cached request: the frame as sent, in a database and a protocol.
#[derive(Debug)]
pub struct CacheKey {
    frame: Bytes,
    db: u32,
    resp3: bool,
}

/// A request looked up: [`CacheKey`] without owning its frame.
pub struct Lookup<'a> {
    pub frame: &'a [u8],
    pub db: u32,
    pub resp3: bool,
}

/// A cached reply, and what it was filled under.
#[derive(Clone)]
pub struct Entry {
    reply: Bytes,
    key: KeyGen,
    generation: u64,
    epoch: u64,
    filled: Tick,
}

/// The generations a fill was sent under (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generations {
    key: u64,
    epoch: u64,
}

/// Which generation a key has: its place in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyGen(u32);

impl KeyGen {
    pub fn of(key: &[u8]) -> KeyGen {
        KeyGen::from_hash(key_hash(key))
    }

    /// The generation of the key whose [`key_hash`] is `hash`.
    pub fn from_hash(hash: u64) -> KeyGen {
        // The high bits: FxHash mixes upwards.
        KeyGen((hash >> (64 - GENERATIONS.trailing_zeros())) as u32)
    }

    pub fn get(self) -> u32 {
        self.0
    }

    pub fn new(n: u32) -> Option<KeyGen> {
        (usize::try_from(n).ok()? < GENERATIONS).then_some(KeyGen(n))
    }
}

/// A key's hash: its generation's place, and its count in the
/// admission sketch, are taken from it.
pub fn key_hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// The store's counters (INFO `# Cache`, `/metrics`).
#[derive(Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub fills: AtomicU64,
    pub invalidations: AtomicU64,
    pub evictions: AtomicU64,
}

/// Weighs an entry by its bytes.
#[derive(Clone)]
struct Weigh;

/// Counts evictions.
#[derive(Clone)]
struct Counted(Arc<CacheStats>);

pub struct ReplyCache {
    entries: Cache<CacheKey, Entry, Weigh, FxBuildHasher, Counted>,
    generations: Box<[AtomicU64]>,
    epoch: AtomicU64,
    max_age_us: u64,
    /// `cache.commands`, a bit for each by its number
    /// ([`crate::route::counted`], the command table's `stat`).
    commands: Box<[u64]>,
    /// `cache.prefixes`.
    prefixes: Vec<Box<[u8]>>,
    pub stats: Arc<CacheStats>,
}

// === impl Shared ===

impl super::Shared {
    /// The reply cache, while it is on, for a reader off the request path
    /// (a worker's requests read their copy: `node::Env::with_cache`).
    pub fn reply_cache(&self) -> Option<Arc<ReplyCache>> {
        if !self.cache_on.load(Ordering::Relaxed) {
            return None;
        }
        Option::clone(&self.cache.load())
    }

    /// Every cached reply is stale from now on (a slot's owner changed,
    /// or is changing: what was read from the old one is no longer
    /// tracked).
    pub fn cache_all_stale(&self) {
        if let Some(cache) = self.reply_cache() {
            cache.invalidate_all();
        }
    }
}

// === impl CacheKey ===

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_parts(&self.frame, self.db, self.resp3, state);
    }
}

impl PartialEq for CacheKey {
    fn eq(&self, other: &Self) -> bool {
        self.db == other.db && self.resp3 == other.resp3 && self.frame == other.frame
    }
}

impl Eq for CacheKey {}

impl Hash for Lookup<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_parts(self.frame, self.db, self.resp3, state);
    }
}

impl Equivalent<CacheKey> for Lookup<'_> {
    fn equivalent(&self, key: &CacheKey) -> bool {
        self.db == key.db && self.resp3 == key.resp3 && self.frame == &key.frame[..]
    }
}

fn hash_parts<H: Hasher>(frame: &[u8], db: u32, resp3: bool, state: &mut H) {
    frame.hash(state);
    db.hash(state);
    resp3.hash(state);
}

impl Weighter<CacheKey, Entry> for Weigh {
    fn weight(&self, key: &CacheKey, entry: &Entry) -> u64 {
        (key.frame.len() + entry.reply.len()) as u64 + ENTRY_OVERHEAD
    }
}

impl Lifecycle<CacheKey, Entry> for Counted {
    type RequestState = ();

    fn begin_request(&self) {}

    fn on_evict(&self, _state: &mut (), _key: CacheKey, _entry: Entry) {
        self.0.evictions.fetch_add(1, Ordering::Relaxed);
    }
}

// === impl ReplyCache ===

impl ReplyCache {
    /// The store for `config`, with `workers` workers (each keeps an
    /// admission sketch). `max_memory_mb` is all the cache holds: the
    /// generations and the sketches are taken from it, and the entries
    /// weigh the rest (at least half), less a sixteenth of it for each
    /// worker beyond the first: each fills from its own allocator arena,
    /// and an arena keeps pages its evicted entries freed (measured with
    /// 4 workers and a 64 MiB budget turned over three times: RSS 1.38
    /// times the entries' weight, 1.09 with one worker).
    pub fn new(config: &CacheConfig, workers: usize) -> ReplyCache {
        let stats = Arc::new(CacheStats::default());
        let budget = config.max_memory_mb.saturating_mul(1 << 20);
        let tables =
            (GENERATIONS as u64 * 8).saturating_add(SKETCH_BYTES.saturating_mul(workers as u64));
        let held = budget.saturating_sub(tables).max(budget / 2);
        let arenas = (held / 16).saturating_mul(workers.saturating_sub(1) as u64);
        let bytes = held.saturating_sub(arenas).max(held / 2);
        let items = config.max_memory_mb.saturating_mul(ENTRIES_PER_MIB);
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(usize::try_from(items).unwrap_or(usize::MAX))
            .weight_capacity(bytes)
            .build();
        let entries = match options {
            Ok(options) => {
                Cache::with_options(options, Weigh, FxBuildHasher, Counted(stats.clone()))
            }
            // Never: both figures are set.
            Err(_) => Cache::with(1024, bytes, Weigh, FxBuildHasher, Counted(stats.clone())),
        };
        let mut commands = vec![0u64; counted::MAX_NAMES.div_ceil(64)].into_boxed_slice();
        let ids = config
            .commands
            .iter()
            .filter_map(|name| counted::id(&name.to_ascii_lowercase()));
        for id in ids.map(usize::from) {
            if let Some(word) = commands.get_mut(id / 64) {
                *word |= 1 << (id % 64);
            }
        }
        ReplyCache {
            entries,
            generations: (0..GENERATIONS).map(|_| AtomicU64::new(0)).collect(),
            epoch: AtomicU64::new(0),
            max_age_us: config.max_age_ms.saturating_mul(1000),
            commands,
            prefixes: config
                .prefixes
                .iter()
                .map(|p| p.as_bytes().into())
                .collect(),
            stats,
        }
    }

    /// Whether replies of the command numbered `stat` (its command table
    /// entry's) are cached.
    #[inline]
    pub fn caches(&self, stat: Option<u16>) -> bool {
        stat.map(usize::from).is_some_and(|id| {
            self.commands
                .get(id / 64)
                .is_some_and(|word| word >> (id % 64) & 1 == 1)
        })
    }

    /// Whether `key` is under `cache.prefixes` (every key when none).
    pub fn under_prefixes(&self, key: &[u8]) -> bool {
        self.prefixes.is_empty() || self.prefixes.iter().any(|p| key.starts_with(p))
    }

    /// The reply cached for `lookup` (of the key of `key`), if it is
    /// still exact and young enough at `now`.
    pub fn get(&self, lookup: &Lookup<'_>, key: KeyGen, now: Tick) -> Option<Bytes> {
        let entry = self.entries.get(lookup)?;
        let current = self.generations(key);
        let fresh = entry.key == key
            && entry.generation == current.key
            && entry.epoch == current.epoch
            && now.micros_since(entry.filled) < self.max_age_us;
        fresh.then_some(entry.reply)
    }

    /// What a fill for a key is sent under: read before the request
    /// leaves.
    pub fn generations(&self, key: KeyGen) -> Generations {
        Generations {
            // The epoch first: a flush between the two reads is seen.
            epoch: self.epoch.load(Ordering::Acquire),
            key: self
                .generations
                .get(key.0 as usize)
                .map_or(0, |g| g.load(Ordering::Acquire)),
        }
    }

    /// Keeps `reply` to `lookup` if nothing touched its key since `sent`
    /// (else the reply may be older than an invalidation already heard).
    /// The request and the reply are copied: a share of a larger buffer
    /// would keep all of it alive.
    pub fn fill(&self, lookup: &Lookup<'_>, key: KeyGen, sent: Generations, reply: &[u8]) {
        if self.generations(key) != sent {
            return;
        }
        let cache_key = CacheKey {
            frame: Bytes::copy_from_slice(lookup.frame),
            db: lookup.db,
            resp3: lookup.resp3,
        };
        let entry = Entry {
            reply: Bytes::copy_from_slice(reply),
            key,
            generation: sent.key,
            epoch: sent.epoch,
            filled: Tick::now(),
        };
        self.entries.insert(cache_key, entry);
        self.stats.fills.fetch_add(1, Ordering::Relaxed);
    }

    /// A key changed (or may have): its entries are stale from now on.
    pub fn touch(&self, key: KeyGen) {
        if let Some(g) = self.generations.get(key.0 as usize) {
            g.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Everything is stale from now on (the memory goes as entries are
    /// evicted).
    pub fn invalidate_all(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Everything is stale from now on, and the memory is given back.
    pub fn flush(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.entries.clear();
    }

    pub fn used_bytes(&self) -> u64 {
        self.entries.weight()
    }

    pub fn entries(&self) -> usize {
        self.entries.len()
    }
}
