//! Reads one reply element: a scalar whole, or an aggregate's header.
//!
//! Both the frame scanner and the [`Value`](crate::Value) builder go through
//! [`read_token`], so they cannot disagree about what is well-formed.

use std::ops::Range;

use crate::line::{crlf_at, find_cr_or_lf};
use crate::number::{parse_double, parse_i64, parse_len, short_len};
use crate::{Limits, ProtocolError};

/// Longest line a number, length, double, null or boolean may take before
/// its CR (the longest valid one, `:-9223372036854775808`, takes 21).
/// Waiting for more than this cannot end well, so it is refused at once.
const MAX_NUMBER_LINE: usize = 64;

/// One reply element; ranges are offsets into the scanned buffer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Token {
    /// `+...`
    Simple(Range<usize>),
    /// `-...`
    Error(Range<usize>),
    /// `!len` blob error.
    BlobError(Range<usize>),
    /// `:n`
    Integer(i64),
    /// `$len`
    Bulk(Range<usize>),
    /// `=len` with `fmt:` stripped from the text.
    Verbatim { format: [u8; 3], text: Range<usize> },
    /// `(digits`
    BigNumber(Range<usize>),
    /// `,f`
    Double(f64),
    /// `#t` / `#f`
    Boolean(bool),
    /// `_` or `$-1`
    Null,
    /// `*-1`
    NullArray,
    /// The header of an aggregate: `len` is what the wire says (pairs, for
    /// maps and attributes).
    Aggregate { kind: Aggregate, len: usize },
}

/// The aggregate types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aggregate {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

/// Where a read stands: the offset of the next element, and how far the
/// line it starts with was already searched for its CR.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cursor {
    pub(crate) pos: usize,
    pub(crate) line_scan: usize,
}

/// What kind of line a type byte introduces, for the early refusal of
/// over-long lines.
#[derive(Clone, Copy)]
enum LineKind {
    Number,
    Text,
}

impl Aggregate {
    /// How many elements follow a header of `len`.
    pub(crate) fn elements(self, len: usize) -> Option<usize> {
        match self {
            Self::Map | Self::Attribute => len.checked_mul(2),
            Self::Array | Self::Set | Self::Push => Some(len),
        }
    }
}

/// Reads the element at `cur.pos`. On success returns the token and moves
/// `cur.pos` past it; `Ok(None)` means more bytes are needed (`cur.pos`
/// stays, `cur.line_scan` remembers the search).
pub(crate) fn read_token(
    buf: &[u8],
    cur: &mut Cursor,
    limits: &Limits,
) -> Result<Option<Token>, ProtocolError> {
    let pos = cur.pos;
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let line_kind = match kind {
        b'+' | b'-' | b'(' => LineKind::Text,
        b':' | b',' | b'_' | b'#' | b'$' | b'!' | b'=' | b'*' | b'%' | b'~' | b'>' | b'|' => {
            LineKind::Number
        }
        // Stream chunks and stream ends only ever follow `$?`/`*?`.
        b';' | b'.' => return Err(ProtocolError::StreamedReply),
        other => return Err(ProtocolError::InvalidReplyType(other)),
    };
    let Some((line, next)) = read_line(buf, cur, line_kind, limits)? else {
        return Ok(None);
    };
    let token = match kind {
        b'+' => Token::Simple(line),
        b'-' => Token::Error(line),
        // Not checked for digits: Redis sends a Lua script's `big_number`
        // as it is (`(123  123` from '123\r\n123'), and the framing is
        // all a node's reply is trusted for.
        b'(' => Token::BigNumber(line),
        _ => {
            let text = buf.get(line).unwrap_or(&[]);
            match number_token(kind, text, limits)? {
                Header::Done(token) => token,
                Header::Blob(len) => return read_blob(buf, cur, kind, next, len),
            }
        }
    };
    cur.pos = next;
    Ok(Some(token))
}

/// Length of a whole flat reply at the start of `buf`, found in one pass
/// with no token built: a simple string, an error, an integer, a bulk
/// string of a length under a billion, a null bulk, or an array of those
/// (`*N` with N under a billion): what nearly every command answers.
///
/// `None` for anything else, incomplete or malformed replies included; the
/// general reader then judges the same bytes from the start, so the two
/// cannot disagree.
pub(crate) fn flat_reply_len(buf: &[u8], limits: &Limits) -> Option<usize> {
    let Some(rest) = buf.strip_prefix(b"*") else {
        return flat_scalar_len(buf, limits);
    };
    let (count, taken) = short_len(rest)
        .filter(|&(count, _)| count <= limits.max_array_len && limits.max_depth > 0)?;
    let mut at = 1 + taken;
    for _ in 0..count {
        at += flat_scalar_len(buf.get(at..)?, limits)?;
    }
    Some(at)
}

/// [`flat_reply_len`] of one element that is not an aggregate.
fn flat_scalar_len(buf: &[u8], limits: &Limits) -> Option<usize> {
    let (&kind, rest) = buf.split_first()?;
    let line = || {
        let cr = find_cr_or_lf(rest)?;
        (rest.get(cr..cr + 2)? == b"\r\n").then_some(cr)
    };
    match kind {
        b'+' | b'-' => line()
            .filter(|&cr| cr <= limits.max_bulk_len)
            .map(|cr| cr + 3),
        b':' => line()
            .filter(|&cr| cr <= MAX_NUMBER_LINE && rest.get(..cr).and_then(parse_i64).is_some())
            .map(|cr| cr + 3),
        b'$' if rest.starts_with(b"-1\r\n") => Some(5),
        b'$' => {
            let (len, taken) = short_len(rest).filter(|&(len, _)| len <= limits.max_bulk_len)?;
            let end = 1 + taken + len;
            (buf.get(end..end + 2)? == b"\r\n").then_some(end + 2)
        }
        _ => None,
    }
}

/// A number-line element: complete, or a blob whose body is still to read.
enum Header {
    Done(Token),
    Blob(usize),
}

fn number_token(kind: u8, text: &[u8], limits: &Limits) -> Result<Header, ProtocolError> {
    let aggregate = match kind {
        b':' => {
            let n = parse_i64(text).ok_or(ProtocolError::InvalidReply)?;
            return Ok(Header::Done(Token::Integer(n)));
        }
        b',' => {
            let f = parse_double(text).ok_or(ProtocolError::InvalidReply)?;
            return Ok(Header::Done(Token::Double(f)));
        }
        b'_' if text.is_empty() => return Ok(Header::Done(Token::Null)),
        b'#' => {
            return match text {
                b"t" => Ok(Header::Done(Token::Boolean(true))),
                b"f" => Ok(Header::Done(Token::Boolean(false))),
                _ => Err(ProtocolError::InvalidReply),
            };
        }
        b'$' | b'!' | b'=' => {
            if kind == b'$' && text == b"-1" {
                return Ok(Header::Done(Token::Null));
            }
            let len = read_length(text)?;
            if len > limits.max_bulk_len {
                return Err(ProtocolError::InvalidBulkLength);
            }
            return Ok(Header::Blob(len));
        }
        b'*' => Aggregate::Array,
        b'%' => Aggregate::Map,
        b'~' => Aggregate::Set,
        b'>' => Aggregate::Push,
        b'|' => Aggregate::Attribute,
        _ => return Err(ProtocolError::InvalidReply),
    };
    if kind == b'*' && text == b"-1" {
        return Ok(Header::Done(Token::NullArray));
    }
    let len = read_length(text)?;
    if len > limits.max_array_len {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    Ok(Header::Done(Token::Aggregate {
        kind: aggregate,
        len,
    }))
}

fn read_length(text: &[u8]) -> Result<usize, ProtocolError> {
    if text == b"?" {
        return Err(ProtocolError::StreamedReply);
    }
    parse_len(text)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(ProtocolError::InvalidReply)
}

/// Reads the body of a `$`, `!` or `=` element of `len` bytes at `start`.
fn read_blob(
    buf: &[u8],
    cur: &mut Cursor,
    kind: u8,
    start: usize,
    len: usize,
) -> Result<Option<Token>, ProtocolError> {
    let end = start.checked_add(len).ok_or(ProtocolError::InvalidReply)?;
    let Some(body) = buf.get(start..end) else {
        return Ok(None);
    };
    if !crlf_at(buf, end).map_err(|()| ProtocolError::InvalidReply)? {
        return Ok(None);
    }
    let after = end.saturating_add(2);
    let token = match kind {
        b'$' => Token::Bulk(start..end),
        b'!' => Token::BlobError(start..end),
        _ => match body {
            [a, b, c, b':', ..] => Token::Verbatim {
                format: [*a, *b, *c],
                text: start + 4..end,
            },
            _ => return Err(ProtocolError::InvalidReply),
        },
    };
    cur.pos = after;
    Ok(Some(token))
}

/// Finds the CRLF ending the line at `cur.pos`. Returns the range between
/// the type byte and the CR, and the offset after the LF. A CR or LF inside
/// the line is malformed.
fn read_line(
    buf: &[u8],
    cur: &mut Cursor,
    kind: LineKind,
    limits: &Limits,
) -> Result<Option<(Range<usize>, usize)>, ProtocolError> {
    let start = cur.pos + 1;
    let from = cur.line_scan.max(start).min(buf.len());
    let max = match kind {
        LineKind::Number => MAX_NUMBER_LINE,
        LineKind::Text => limits.max_bulk_len,
    };
    let Some(found) = buf.get(from..).and_then(find_cr_or_lf) else {
        cur.line_scan = buf.len();
        return if buf.len().saturating_sub(start) > max {
            Err(ProtocolError::InvalidReply)
        } else {
            Ok(None)
        };
    };
    let cr = from + found;
    // Checked on complete lines too, so the verdict is the same wherever
    // the input was cut.
    if cr - start > max {
        return Err(ProtocolError::InvalidReply);
    }
    match (buf.get(cr), buf.get(cr + 1)) {
        (Some(b'\r'), Some(b'\n')) => {
            cur.line_scan = 0;
            Ok(Some((start..cr, cr + 2)))
        }
        (Some(b'\r'), None) => {
            cur.line_scan = cr;
            Ok(None)
        }
        _ => Err(ProtocolError::InvalidReply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(buf: &[u8]) -> Result<Option<(Token, usize)>, ProtocolError> {
        let mut cur = Cursor::default();
        Ok(read_token(buf, &mut cur, &Limits::default())?.map(|t| (t, cur.pos)))
    }

    #[test]
    fn scalars() {
        assert_eq!(read(b"+OK\r\n"), Ok(Some((Token::Simple(1..3), 5))));
        assert_eq!(read(b"-ERR x\r\n"), Ok(Some((Token::Error(1..6), 8))));
        assert_eq!(read(b":-12\r\n"), Ok(Some((Token::Integer(-12), 6))));
        assert_eq!(read(b"$3\r\nabc\r\n"), Ok(Some((Token::Bulk(4..7), 9))));
        assert_eq!(read(b"$0\r\n\r\n"), Ok(Some((Token::Bulk(4..4), 6))));
        assert_eq!(read(b"$-1\r\n"), Ok(Some((Token::Null, 5))));
        assert_eq!(read(b"*-1\r\n"), Ok(Some((Token::NullArray, 5))));
        assert_eq!(read(b"_\r\n"), Ok(Some((Token::Null, 3))));
        assert_eq!(read(b"#t\r\n"), Ok(Some((Token::Boolean(true), 4))));
        assert_eq!(read(b"#f\r\n"), Ok(Some((Token::Boolean(false), 4))));
        assert_eq!(read(b",1.5\r\n"), Ok(Some((Token::Double(1.5), 6))));
        assert_eq!(read(b"(-123\r\n"), Ok(Some((Token::BigNumber(1..5), 7))));
        // What a Lua script's big_number '123\r\n123' comes back as.
        assert_eq!(
            read(b"(123  123\r\n"),
            Ok(Some((Token::BigNumber(1..9), 11)))
        );
        assert_eq!(read(b"!2\r\nno\r\n"), Ok(Some((Token::BlobError(4..6), 8))));
        assert_eq!(
            read(b"=6\r\ntxt:hi\r\n"),
            Ok(Some((
                Token::Verbatim {
                    format: *b"txt",
                    text: 8..10
                },
                12
            )))
        );
    }

    #[test]
    fn aggregate_headers() {
        for (frame, kind) in [
            (&b"*2\r\n"[..], Aggregate::Array),
            (b"%2\r\n", Aggregate::Map),
            (b"~2\r\n", Aggregate::Set),
            (b">2\r\n", Aggregate::Push),
            (b"|2\r\n", Aggregate::Attribute),
        ] {
            assert_eq!(
                read(frame),
                Ok(Some((Token::Aggregate { kind, len: 2 }, 4)))
            );
        }
        assert_eq!(Aggregate::Map.elements(3), Some(6));
        assert_eq!(Aggregate::Set.elements(3), Some(3));
        assert_eq!(Aggregate::Attribute.elements(usize::MAX), None);
    }

    #[test]
    fn malformed() {
        use ProtocolError::*;
        for (frame, err) in [
            (&b"?\r\n"[..], InvalidReplyType(b'?')),
            (b"+a\nb\r\n", InvalidReply),
            (b"+a\rb\r\n", InvalidReply),
            (b":1.5\r\n", InvalidReply),
            (b":\r\n", InvalidReply),
            (b"$-2\r\n", InvalidReply),
            (b"!-1\r\n", InvalidReply),
            (b"*-2\r\n", InvalidReply),
            (b"%-1\r\n", InvalidReply),
            (b"$3\r\nabcd\r\n", InvalidReply),
            (b"=3\r\nabc\r\n", InvalidReply),
            (b"=4\r\nabcd\r\n", InvalidReply),
            (b"_x\r\n", InvalidReply),
            (b"#x\r\n", InvalidReply),
            (b",abc\r\n", InvalidReply),
            (b"$?\r\n", StreamedReply),
            (b"*?\r\n", StreamedReply),
            (b";4\r\n", StreamedReply),
            (b".\r\n", StreamedReply),
            (b"$1000000000000\r\n", InvalidBulkLength),
            (b"*1000000000000\r\n", InvalidMultibulkLength),
            (b"%99999999999\r\n", InvalidMultibulkLength),
        ] {
            assert_eq!(read(frame), Err(err), "{}", frame.escape_ascii());
        }
    }

    #[test]
    fn long_number_line_is_refused_before_its_end() {
        let mut line = b":".to_vec();
        line.extend(std::iter::repeat_n(b'1', MAX_NUMBER_LINE));
        assert_eq!(read(&line), Ok(None));
        line.push(b'1');
        assert_eq!(read(&line), Err(ProtocolError::InvalidReply));
    }

    #[test]
    fn incomplete() {
        for frame in [
            &b""[..],
            b"+",
            b"+OK",
            b"+OK\r",
            b"$3\r\nab",
            b"$3\r\nabc",
            b"$3\r\nabc\r",
            b"=6\r\ntxt",
        ] {
            assert_eq!(read(frame), Ok(None), "{}", frame.escape_ascii());
        }
    }
}
