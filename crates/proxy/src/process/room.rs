//! The room `memory_limit_mb` leaves to requests still being read.
//!
//! A request still being read holds its bytes as they arrive; sampling
//! RSS alone lets clients that stream large requests fast go far past the
//! limit between samples. So a session whose incomplete request is large
//! ([`LARGE_INCOMPLETE`] or more, by what its headers announce) reserves
//! the bytes it is known to need ([`Reservation`]), and is refused when
//! they do not fit under the limit beside the last RSS sample (less the
//! incomplete requests' bytes that sample held) and every other
//! reservation; an over-limit process refuses any reservation that grows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An incomplete request at least this large reserves its bytes.
pub const LARGE_INCOMPLETE: usize = 64 * 1024;

/// What `memory_limit_mb` leaves to requests still being read; all in
/// bytes.
#[derive(Debug, Default)]
pub struct MemoryRoom {
    /// `memory_limit_mb`; 0 for none.
    limit: u64,
    /// The last RSS sample, less what the reserving requests held then.
    base: AtomicU64,
    /// Reserved by incomplete requests: what each is known to need.
    reserved: AtomicU64,
    /// Read so far by the reserving requests.
    buffered: AtomicU64,
}

/// A session's reservation for its incomplete request; given back when
/// dropped.
pub struct Reservation {
    room: Arc<MemoryRoom>,
    need: u64,
    buffered: u64,
}

/// A request refused for lack of room: what was left for it.
pub struct NoRoom {
    pub left: u64,
}

// === impl MemoryRoom ===

impl MemoryRoom {
    pub fn new(limit_mb: u64) -> MemoryRoom {
        MemoryRoom {
            limit: limit_mb.saturating_mul(1024 * 1024),
            ..MemoryRoom::default()
        }
    }

    /// Whether `memory_limit_mb` is set.
    pub fn is_limited(&self) -> bool {
        self.limit > 0
    }

    /// Bytes the reserving requests have read.
    pub fn buffered(&self) -> u64 {
        self.buffered.load(Ordering::Relaxed)
    }

    /// A new RSS sample, taken when the reserving requests had read
    /// `buffered` bytes.
    pub fn sampled(&self, rss: u64, buffered: u64) {
        self.base
            .store(rss.saturating_sub(buffered), Ordering::Relaxed);
    }
}

/// Reserves room for an incomplete request known to need `need` bytes, of
/// which `buffered` are read, in place of `held` (the same request's
/// reservation so far). Refused when the process is `over` the limit and
/// the request needs more, or when what it needs more does not fit.
pub fn reserve(
    room: &Arc<MemoryRoom>,
    over: bool,
    held: Option<Reservation>,
    need: u64,
    buffered: u64,
) -> Result<Reservation, NoRoom> {
    let mut next = match held {
        Some(held) => held,
        None => Reservation {
            room: room.clone(),
            need: 0,
            buffered: 0,
        },
    };
    if buffered >= next.buffered {
        room.buffered
            .fetch_add(buffered - next.buffered, Ordering::Relaxed);
    } else {
        room.buffered
            .fetch_sub(next.buffered - buffered, Ordering::Relaxed);
    }
    next.buffered = buffered;
    if need > next.need {
        let more = need - next.need;
        let others = room.reserved.fetch_add(more, Ordering::Relaxed);
        let used = room.base.load(Ordering::Relaxed).saturating_add(others);
        if over || used.saturating_add(more) > room.limit {
            room.reserved.fetch_sub(more, Ordering::Relaxed);
            let left = room.limit.saturating_sub(used);
            return Err(NoRoom { left }); // `next` gives back the rest
        }
        next.need = need;
    }
    Ok(next)
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let room = &self.room;
        room.reserved.fetch_sub(self.need, Ordering::Relaxed);
        room.buffered.fetch_sub(self.buffered, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn reservations_share_the_room_and_give_it_back() {
        let room = Arc::new(MemoryRoom::new(100));
        room.sampled(20 * MIB, 0);
        let a = reserve(&room, false, None, 50 * MIB, MIB).ok();
        assert!(a.is_some());
        // 20 + 50 + 40 > 100.
        let refused = reserve(&room, false, None, 40 * MIB, MIB).err();
        assert_eq!(refused.map(|r| r.left), Some(30 * MIB));
        // The same request growing within its own reservation is not refused.
        let a = reserve(&room, false, a, 50 * MIB, 30 * MIB).ok();
        assert_eq!(room.buffered(), 30 * MIB);
        drop(a);
        assert_eq!(room.buffered(), 0);
        assert!(reserve(&room, false, None, 40 * MIB, MIB).is_ok());
        assert!(
            reserve(&room, true, None, MIB, 0).is_err(),
            "over the limit"
        );
    }
}
