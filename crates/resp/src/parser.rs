//! [`RequestParser`]: turns a client's read buffer into [`Request`]s.
//!
//! A frame starting with `*` is multibulk; anything else is an inline line
//! (see `inline`). Progress through a multibulk frame is kept between calls,
//! so a request that arrives in many reads (a 100 MB `SET`, a `DEL` with a
//! million keys) is looked at once, not re-scanned on every read; the search
//! for a line end likewise resumes where it stopped. The common case, a
//! whole request of a few arguments already in the buffer, is read in one
//! pass before any of that (`parse_whole`).

use bytes::{Buf, BytesMut};
use memchr::memchr;

use crate::inline;
use crate::line::{crlf_at, find_cr};
use crate::number::{parse_i64, parse_len, short_len};
use crate::request::{ArgRange, ArgRanges, INLINE_ARGS, Request};
use crate::{Limits, PREAUTH_MAX_ARGS, PREAUTH_MAX_BULK_LEN, ProtocolError};

/// Parses client requests; one per connection, since it remembers how far
/// it got into a request that is not complete yet.
///
/// The buffer passed to [`parse`](Self::parse) must be the same one on
/// every call, with bytes only appended at its end in between (the usual
/// read loop). If that ever changes, call [`reset`](Self::reset).
#[derive(Debug)]
pub struct RequestParser {
    limits: Limits,
    /// How far the current line was searched for its end without finding
    /// it, so the next search starts there.
    line_scan: usize,
    /// The multibulk request being read, once its `*N` line is complete.
    multibulk: Option<Multibulk>,
    /// The client has not authenticated: Redis's pre-AUTH limits apply
    /// ([`PREAUTH_MAX_ARGS`], [`PREAUTH_MAX_BULK_LEN`]).
    unauthenticated: bool,
}

/// Progress through a multibulk frame that starts at offset 0 of the
/// buffer.
#[derive(Debug)]
struct Multibulk {
    /// Offset of the next header or bulk to read.
    pos: usize,
    /// Arguments not yet read.
    remaining: usize,
    /// Length of the bulk at `pos`, once its `$N` line has been read.
    bulk_len: Option<usize>,
    args: ArgRanges,
}

/// What one step over the buffer came to.
enum Step {
    /// A request is ready.
    Request(Request),
    /// Bytes were consumed without producing a request (`*0`, a blank
    /// inline line); try again.
    Skipped,
    /// The multibulk header is read; go on with its arguments.
    Started,
    /// Wait for more bytes.
    Incomplete,
}

/// Which header line is being read, for the errors it can produce.
#[derive(Clone, Copy)]
enum Header {
    Count,
    Bulk,
}

// === impl RequestParser ===

impl RequestParser {
    /// A parser enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            line_scan: 0,
            multibulk: None,
            unauthenticated: false,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Changes the limits; they apply from the next check on, including to
    /// a request already partly read.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Whether the client still has to authenticate. While it has, a
    /// request of more than [`PREAUTH_MAX_ARGS`] arguments or with an
    /// argument longer than [`PREAUTH_MAX_BULK_LEN`] is refused as soon as
    /// its header says so (Redis's `unauthenticated multibulk length` and
    /// `unauthenticated bulk length`); inline lines likewise.
    pub fn set_unauthenticated(&mut self, unauthenticated: bool) {
        self.unauthenticated = unauthenticated;
    }

    /// Bytes the incomplete request at the front of the buffer is known
    /// to need, counted from its start: up to the end of the argument
    /// being read once its `$N` line is in, else what was parsed so far;
    /// 0 with no request started. A lower bound of its size: the rest of
    /// its arguments are not announced yet.
    pub fn awaiting(&self) -> usize {
        self.multibulk.as_ref().map_or(0, |mb| {
            mb.pos
                .saturating_add(mb.bulk_len.map_or(0, |len| len.saturating_add(2)))
        })
    }

    /// Forgets any partly read request.
    pub fn reset(&mut self) {
        self.line_scan = 0;
        self.multibulk = None;
    }

    /// Parses the first complete request at the front of `buf`, removing its
    /// bytes from `buf`.
    ///
    /// `Ok(None)` means more bytes are needed; `buf` is then untouched,
    /// except that requests with no arguments (blank inline lines, `*0`,
    /// `*-1`) are consumed and skipped, as Redis skips them. Input that is
    /// merely incomplete is never an error, wherever it is cut, and the
    /// outcome never depends on how the bytes were split into reads. An
    /// error leaves the connection out of sync: answer it and close.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        match &self.multibulk {
            None => {
                if let Some(request) = parse_whole(buf, &self.limits, self.unauthenticated) {
                    self.line_scan = 0;
                    return Ok(Some(request));
                }
            }
            // The buffer shrank under us; what we knew about it is void.
            Some(mb) if mb.pos > buf.len() => self.reset(),
            Some(_) => {}
        }
        self.parse_stepwise(buf)
    }

    /// The general path: one header or argument at a time, progress kept
    /// in `self` while the request is incomplete.
    fn parse_stepwise(&mut self, buf: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        loop {
            let step = match self.multibulk {
                Some(_) => self.read_args(buf)?,
                None => match buf.first() {
                    None => Step::Incomplete,
                    Some(b'*') => self.read_count(buf)?,
                    Some(_) => self.read_inline(buf)?,
                },
            };
            match step {
                Step::Request(request) => return Ok(Some(request)),
                Step::Incomplete => return Ok(None),
                Step::Skipped | Step::Started => {}
            }
        }
    }

    fn read_inline(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        let (max, too_big) = match self.unauthenticated {
            true if self.limits.max_inline_len > PREAUTH_MAX_BULK_LEN => (
                PREAUTH_MAX_BULK_LEN,
                ProtocolError::UnauthenticatedBulkLength,
            ),
            _ => (
                self.limits.max_inline_len,
                ProtocolError::TooBigInlineRequest,
            ),
        };
        let from = self.line_scan.min(buf.len());
        let Some(newline) = buf.get(from..).and_then(|tail| memchr(b'\n', tail)) else {
            self.line_scan = buf.len();
            // A trailing CR may be the first half of the line end: leave it
            // out so that the verdict does not depend on where reads split.
            let line = buf.len() - usize::from(buf.ends_with(b"\r"));
            return if line > max {
                Err(too_big)
            } else {
                Ok(Step::Incomplete)
            };
        };
        let newline = from + newline;
        self.line_scan = 0;
        let line = buf.get(..newline).unwrap_or(&[]);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > max {
            // Redis only checks lines still waiting for their end; checking
            // this one too makes the limit independent of read sizes.
            return Err(too_big);
        }
        let args = inline::split_args(line)?;
        if self.unauthenticated && args.len() > PREAUTH_MAX_ARGS {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        buf.advance(newline + 1);
        Ok(if args.is_empty() {
            Step::Skipped
        } else {
            Step::Request(args.into_request())
        })
    }

    /// Reads the `*N` line at the front of `buf`.
    fn read_count(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        let Some((digits, next)) =
            read_line(buf, 0, Header::Count, &mut self.line_scan, &self.limits)?
        else {
            return Ok(Step::Incomplete);
        };
        let count = parse_i64(digits).ok_or(ProtocolError::InvalidMultibulkLength)?;
        if count <= 0 {
            buf.advance(next);
            return Ok(Step::Skipped);
        }
        // Redis's order: a count above INT_MAX is invalid whoever sends it.
        if self.unauthenticated && count > PREAUTH_MAX_ARGS as i64 && count <= i64::from(i32::MAX) {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        let count = usize::try_from(count)
            .ok()
            .filter(|&n| n <= self.limits.max_array_len && n <= i32::MAX as usize)
            .ok_or(ProtocolError::InvalidMultibulkLength)?;
        // Never reserve on a claim alone: an argument takes at least six
        // bytes (`$0\r\n\r\n`), so what is buffered bounds the capacity.
        let room = buf.len().saturating_sub(next) / 6;
        self.multibulk = Some(Multibulk {
            pos: next,
            remaining: count,
            bulk_len: None,
            args: ArgRanges::with_capacity(count.min(room)),
        });
        Ok(Step::Started)
    }

    /// Reads arguments until the request is complete or the bytes run out.
    fn read_args(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        let Self {
            limits,
            line_scan,
            multibulk,
            unauthenticated,
        } = self;
        let Some(mb) = multibulk.as_mut() else {
            return Ok(Step::Incomplete);
        };
        while mb.remaining > 0 {
            let len = match mb.bulk_len {
                Some(len) => len,
                None => match read_bulk_header(buf, mb.pos, line_scan, limits, *unauthenticated)? {
                    Some((len, data)) => {
                        mb.pos = data;
                        mb.bulk_len = Some(len);
                        len
                    }
                    None => break,
                },
            };
            let end = mb.pos + len;
            if !crlf_at(buf, end).map_err(|()| ProtocolError::ExpectedCrlf)? {
                break;
            }
            mb.args.push(ArgRange::new(mb.pos, end));
            mb.pos = end + 2;
            mb.bulk_len = None;
            mb.remaining -= 1;
        }
        if mb.remaining > 0 {
            return Ok(Step::Incomplete);
        }
        let Some(mb) = multibulk.take() else {
            return Ok(Step::Incomplete);
        };
        // The frame shares the buffer: once every frame split off it is
        // dropped, the buffer's owner can take its room back (see
        // `BytesMut::try_reclaim`) instead of allocating another.
        let frame = buf.split_to(mb.pos).freeze();
        Ok(Step::Request(Request::new(frame, mb.args, false)))
    }
}

/// The common case in one pass: a whole multibulk request of at most
/// [`INLINE_ARGS`] arguments at the front of `buf`, with short headers and
/// no limit near. Nothing is kept between calls, nothing is moved through
/// the general path's steps.
///
/// `None` for anything else (incomplete, more arguments, a header of ten
/// digits or more, any byte out of place, a limit reached) and `buf` is
/// untouched: the general path then reads the same bytes from the start and
/// gives its verdict, so the two cannot disagree on an input.
fn parse_whole(buf: &mut BytesMut, limits: &Limits, unauthenticated: bool) -> Option<Request> {
    let bytes: &[u8] = buf;
    let (count, mut pos) = short_header(bytes, 0, b'*', limits)?;
    if count == 0 || count > INLINE_ARGS || count > limits.max_array_len {
        return None;
    }
    const _: () = assert!(INLINE_ARGS <= PREAUTH_MAX_ARGS);
    // Counts this path takes are within the pre-AUTH limit; lengths are not.
    let max_bulk_len = match unauthenticated {
        true => limits.max_bulk_len.min(PREAUTH_MAX_BULK_LEN),
        false => limits.max_bulk_len,
    };
    let mut ranges = [ArgRange::default(); INLINE_ARGS];
    for range in ranges.iter_mut().take(count) {
        let (len, data) = short_header(bytes, pos, b'$', limits)?;
        let end = data + len;
        if len > max_bulk_len || bytes.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        *range = ArgRange::new(data, end);
        pos = end + 2;
    }
    if pos > u32::MAX as usize {
        return None;
    }
    let frame = buf.split_to(pos).freeze();
    Some(Request::new(frame, ArgRanges::inline(count, ranges), false))
}

/// A complete `*N` or `$N` header (`kind`) at `at` with one to nine digits
/// and no leading zero: the number and the offset after its LF.
fn short_header(buf: &[u8], at: usize, kind: u8, limits: &Limits) -> Option<(usize, usize)> {
    let (&first, line) = buf.get(at..)?.split_first()?;
    let (n, taken) = short_len(line).filter(|_| first == kind)?;
    // The general reader's limit on a header line, type byte included.
    (taken - 1 <= limits.max_inline_len).then_some((n, at + 1 + taken))
}

/// Reads the `$N` line at `pos`; returns the length and where the data
/// starts.
fn read_bulk_header(
    buf: &[u8],
    pos: usize,
    line_scan: &mut usize,
    limits: &Limits,
    unauthenticated: bool,
) -> Result<Option<(usize, usize)>, ProtocolError> {
    match buf.get(pos) {
        None => return Ok(None),
        Some(b'$') => {}
        // Redis waits for the whole line before saying this; the first
        // byte already decides it.
        Some(&other) => return Err(ProtocolError::ExpectedDollar(other)),
    }
    let Some((digits, data)) = read_line(buf, pos, Header::Bulk, line_scan, limits)? else {
        return Ok(None);
    };
    let len = parse_len(digits)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= limits.max_bulk_len)
        .ok_or(ProtocolError::InvalidBulkLength)?;
    if unauthenticated && len > PREAUTH_MAX_BULK_LEN {
        return Err(ProtocolError::UnauthenticatedBulkLength);
    }
    // Argument offsets are u32; refuse now rather than after buffering.
    if data.saturating_add(len).saturating_add(2) > u32::MAX as usize {
        return Err(ProtocolError::TooBigRequest);
    }
    Ok(Some((len, data)))
}

/// Finds the CRLF ending the header line that starts at `start` (with its
/// `*`/`$`), resuming the search at `line_scan`. Returns the bytes between
/// the type byte and the CR, and the offset after the LF.
fn read_line<'b>(
    buf: &'b [u8],
    start: usize,
    header: Header,
    line_scan: &mut usize,
    limits: &Limits,
) -> Result<Option<(&'b [u8], usize)>, ProtocolError> {
    let too_big = match header {
        Header::Count => ProtocolError::TooBigMbulkCountString,
        Header::Bulk => ProtocolError::TooBigBulkCountString,
    };
    let from = (*line_scan).max(start + 1).min(buf.len());
    let Some(cr) = buf.get(from..).and_then(find_cr) else {
        *line_scan = buf.len();
        if buf.len().saturating_sub(start) > limits.max_inline_len {
            return Err(too_big);
        }
        return Ok(None);
    };
    let cr = from + cr;
    if cr - start > limits.max_inline_len {
        // What Redis says when the CR comes in a later read; said here
        // too so that the verdict does not depend on read sizes.
        return Err(too_big);
    }
    match buf.get(cr + 1) {
        None => {
            *line_scan = cr;
            Ok(None)
        }
        Some(b'\n') => {
            *line_scan = 0;
            let digits = buf.get(start + 1..cr).unwrap_or(&[]);
            Ok(Some((digits, cr + 2)))
        }
        // Redis skips the byte after the CR unseen; a frame that is
        // forwarded verbatim must be well-formed, so refuse it.
        Some(_) => Err(match header {
            Header::Count => ProtocolError::InvalidMultibulkLength,
            Header::Bulk => ProtocolError::InvalidBulkLength,
        }),
    }
}

impl Default for RequestParser {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

#[cfg(test)]
#[path = "parser_tests.rs"]
mod tests;
