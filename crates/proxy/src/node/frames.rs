//! The one way a node's bytes become replies: [`Frames`] cuts a read buffer
//! into replies of as many frames as the request asked for and RESP3 pushes
//! (wherever a push arrives, even between the frames of one reply), and
//! [`FrameReader`] reads a connection until the next of them is complete.
//! Every connection kind reads through them: shared and private
//! connections, dedicated ones, MONITOR and subscription streams, and the
//! one-request client of handshakes and topology queries. [`split`] walks
//! the frames of a reply already read.

use std::io;

use bytes::{Buf, Bytes, BytesMut};
use orthrus_resp::{ReplyScanner, scan_reply};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Room a [`FrameReader`] makes before each read.
const READ_ROOM: usize = 4096;

/// What a node sent: the reply to a request, or an out-of-band push.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// All the frames of one reply, together.
    Reply(Bytes),
    /// A RESP3 push (`>`): an invalidation, a pub/sub message.
    Push(Bytes),
}

/// Where the cutting of a buffer stands: the resumable scanner (a large
/// reply arriving in many reads is walked once) and the frames of the
/// reply being assembled that are complete already.
#[derive(Debug, Default)]
pub struct Frames {
    scanner: ReplyScanner,
    done_len: usize,
    done_frames: usize,
}

/// A connection's read half and what it has read: replies and pushes, one
/// at a time.
pub struct FrameReader<R> {
    rd: R,
    buf: BytesMut,
    frames: Frames,
    max_buffered: usize,
}

/// The frames of `replies`, bytes read as one reply of several frames, as
/// zero-copy slices; stops at the first incomplete or malformed one.
pub fn split(replies: &Bytes) -> impl Iterator<Item = Bytes> + '_ {
    let limits = orthrus_resp::Limits::for_replies();
    let mut at = 0;
    std::iter::from_fn(move || {
        let len = scan_reply(replies.get(at..)?, &limits).ok()??;
        let frame = replies.slice(at..at + len);
        at += len;
        Some(frame)
    })
}

// === impl Frames ===

impl Frames {
    /// The next complete push or reply of `want` frames (at least one) at
    /// the start of `buf`, taken out of it; `Ok(None)` until its bytes are
    /// in. `want` must stay the same until the reply is returned.
    #[inline(always)]
    pub fn next(
        &mut self,
        buf: &mut BytesMut,
        want: usize,
    ) -> Result<Option<Frame>, orthrus_resp::ProtocolError> {
        while self.done_frames < want.max(1) {
            let rest = buf.get(self.done_len..).unwrap_or_default();
            if rest.is_empty() {
                return Ok(None);
            }
            let Some(n) = self.scanner.scan(rest)? else {
                return Ok(None);
            };
            if rest.first() == Some(&b'>') {
                return Ok(Some(Frame::Push(self.take_push(buf, n))));
            }
            self.done_len += n;
            self.done_frames += 1;
        }
        let reply = buf.split_to(self.done_len).freeze();
        self.done_len = 0;
        self.done_frames = 0;
        Ok(Some(Frame::Reply(reply)))
    }

    /// Takes the `len`-byte push that follows the reply frames complete so
    /// far out of `buf`; those frames move up over it.
    #[cold]
    fn take_push(&self, buf: &mut BytesMut, len: usize) -> Bytes {
        let done = self.done_len;
        if done == 0 {
            return buf.split_to(len).freeze();
        }
        let push = Bytes::copy_from_slice(buf.get(done..done + len).unwrap_or_default());
        buf.copy_within(0..done, len);
        buf.advance(len);
        push
    }
}

// === impl FrameReader ===

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Reads `rd`, holding at most `max_buffered` bytes of one reply.
    pub fn new(rd: R, max_buffered: usize) -> FrameReader<R> {
        FrameReader {
            rd,
            buf: BytesMut::with_capacity(READ_ROOM),
            frames: Frames::default(),
            max_buffered,
        }
    }

    /// The connection, to write to it.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.rd
    }

    /// Nothing read is left over: no reply is partly in.
    pub fn is_idle(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next push, or the next reply of `want` frames. A malformed frame,
    /// an oversized reply and the node closing the connection are errors:
    /// the connection cannot be read further. Cancel-safe: what was read
    /// stays for the next call.
    pub async fn next(&mut self, want: usize) -> io::Result<Frame> {
        loop {
            if let Some(frame) = self
                .frames
                .next(&mut self.buf, want)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
            {
                return Ok(frame);
            }
            if self.buf.len() > self.max_buffered {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "reply too large",
                ));
            }
            self.buf.reserve(READ_ROOM);
            if self.rd.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "node closed the connection",
                ));
            }
        }
    }

    /// The next reply of `want` frames; pushes before it are dropped (on
    /// connections that subscribe to nothing, none is expected).
    pub async fn reply(&mut self, want: usize) -> io::Result<Bytes> {
        loop {
            if let Frame::Reply(reply) = self.next(want).await? {
                return Ok(reply);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(buf: &mut BytesMut, frames: &mut Frames, want: usize) -> Vec<Frame> {
        std::iter::from_fn(|| frames.next(buf, want).expect("scan")).collect()
    }

    #[test]
    fn a_push_between_the_frames_of_a_reply_is_taken_out() {
        let mut buf =
            BytesMut::from(&b"+OK\r\n+QUEUED\r\n>2\r\n$1\r\na\r\n:1\r\n*1\r\n:2\r\n+PONG\r\n"[..]);
        let mut frames = Frames::default();
        assert_eq!(
            frames.next(&mut buf, 3).expect("scan"),
            Some(Frame::Push(Bytes::from_static(b">2\r\n$1\r\na\r\n:1\r\n")))
        );
        assert_eq!(
            all(&mut buf, &mut frames, 3),
            vec![Frame::Reply(Bytes::from_static(
                b"+OK\r\n+QUEUED\r\n*1\r\n:2\r\n"
            ))]
        );
        assert_eq!(
            all(&mut buf, &mut frames, 1),
            vec![Frame::Reply(Bytes::from_static(b"+PONG\r\n"))]
        );
    }

    #[test]
    fn every_split_point_gives_the_same_frames() {
        let input = b"+OK\r\n>1\r\n$1\r\nx\r\n$3\r\nabc\r\n>1\r\n:9\r\n*2\r\n:1\r\n:2\r\n";
        for cut in 0..=input.len() {
            let (mut buf, mut frames) = (BytesMut::new(), Frames::default());
            buf.extend_from_slice(&input[..cut]);
            let mut got = all(&mut buf, &mut frames, 3);
            buf.extend_from_slice(&input[cut..]);
            got.extend(all(&mut buf, &mut frames, 3));
            assert_eq!(
                got,
                vec![
                    Frame::Push(Bytes::from_static(b">1\r\n$1\r\nx\r\n")),
                    Frame::Push(Bytes::from_static(b">1\r\n:9\r\n")),
                    Frame::Reply(Bytes::from_static(
                        b"+OK\r\n$3\r\nabc\r\n*2\r\n:1\r\n:2\r\n"
                    )),
                ],
                "cut at {cut}"
            );
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn a_malformed_frame_is_an_error() {
        let mut buf = BytesMut::from(&b"?bad\r\n"[..]);
        assert!(Frames::default().next(&mut buf, 1).is_err());
    }

    #[test]
    fn split_walks_complete_frames() {
        let replies = Bytes::from_static(b"+OK\r\n:1\r\n$2\r\nab");
        let frames: Vec<Bytes> = split(&replies).collect();
        assert_eq!(
            frames,
            vec![
                Bytes::from_static(b"+OK\r\n"),
                Bytes::from_static(b":1\r\n")
            ]
        );
    }
}
