//! Multi-key commands whose keys span slots (MGET, MSET, DEL, UNLINK,
//! EXISTS, TOUCH): one sub-command per slot, sent at once to the owning
//! masters, each following its own redirections, merged in the caller's
//! order. Any sub-command's error is the client's reply: never a silently
//! short one.

// Client-supplied counts, positions and cursors meet arithmetic here: every
// operation is checked (an overflow is a clear error, never a wrap or a panic).
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use orthrus_cluster::SLOT_COUNT;
use orthrus_resp::{Request, encode};

use crate::client::Pending;
use crate::cmd::outbound::{self, arg_of_key, step_of};
use crate::cmd::reply::{array_element_ranges, parse_integer};
use crate::node::Done;
use crate::node::answer::error_reply;
use crate::node::client::Dialect;
use crate::node::forward::{self, Access, Sent, Target};
use crate::process::Shared;
use crate::route::kind::Merge;
use crate::route::prefix::{Place, Prefixes};
use crate::route::table::CrossSlot;
use crate::worker::WorkerCtx;

/// Keys (or merged elements) handled in one go. A request with more is
/// split and merged a turn at a time, the worker serving its other
/// clients in between: a million-key MGET must not stall them for longer
/// than a node takes to answer it.
const KEYS_PER_TURN: usize = 4096;

/// Up to this many keys, a key's part is found by looking at each part;
/// above it, through an index by slot (one entry per slot).
const UNINDEXED_KEYS: usize = 32;

/// Up to this many keys, a merged array's element spans are kept in the
/// split's future instead of a vector of their own.
const INLINE_SPANS: usize = 8;

/// Emptied part lists kept per worker for the next split commands (with
/// many in flight, allocating one each went through the allocator's slow
/// path), and the most parts a kept list may have room for.
const STOCK_MAX: usize = 256;
const STOCK_ROOM: usize = 16;

thread_local! {
    static STOCK: std::cell::RefCell<Vec<Vec<Part>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One sub-command: its slot, which of the caller's keys it carries
/// (most often one: no allocation), and how its sending went.
struct Part {
    place: Place,
    first: usize,
    more: Vec<usize>,
    sent: Option<Sent>,
}

/// The caller's keys grouped by slot (and upstream, with routes by
/// prefix), in order of first appearance.
struct Parts {
    parts: Vec<Part>,
    /// Per slot of each upstream (upstream `u`'s slot `s` at
    /// `u * 16384 + s`), 1 + the index of its part in `parts` (0: none
    /// yet); empty for requests of at most [`UNINDEXED_KEYS`] keys.
    by_slot: Vec<u16>,
    /// The slots routing found, which spare hashing its keys again.
    cross: CrossSlot,
}

/// Yields to the worker's other tasks after every [`KEYS_PER_TURN`] units
/// of work.
struct Turns {
    done: usize,
}

/// Splits `req` (whose keys are every `step`-th argument from 1) per slot,
/// starting from where routing found them to `cross` slots.
pub fn dispatch(
    ctx: &Rc<WorkerCtx>,
    req: &Request,
    (merge, cross): (Merge, CrossSlot),
    dialect: Dialect,
    access: Access,
) -> Pending {
    let step = step_of(merge);
    let args = req.arg_count().saturating_sub(1);
    if args.checked_rem(step) != Some(0) {
        let name = String::from_utf8_lossy(req.arg(0).unwrap_or_default()).to_ascii_lowercase();
        return Pending::Ready(error_reply(&format!(
            "ERR wrong number of arguments for '{name}' command"
        )));
    }
    let key_count = args.checked_div(step).unwrap_or(0);
    let ctx = ctx.clone();
    let prefixes = ctx.prefixes();
    let upstreams = upstreams(&prefixes, &ctx.shared);
    if key_count <= KEYS_PER_TURN {
        // Sent now, while the request is read, like any other.
        let mut parts = Parts::new(key_count, upstreams, cross);
        parts.add(req, (step, &prefixes), 0..key_count);
        for part in &mut parts.parts {
            part.send(&ctx, (req, step, &prefixes), (dialect, access));
        }
        return Pending::Future(Box::pin(finish(ctx, merge, parts, key_count)));
    }
    // Too big for one turn: it starts when every earlier reply is written
    // and the requests after it wait for it, so that it still takes effect
    // in order although its parts are sent over several turns.
    let req = req.clone();
    Pending::deferred(Box::pin(async move {
        let mut turns = Turns { done: 0 };
        let mut parts = Parts::new(key_count, upstreams, cross);
        let mut at = 0;
        while at < key_count {
            let end = key_count.min(at.saturating_add(KEYS_PER_TURN));
            parts.add(&req, (step, &prefixes), at..end);
            turns.worked(end.saturating_sub(at)).await;
            at = end;
        }
        for part in &mut parts.parts {
            part.send(&ctx, (&req, step, &prefixes), (dialect, access));
            turns.worked(part.len()).await;
        }
        finish(ctx, merge, parts, key_count).await
    }))
}

/// Waits for every part's reply and merges them.
async fn finish(ctx: Rc<WorkerCtx>, merge: Merge, mut parts: Parts, key_count: usize) -> Done {
    let sent = parts.parts.iter_mut().map(Part::take_sent);
    let (replies, backend) = forward::resolve_all(&ctx.pool, sent).await;
    let reply = merge_replies(
        merge,
        &parts.parts,
        key_count,
        &replies,
        &mut Turns { done: 0 },
    )
    .await;
    parts.recycle();
    Done::from_nodes(reply, backend)
}

/// Merges the sub-replies; sub-reply `i` answers the keys of `parts[i]`.
async fn merge_replies(
    merge: Merge,
    parts: &[Part],
    key_count: usize,
    replies: &[Bytes],
    turns: &mut Turns,
) -> Bytes {
    if let Some(err) = replies.iter().find(|r| is_error(r)) {
        return err.clone();
    }
    match merge {
        Merge::Ok => replies
            .first()
            .cloned()
            .unwrap_or_else(|| error_reply("ERR orthrus: nothing to do")),
        Merge::Sum => sum(replies),
        Merge::Array => {
            // Where each key's element is: which sub-reply, which bytes of
            // it (`MISSING` until found); nothing copied before the reply
            // is written, once, at its size. A few keys' spans stay in
            // the future: no allocation.
            const MISSING: (usize, usize, usize) = (usize::MAX, 0, 0);
            let mut inline = [MISSING; INLINE_SPANS];
            let mut heap;
            let spans: &mut [(usize, usize, usize)] = if key_count <= INLINE_SPANS {
                inline.get_mut(..key_count).unwrap_or_default()
            } else {
                heap = vec![MISSING; key_count];
                &mut heap
            };
            // The reply's exact size: its buffer becomes the reply's bytes
            // without a shared header to allocate.
            let mut size = encode::array_header_len(key_count);
            for (i, (reply, part)) in replies.iter().zip(parts).enumerate() {
                let Some((count, elements)) = array_element_ranges(reply) else {
                    return unexpected(reply);
                };
                if count != part.len() {
                    return unexpected(reply);
                }
                let mut found = 0usize;
                for ((start, end), pos) in elements.zip(part.keys()) {
                    if let Some(span) = spans.get_mut(pos) {
                        *span = (i, start, end);
                    }
                    size = size.saturating_add(end.saturating_sub(start));
                    found = found.saturating_add(1);
                }
                if found != count {
                    return unexpected(reply);
                }
                turns.worked(count).await;
            }
            let mut out = BytesMut::with_capacity(size);
            encode::array_header(&mut out, key_count);
            for &mut (i, start, end) in spans {
                match replies.get(i).and_then(|r| r.get(start..end)) {
                    Some(e) => out.extend_from_slice(e),
                    None => return error_reply("ERR orthrus: a sub-reply was missing"),
                }
                turns.worked(1).await;
            }
            out.freeze()
        }
    }
}

/// The sum of integer replies (DEL, EXISTS, ...).
fn sum(replies: &[Bytes]) -> Bytes {
    let mut total = 0i64;
    for r in replies {
        match parse_integer(r) {
            Some(n) => total = total.saturating_add(n),
            None => return unexpected(r),
        }
    }
    let mut out = BytesMut::with_capacity(24);
    encode::integer(&mut out, total);
    out.freeze()
}

// === impl Parts ===

impl Parts {
    /// For `key_count` keys routed to at most `upstreams` upstreams, found
    /// by routing to `cross` slots.
    fn new(key_count: usize, upstreams: usize, cross: CrossSlot) -> Parts {
        let by_slot = if key_count > UNINDEXED_KEYS {
            vec![0; usize::from(SLOT_COUNT).saturating_mul(upstreams)]
        } else {
            Vec::new()
        };
        let parts = STOCK
            .with(|stock| stock.try_borrow_mut().ok()?.pop())
            .unwrap_or_default();
        Parts {
            parts,
            by_slot,
            cross,
        }
    }

    /// Gives the emptied part list back to the worker's stock.
    fn recycle(mut self) {
        self.parts.clear();
        if self.parts.capacity() == 0 || self.parts.capacity() > STOCK_ROOM {
            return;
        }
        STOCK.with(|stock| {
            if let Ok(mut stock) = stock.try_borrow_mut() {
                if stock.len() < STOCK_MAX {
                    stock.push(self.parts);
                }
            }
        });
    }

    /// Puts the keys numbered `keys` (0 is the first key) into their parts,
    /// each key's upstream the one `prefixes` route it to.
    fn add(
        &mut self,
        req: &Request,
        (step, prefixes): (usize, &Prefixes),
        keys: std::ops::Range<usize>,
    ) {
        for k in keys {
            let Some(key) = arg_of_key(req, k, step, 0) else {
                continue;
            };
            let place = if k < self.cross.at {
                self.cross.first
            } else if k == self.cross.at {
                self.cross.then
            } else {
                prefixes.place_of(key)
            };
            match self.part_of(place) {
                Some(part) => part.more.push(k),
                None => self.start(place, k),
            }
        }
    }

    fn part_of(&mut self, place: Place) -> Option<&mut Part> {
        if self.by_slot.is_empty() {
            return self.parts.iter_mut().find(|p| p.place == place);
        }
        let i = usize::from(*self.by_slot.get(index(place))?);
        self.parts.get_mut(i.checked_sub(1)?)
    }

    fn start(&mut self, place: Place, k: usize) {
        self.parts.push(Part {
            place,
            first: k,
            more: Vec::new(),
            sent: None,
        });
        // At most one part per slot and upstream, and a request of more
        // than 65,535 parts has its keys in at most 16384 x upstreams
        // places: an index past u16 is refused by `part_of` finding none,
        // which only splits more finely.
        let n = u16::try_from(self.parts.len()).unwrap_or(u16::MAX);
        if let Some(entry) = self.by_slot.get_mut(index(place)) {
            *entry = n;
        }
    }
}

/// How many upstreams a split command's keys may be routed to.
fn upstreams(prefixes: &Prefixes, shared: &Shared) -> usize {
    if prefixes.is_empty() {
        1
    } else {
        shared.upstreams.len().saturating_add(1)
    }
}

/// `place`'s entry in [`Parts::by_slot`].
fn index(place: Place) -> usize {
    usize::from(place.upstream)
        .saturating_mul(usize::from(SLOT_COUNT))
        .saturating_add(place.slot.index())
}

// === impl Part ===

impl Part {
    /// The caller's keys it carries, in order.
    fn keys(&self) -> impl Iterator<Item = usize> + Clone + '_ {
        std::iter::once(self.first).chain(self.more.iter().copied())
    }

    fn len(&self) -> usize {
        self.more.len().saturating_add(1)
    }

    /// How its sending went (taken once, to wait for its reply).
    fn take_sent(&mut self) -> Sent {
        self.sent.take().unwrap_or_else(|| Sent::Refused {
            reply: error_reply("ERR orthrus: a sub-command was not sent"),
            frame: Bytes::new(),
        })
    }

    /// Builds this part's sub-command (as forwarded: [`outbound::part`])
    /// and sends it.
    fn send(
        &mut self,
        ctx: &Rc<WorkerCtx>,
        (req, step, prefixes): (&Request, usize, &Prefixes),
        (dialect, access): (Dialect, Access),
    ) {
        let frame = outbound::part(
            ctx,
            (req, step, prefixes),
            self.keys(),
            (self.place, dialect.db),
            access.reads(),
        );
        self.sent = Some(forward::forward(
            &ctx.pool,
            frame,
            Target::Slot(self.place),
            dialect,
            access,
        ));
    }
}

// === impl Turns ===

impl Turns {
    /// Counts `n` units of work; yields once a turn's worth is done.
    async fn worked(&mut self, n: usize) {
        self.done = self.done.saturating_add(n);
        if self.done >= KEYS_PER_TURN {
            self.done = 0;
            tokio::task::yield_now().await;
        }
    }
}

fn is_error(frame: &[u8]) -> bool {
    matches!(frame.first(), Some(b'-' | b'!'))
}

fn unexpected(reply: &[u8]) -> Bytes {
    let shown: String = String::from_utf8_lossy(reply).chars().take(60).collect();
    error_reply(&format!("ERR orthrus: unexpected sub-reply {shown:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use orthrus_cluster::Slot;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn merge(how: Merge, keys: &[Vec<usize>], key_count: usize, replies: &[Bytes]) -> Bytes {
        let parts: Vec<Part> = keys
            .iter()
            .map(|k| Part {
                place: Place::for_key(b""),
                first: k[0],
                more: k[1..].to_vec(),
                sent: None,
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(merge_replies(
            how,
            &parts,
            key_count,
            replies,
            &mut Turns { done: 0 },
        ))
    }

    /// Where routing found `req`'s keys to span slots, as a split is given
    /// it.
    fn cross_of(req: &Request) -> CrossSlot {
        cross_by(req, &Prefixes::default())
    }

    /// [`cross_of`] with routes by prefix.
    fn cross_by(req: &Request, prefixes: &Prefixes) -> CrossSlot {
        match crate::route::table::CommandTable::builtin()
            .route_info(req, prefixes)
            .0
        {
            crate::route::table::Route::Split(_, cross) => cross,
            other => panic!("not split: {other:?}"),
        }
    }

    /// The keys of `req` (an MGET) grouped by part.
    fn grouped(req: &Request, count: usize) -> Vec<Vec<usize>> {
        let mut parts = Parts::new(count, 1, cross_of(req));
        parts.add(req, (1, &Prefixes::default()), 0..count);
        parts.parts.iter().map(|p| p.keys().collect()).collect()
    }

    #[test]
    fn keys_are_grouped_by_slot_with_and_without_the_index() {
        for count in [3, UNINDEXED_KEYS + 5] {
            let keys: Vec<String> = (0..count).map(|i| format!("{{t{}}}k{i}", i % 3)).collect();
            let mut args = vec!["MGET"];
            args.extend(keys.iter().map(String::as_str));
            let req = Request::from_args(&args);
            let want: Vec<Vec<usize>> = (0..3).map(|r| (r..count).step_by(3).collect()).collect();
            assert_eq!(grouped(&req, count), want, "{count} keys");
        }
    }

    /// The keys routing hashed before it met another slot are put in the
    /// first part unhashed, the one it met in its own, the rest hashed.
    #[test]
    fn the_split_starts_where_routing_met_another_slot() {
        let req = Request::from_args(&["MGET", "{a}1", "{a}2", "{b}3", "{a}4", "{c}5", "{b}6"]);
        let cross = cross_of(&req);
        assert_eq!(
            (cross.first, cross.at, cross.then),
            (Place::for_key(b"{a}"), 2, Place::for_key(b"{b}"))
        );
        assert_eq!(grouped(&req, 6), vec![vec![0, 1, 3], vec![2, 5], vec![4]]);
        let mut parts = Parts::new(6, 1, cross);
        parts.add(&req, (1, &Prefixes::default()), 0..6);
        let slots: Vec<Slot> = parts.parts.iter().map(|p| p.place.slot).collect();
        assert_eq!(slots, [b"a", b"b", b"c"].map(|t| Slot::for_key(t)));
    }

    #[test]
    fn keys_of_one_slot_routed_to_two_upstreams_go_in_two_parts() {
        let prefixes = Prefixes::new([(b"u:".to_vec(), 1), (b"v:".to_vec(), 2)]);
        for count in [4, UNINDEXED_KEYS + 4] {
            // One slot ({t}), three upstreams in turn, and the default.
            let keys: Vec<String> = (0..count)
                .map(|i| format!("{}{{t}}{i}", ["u:", "v:", "", "u:"][i % 4]))
                .collect();
            let mut args = vec!["MGET"];
            args.extend(keys.iter().map(String::as_str));
            let req = Request::from_args(&args);
            // Routing placed the first two keys, by their routes.
            let cross = cross_by(&req, &prefixes);
            assert_eq!(
                (cross.first.upstream, cross.at, cross.then.upstream),
                (1, 1, 2)
            );
            let mut parts = Parts::new(count, 3, cross);
            parts.add(&req, (1, &prefixes), 0..count);
            let grouped: Vec<(u8, Vec<usize>)> = parts
                .parts
                .iter()
                .map(|p| (p.place.upstream, p.keys().collect()))
                .collect();
            let of = |rests: &[usize]| -> Vec<usize> {
                (0..count).filter(|i| rests.contains(&(i % 4))).collect()
            };
            let want = vec![(1, of(&[0, 3])), (2, of(&[1])), (0, of(&[2]))];
            assert_eq!(grouped, want, "{count} keys");
            let slot = Slot::for_key(b"t");
            assert!(parts.parts.iter().all(|p| p.place.slot == slot));
        }
    }

    /// A split command's future is boxed once per command: up to 1,032
    /// bytes glibc's allocator serves it from its per-thread cache, past
    /// that through its slower bins (at 1,080 bytes a three-key MGET cost
    /// about 700 instructions more).
    #[test]
    fn a_split_commands_future_stays_small() {
        fn output_size<A, B, C, D, F>(_: fn(A, B, C, D) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let size = output_size(finish);
        assert!(size <= 1024, "a split command's future is {size} bytes");
    }

    #[test]
    fn mget_is_reassembled_in_key_order() {
        // keys 0 and 2 went to one node, key 1 to another.
        let keys = vec![vec![0, 2], vec![1]];
        let replies = vec![b("*2\r\n$1\r\na\r\n$-1\r\n"), b("*1\r\n$1\r\nb\r\n")];
        let out = merge(Merge::Array, &keys, 3, &replies);
        assert_eq!(&out[..], b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n");
    }

    #[test]
    fn integers_are_summed_and_errors_win() {
        let keys = vec![vec![0], vec![1]];
        let out = merge(Merge::Sum, &keys, 2, &[b(":2\r\n"), b(":3\r\n")]);
        assert_eq!(&out[..], b":5\r\n");
        let out = merge(Merge::Sum, &keys, 2, &[b(":2\r\n"), b("-ERR boom\r\n")]);
        assert_eq!(&out[..], b"-ERR boom\r\n");
        let out = merge(Merge::Ok, &keys, 2, &[b("+OK\r\n"), b("+OK\r\n")]);
        assert_eq!(&out[..], b"+OK\r\n");
    }

    #[test]
    fn a_short_sub_reply_is_an_error_not_a_short_reply() {
        let keys = vec![vec![0, 1]];
        let out = merge(Merge::Array, &keys, 2, &[b("*1\r\n$1\r\na\r\n")]);
        assert!(out.starts_with(b"-ERR orthrus"));
        // More elements than keys, an element cut short, not an array.
        let one = vec![vec![0]];
        for bad in [
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            "*1\r\n$5\r\nab\r\n",
            ":1\r\n",
        ] {
            let out = merge(Merge::Array, &one, 1, &[b(bad)]);
            assert!(out.starts_with(b"-ERR orthrus"), "{bad:?}");
        }
    }
}
