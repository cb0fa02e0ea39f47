//! What a session has to write to its client: replies and pushes in the
//! order they became due. Small ones are gathered into one buffer; a large
//! one is kept as its own chunk (no copy), and everything due goes out in
//! one vectored write. The buffer is given back once it is written, so an
//! idle client holds no output memory.
//!
//! Once everything is written the stream is flushed: a TLS stream may
//! take the bytes into its records and keep some for when the socket has
//! room (for TCP and Unix sockets the flush does nothing).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::AsyncWrite;

/// A reply at least this large is written from its own buffer.
const LARGE: usize = 16 * 1024;
/// Output buffer kept between replies; a larger one is freed once written.
const KEEP: usize = 512;
/// Chunks handed to one `writev`.
const MAX_SLICES: usize = 64;

/// Bytes due to the client, oldest first: `chunks`, then `tail` from
/// `written` on.
#[derive(Default)]
pub struct Output {
    /// Large replies (and the small ones before them), boxed: most clients
    /// never get one, and the session (every idle connection's memory)
    /// stays smaller without the queue inline (one pointer, not four words).
    #[allow(clippy::box_collection)]
    chunks: Option<Box<VecDeque<Bytes>>>,
    /// Small replies, copied; a plain vector (no reference count), whose
    /// room is reused as it is: it is written from `written` on and
    /// cleared once all of it is.
    tail: Vec<u8>,
    written: usize,
    len: usize,
    /// Bytes were written since the last flush of the stream.
    unflushed: bool,
}

// === impl Output ===

impl Output {
    /// Bytes not yet written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether everything is written and flushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && !self.unflushed
    }

    /// Queues `reply` after everything queued before it.
    pub fn push(&mut self, reply: Bytes) {
        if reply.is_empty() {
            return;
        }
        self.len += reply.len();
        self.unflushed = true;
        if reply.len() >= LARGE {
            let chunks = self.chunks.get_or_insert_with(Box::default);
            if self.written < self.tail.len() {
                let tail = Bytes::from(std::mem::take(&mut self.tail));
                chunks.push_back(tail.slice(self.written..));
            }
            self.tail.clear();
            self.written = 0;
            chunks.push_back(reply);
        } else {
            self.tail.extend_from_slice(&reply);
        }
    }

    /// Writes as much as the socket takes; `Ready(Ok(()))` once all is
    /// written and flushed, `Pending` when the socket is full (the task is
    /// woken when it has room).
    pub fn poll_flush(
        &mut self,
        stream: &mut (impl AsyncWrite + Unpin),
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.len > 0 {
            let n = match self.chunks.as_deref().filter(|c| !c.is_empty()) {
                None => {
                    std::task::ready!(Pin::new(&mut *stream).poll_write(cx, self.unwritten_tail()))?
                }
                Some(chunks) => {
                    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_SLICES);
                    slices.extend(chunks.iter().take(MAX_SLICES - 1).map(|c| IoSlice::new(c)));
                    let tail = self.unwritten_tail();
                    if !tail.is_empty() {
                        slices.push(IoSlice::new(tail));
                    }
                    std::task::ready!(Pin::new(&mut *stream).poll_write_vectored(cx, &slices))?
                }
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(n);
        }
        if self.unflushed {
            std::task::ready!(Pin::new(&mut *stream).poll_flush(cx))?;
            self.unflushed = false;
        }
        self.release();
        Poll::Ready(Ok(()))
    }

    fn advance(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let chunks = self.chunks.as_deref_mut();
            match chunks.and_then(|c| c.front_mut()) {
                Some(chunk) if chunk.len() <= n => {
                    n -= chunk.len();
                    self.chunks.as_deref_mut().and_then(VecDeque::pop_front);
                }
                Some(chunk) => {
                    chunk.advance(n);
                    return;
                }
                None => {
                    self.written += n;
                    return;
                }
            }
        }
    }

    /// Everything is written: keep at most a small buffer for the next
    /// reply, none after a burst.
    fn release(&mut self) {
        if self.tail.capacity() > KEEP {
            self.tail = Vec::new();
        } else {
            self.tail.clear();
        }
        self.written = 0;
        self.chunks = None;
    }

    /// The small replies not yet written.
    fn unwritten_tail(&self) -> &[u8] {
        self.tail.get(self.written..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_kept_across_small_and_large_replies() {
        let mut out = Output::default();
        out.push(Bytes::from_static(b"+a\r\n"));
        out.push(Bytes::from(vec![b'x'; LARGE]));
        out.push(Bytes::from_static(b"+b\r\n"));
        assert_eq!(out.len(), LARGE + 8);
        out.advance(2);
        out.advance(2 + LARGE);
        assert_eq!(out.len(), 4);
        assert_eq!(out.unwritten_tail(), b"+b\r\n");
        out.advance(4);
        assert_eq!(out.len(), 0);
        assert!(!out.is_empty(), "written, not flushed yet");
    }

    #[test]
    fn a_partial_write_resumes_inside_a_chunk() {
        let mut out = Output::default();
        out.push(Bytes::from(vec![b'y'; LARGE + 10]));
        out.advance(LARGE);
        assert_eq!(out.len(), 10);
        let chunks = out.chunks.as_deref();
        assert_eq!(chunks.and_then(|c| c.front()).map(Bytes::len), Some(10));
    }
}
