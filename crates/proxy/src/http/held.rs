//! The admin endpoint's connections, oldest first, so that a new one can
//! take the place of the oldest that is only waiting: a connection still
//! sending its request head, or draining after its response, owes nothing
//! to anyone and is closed to make room. Only a connection writing its
//! response keeps its place (a probe's is written at once; `/metrics` ones
//! are a few at most, `MAX_SCRAPES`), so a probe always finds room, however
//! many slow connections come before it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::task::AbortHandle;

/// Every connection being served, in the order they were accepted.
pub(super) struct Held {
    max: usize,
    queue: VecDeque<Entry>,
}

struct Entry {
    task: AbortHandle,
    phase: Phase,
}

/// Whether a connection may be closed to make room; shared between its
/// task and [`Held`].
#[derive(Clone, Default)]
pub(super) struct Phase(Arc<AtomicBool>);

/// What [`Held::make_room`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Room {
    /// Fewer than the bound are held.
    Free,
    /// The oldest waiting connection was closed for this one.
    Evicted,
    /// Every held connection is writing its response.
    Full,
}

// === impl Held ===

impl Held {
    pub(super) fn new(max: usize) -> Held {
        Held {
            max: max.max(1),
            queue: VecDeque::new(),
        }
    }

    /// Forgets the connections that ended; at the bound, closes the
    /// oldest one that is only waiting.
    pub(super) fn make_room(&mut self) -> Room {
        self.queue.retain(|e| !e.task.is_finished());
        if self.queue.len() < self.max {
            return Room::Free;
        }
        let Some(at) = self.queue.iter().position(|e| e.phase.waiting()) else {
            return Room::Full;
        };
        if let Some(oldest) = self.queue.remove(at) {
            // Dropping its future closes its socket and frees its place.
            oldest.task.abort();
        }
        Room::Evicted
    }

    /// Holds a new connection's task; [`Held::make_room`] must have found
    /// room for it.
    pub(super) fn push(&mut self, task: AbortHandle, phase: Phase) {
        self.queue.push_back(Entry { task, phase });
    }
}

// === impl Phase ===

impl Phase {
    /// A new connection: waiting for its head.
    pub(super) fn new() -> Phase {
        Phase(Arc::new(AtomicBool::new(false)))
    }

    /// Writing its response: not to be closed.
    pub(super) fn writing(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Waiting again (draining what the client still sends).
    pub(super) fn done_writing(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    fn waiting(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_waiting_connection_makes_room_and_writers_keep_theirs() {
        let mut held = Held::new(3);
        let mut phases = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..3 {
            assert_eq!(held.make_room(), Room::Free);
            let task = tokio::spawn(std::future::pending::<()>());
            let phase = Phase::new();
            held.push(task.abort_handle(), phase.clone());
            phases.push(phase);
            tasks.push(task);
        }
        // The oldest writes: the second, waiting, is the one closed.
        phases[0].writing();
        assert_eq!(held.make_room(), Room::Evicted);
        let second = tasks.remove(1);
        assert!(second.await.is_err_and(|e| e.is_cancelled()));
        held.push(tokio::spawn(async {}).abort_handle(), Phase::new());
        // Every one writing: no room.
        phases[2].writing();
        let mut last = Phase::new();
        for _ in 0..2 {
            let phase = Phase::new();
            phase.writing();
            last = phase.clone();
            held.push(
                tokio::spawn(std::future::pending::<()>()).abort_handle(),
                phase,
            );
        }
        tokio::task::yield_now().await;
        assert_eq!(held.make_room(), Room::Full);
        last.done_writing();
        assert_eq!(held.make_room(), Room::Evicted);
    }
}
