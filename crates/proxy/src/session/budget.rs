//! A client's reply budget: the bytes orthrus holds for it (replies taken
//! into its output and not yet written, and the replies it is owed), past
//! which its requests wait, and Redis's `client-output-buffer-limit` for
//! normal clients, past which it is closed.
//!
//! A reply orthrus is owed is counted at the size of the client's largest
//! recent reply, and never at less than [`UNSEEN_SHARE`]th of
//! `client.max_pending_bytes`: the size of a reply is known only once it
//! arrives, and by then its bytes are held. Small replies first cannot make
//! room for many large ones after them; at most that many requests of a
//! client are in flight at once, so a client that never reads holds at most
//! that many of its largest replies (16 MiB / 32 = 512 KiB each at the
//! default: 32 in flight).

use super::work::Work;
use super::{Session, Stream};
use crate::time::Tick;

/// Replies to come are counted at no less than this share of
/// `client.max_pending_bytes` each.
const UNSEEN_SHARE: usize = 32;
/// A client that leaves holding at least this many bytes of replies has
/// the allocator trimmed after it (see `server::memory`).
const TRIM_AFTER: usize = 4 * 1024 * 1024;

impl<S: Stream> Session<S> {
    /// Whether another request may start: the reply queue is within
    /// `client.max_pending` entries and `client.max_pending_bytes` (the
    /// output, the replies to come, and the requests waiting for them),
    /// and none of it is being sent again ([`Work::replay_left`]).
    #[inline]
    pub(super) fn has_room(&self, w: &Work) -> bool {
        let queued = w.queue.len();
        // Nothing held (no request queued, so none of their bytes and
        // nothing being sent again): the common case, decided at once.
        if queued == 0 && w.output.is_empty() {
            return true;
        }
        let limits = &self.ctx.shared.settings.raw.client;
        let each = (self.reply_hint as usize).max(limits.max_pending_bytes / UNSEEN_SHARE);
        queued < limits.max_pending
            && w.replay_left == 0
            && w.output.len() + queued * each + w.request_bytes < limits.max_pending_bytes
    }

    /// Counts a reply of `size` bytes in the estimate of the client's
    /// replies: up at once to a larger one, an eighth of the way down to a
    /// smaller one (never below the floor [`Session::has_room`] counts).
    pub(super) fn fold_reply_size(&mut self, size: u32) {
        let hint = self.reply_hint;
        self.reply_hint = size.max(hint - hint.saturating_sub(size) / 8);
    }

    /// The client does not take its output: true if that puts it past
    /// `client.output_buffer_hard_limit`, or past
    /// `client.output_buffer_soft_limit` for
    /// `client.output_buffer_soft_seconds` (Redis's
    /// `client-output-buffer-limit` for normal clients), which closes it.
    #[cold]
    pub(super) fn over_output_limit(&self, w: &mut Work) -> bool {
        let limits = &self.ctx.shared.settings.raw.client;
        let (hard, soft) = (
            limits.output_buffer_hard_limit,
            limits.output_buffer_soft_limit,
        );
        if hard == 0 && soft == 0 {
            return false;
        }
        let held = self.held(w);
        let over_soft = soft > 0 && held > soft;
        if !over_soft {
            w.over_soft_since = None;
        }
        let since = over_soft.then(|| *w.over_soft_since.get_or_insert_with(Tick::now));
        let soft_for = since.map(Tick::elapsed);
        let over = (hard > 0 && held > hard)
            || soft_for.is_some_and(|d| d.as_secs() >= limits.output_buffer_soft_seconds);
        if over {
            tracing::warn!(
                client.id = self.client.id(),
                client.addr = %self.client.peer(),
                held_bytes = held,
                hard_limit = hard,
                soft_limit = soft,
                soft_seconds = limits.output_buffer_soft_seconds,
                "closing a client past its output buffer limit (client.output_buffer_*)"
            );
        }
        over
    }
}

impl<S> Session<S> {
    /// Bytes held for the client: its unwritten output, and the replies
    /// it is owed at the size of its recent ones.
    fn held(&self, w: &Work) -> usize {
        w.output.len() + w.queue.len() * (self.reply_hint as usize)
    }

    /// The client leaves with `w`: if it held many bytes of replies, the
    /// allocator is asked to give the memory they leave free back to the
    /// system.
    pub(super) fn note_leaving(&self, w: &Work) {
        if self.held(w) >= TRIM_AFTER {
            self.ctx
                .shared
                .trim_due
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
