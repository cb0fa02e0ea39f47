//! MGET through the reply cache, key by key: a key's value is the entry
//! of `GET key` (as sent by a client that names the command `GET`, in the
//! client's database and protocol). An MGET whose keys are all cached is
//! answered from memory. Any other goes to the nodes as without the cache;
//! its hot keys that were missing are then filled each by a `GET` of its
//! own on the worker's tracking connections, apart from the client (whose
//! reply is the MGET's), one at a time per key and worker.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{BufMut, Bytes, BytesMut};
use orthrus_resp::{Protocol, Request, encode};

use super::admission;
use super::fill::fetch;
use super::take::plain_key;
use crate::client::{Client, Pending};
use crate::process::cache::{Generations, KeyGen, Lookup, ReplyCache, key_hash};
use crate::route::prefix::Place;
use crate::time::Tick;
use crate::worker::WorkerCtx;

/// The most keys an MGET may have to be looked up key by key; one with
/// more goes to the nodes (and fills nothing).
pub const MAX_KEYS: usize = 64;

/// The most keys remembered as refused to GET (a list, a hash) per
/// worker; past it, all are forgotten.
const REFUSED_KEPT: usize = 4096;

thread_local! {
    /// The generations of the keys this worker is filling for MGETs: one
    /// fill per key at a time, however many MGETs miss it meanwhile.
    static FILLING: RefCell<rustc_hash::FxHashSet<u32>> = RefCell::default();
    /// Keys whose fill the node refused (GET of a list: `WRONGTYPE`), with
    /// what they were filled under: not filled again until they change.
    static REFUSED: RefCell<rustc_hash::FxHashMap<u32, Generations>> = RefCell::default();
}

/// The reply to `req`, an MGET, if every one of its keys is cached; else
/// `None` (it goes on to the nodes), once its hot keys that were missing
/// are being filled.
pub fn request(
    cache: &Arc<ReplyCache>,
    client: &Client,
    req: &Request,
    ctx: &Rc<WorkerCtx>,
    start: Tick,
) -> Option<Pending> {
    let count = req.arg_count().checked_sub(1)?;
    if count == 0 || count > MAX_KEYS {
        return None;
    }
    let resp3 = client.proto == Protocol::Resp3;
    let mut replies = Vec::with_capacity(count);
    let mut missing = Vec::new();
    for key in (1..=count).filter_map(|at| req.arg(at)) {
        if !cache.under_prefixes(key) {
            return None;
        }
        let place = plain_key(key, ctx)?;
        let hash = key_hash(key);
        if admission::count(hash) < admission::ADMIT_AT {
            continue;
        }
        let frame = get_frame(key);
        let generation = KeyGen::from_hash(hash);
        let lookup = Lookup {
            frame: &frame,
            db: client.db,
            resp3,
        };
        match cache.get(&lookup, generation, start) {
            Some(reply) => replies.push(reply),
            None => missing.push((frame, place, generation)),
        }
    }
    if replies.len() == count {
        cache.stats.hits.fetch_add(count as u64, Ordering::Relaxed);
        let size = replies.iter().map(Bytes::len).sum::<usize>();
        let mut out = BytesMut::with_capacity(encode::array_header_len(count) + size);
        encode::array_header(&mut out, count);
        for reply in &replies {
            out.put_slice(reply);
        }
        return Some(Pending::Ready(out.freeze()));
    }
    cache
        .stats
        .misses
        .fetch_add(count as u64, Ordering::Relaxed);
    for (frame, place, generation) in missing {
        fill(cache, client, (frame, place, generation), ctx);
    }
    None
}

/// `GET key`, as a client sends it.
fn get_frame(key: &[u8]) -> Bytes {
    Request::from_args(&[b"GET".as_slice(), key]).into_frame()
}

/// Fills `GET key` in the background, unless this worker is at it.
fn fill(
    cache: &Arc<ReplyCache>,
    client: &Client,
    (frame, place, generation): (Bytes, Place, KeyGen),
    ctx: &Rc<WorkerCtx>,
) {
    let id = generation.get();
    let refused = REFUSED.with(|refused| refused.borrow().get(&id).copied());
    if refused == Some(cache.generations(generation)) {
        return;
    }
    if !FILLING.with(|filling| filling.borrow_mut().insert(id)) {
        return;
    }
    let (cache, fills, dialect) = (cache.clone(), super::fill::context(ctx), client.dialect());
    ctx.spawn(async move {
        let sent_under = cache.generations(generation);
        let done = fetch(&cache, &fills, frame, (place, generation), dialect).await;
        FILLING.with(|filling| filling.borrow_mut().remove(&id));
        if done.reply.first() == Some(&b'-') {
            REFUSED.with(|refused| {
                let mut refused = refused.borrow_mut();
                if refused.len() >= REFUSED_KEPT {
                    refused.clear();
                }
                refused.insert(id, sent_under);
            });
        }
    });
}
