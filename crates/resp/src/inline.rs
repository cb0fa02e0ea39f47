//! Inline requests: a line of space-separated words, as typed into telnet.
//!
//! The line is split exactly like Redis's `sdssplitargs`: blanks separate
//! words; `"..."` takes `\n \r \t \b \a \\ \"` and `\xHH` escapes (any
//! other escaped byte stands for itself); `'...'` takes only `\'`; a quote
//! may start in the middle of a word (`a"b c"` is `ab c`); a closing quote
//! must be followed by a blank or the end of the line. One difference: a
//! NUL byte is an ordinary byte here, while Redis's C string handling stops
//! at it (and then waits for a newline it never sees).

use crate::ProtocolError;
use crate::request::{ArgRange, ArgRanges, Request, write_header};
use bytes::{BufMut, BytesMut};

/// The words of an inline line, decoded into one buffer.
pub(crate) struct InlineArgs {
    data: Vec<u8>,
    ends: Vec<usize>,
}

/// Splits one inline line (without its line end) into words.
pub(crate) fn split_args(line: &[u8]) -> Result<InlineArgs, ProtocolError> {
    let mut args = InlineArgs {
        data: Vec::with_capacity(line.len()),
        ends: Vec::new(),
    };
    let mut rest = line;
    loop {
        rest = skip_blanks(rest);
        if rest.is_empty() {
            return Ok(args);
        }
        rest = read_word(rest, &mut args.data)?;
        args.ends.push(args.data.len());
    }
}

/// C's `isspace`: what `sdssplitargs` skips between words and requires
/// after a closing quote.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn skip_blanks(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| is_space(b)).count();
    s.get(n..).unwrap_or(&[])
}

/// Reads one word from the start of `s` into `out`; returns what follows.
fn read_word<'a>(mut s: &'a [u8], out: &mut Vec<u8>) -> Result<&'a [u8], ProtocolError> {
    loop {
        match s {
            // An unquoted word ends at these four only (not at \v or \f).
            [] | [b' ' | b'\n' | b'\r' | b'\t', ..] => return Ok(s),
            // The word ends with its closing quote.
            [b'"', rest @ ..] => return read_double_quoted(rest, out),
            [b'\'', rest @ ..] => return read_single_quoted(rest, out),
            [b, rest @ ..] => {
                out.push(*b);
                s = rest;
            }
        }
    }
}

/// After `"`: reads up to the closing quote, which must be followed by a
/// blank or the end, and returns what follows the quote.
fn read_double_quoted<'a>(mut s: &'a [u8], out: &mut Vec<u8>) -> Result<&'a [u8], ProtocolError> {
    loop {
        match s {
            [b'\\', b'x', h, l, rest @ ..] if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => {
                out.push(hex_value(*h) << 4 | hex_value(*l));
                s = rest;
            }
            [b'\\', c, rest @ ..] => {
                out.push(match c {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => *other,
                });
                s = rest;
            }
            [b'"', rest @ ..] => return closing_quote(rest),
            [] => return Err(ProtocolError::UnbalancedQuotes),
            [b, rest @ ..] => {
                out.push(*b);
                s = rest;
            }
        }
    }
}

/// After `'`: like [`read_double_quoted`] with `\'` as the only escape.
fn read_single_quoted<'a>(mut s: &'a [u8], out: &mut Vec<u8>) -> Result<&'a [u8], ProtocolError> {
    loop {
        match s {
            [b'\\', b'\'', rest @ ..] => {
                out.push(b'\'');
                s = rest;
            }
            [b'\'', rest @ ..] => return closing_quote(rest),
            [] => return Err(ProtocolError::UnbalancedQuotes),
            [b, rest @ ..] => {
                out.push(*b);
                s = rest;
            }
        }
    }
}

fn closing_quote(rest: &[u8]) -> Result<&[u8], ProtocolError> {
    match rest.first() {
        Some(&b) if !is_space(b) => Err(ProtocolError::UnbalancedQuotes),
        _ => Ok(rest),
    }
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

// === impl InlineArgs ===

impl InlineArgs {
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| self.data.get(start..end).unwrap_or(&[]))
    }

    /// Encodes the words as the multibulk frame the proxy will forward.
    pub(crate) fn into_request(self) -> Request {
        let n = self.ends.len();
        // Headers are at most 1 + 20 digits + CRLF each.
        let mut frame = BytesMut::with_capacity(self.data.len() + (n + 1) * 25);
        let mut ranges = ArgRanges::with_capacity(n);
        write_header(&mut frame, b'*', n);
        for word in self.iter() {
            write_header(&mut frame, b'$', word.len());
            let start = frame.len();
            frame.put_slice(word);
            ranges.push(ArgRange::new(start, frame.len()));
            frame.put_slice(b"\r\n");
        }
        Request::new(frame.freeze(), ranges, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        split_args(line).map(|a| a.iter().map(<[u8]>::to_vec).collect())
    }

    fn words(ws: &[&[u8]]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        Ok(ws.iter().map(|w| w.to_vec()).collect())
    }

    #[test]
    fn splits_on_blanks() {
        assert_eq!(split(b"SET a b"), words(&[b"SET", b"a", b"b"]));
        assert_eq!(split(b"  GET\t\tkey  "), words(&[b"GET", b"key"]));
        assert_eq!(split(b""), words(&[]));
        assert_eq!(split(b" \t\x0b\x0c "), words(&[]));
        // \v and \f are skipped between words but do not end one.
        assert_eq!(split(b"a\x0bb"), words(&[b"a\x0bb"]));
        assert_eq!(split(b"a\rb"), words(&[b"a", b"b"]));
    }

    #[test]
    fn double_quotes_take_escapes() {
        assert_eq!(
            split(br#"SET "a b" "\n\r\t\b\a\\\"\x41\x7a\q""#),
            words(&[b"SET", b"a b", b"\n\r\t\x08\x07\\\"Az\x71"])
        );
        assert_eq!(split(br#""""#), words(&[b""]));
        // \x without two hex digits is an escaped 'x'.
        assert_eq!(split(br#""\x4g""#), words(&[b"x4g"]));
        assert_eq!(split(br#""\xFF""#), words(&[b"\xff"]));
    }

    #[test]
    fn single_quotes_take_only_escaped_quote() {
        assert_eq!(split(br"'a\'b' '\n'"), words(&[b"a'b", br"\n"]));
        assert_eq!(split(b"''"), words(&[b""]));
    }

    #[test]
    fn quote_inside_a_word_opens_a_quoted_part() {
        assert_eq!(split(br#"a"b c" d"#), words(&[b"ab c", b"d"]));
        assert_eq!(split(b"a'b c'"), words(&[b"ab c"]));
    }

    #[test]
    fn unbalanced_quotes() {
        for line in [
            &br#""abc"#[..],
            br#""abc"def"#,
            b"'abc",
            b"'abc'def",
            br#""abc\"#,
            br#"x "a\""#,
        ] {
            assert_eq!(
                split(line),
                Err(ProtocolError::UnbalancedQuotes),
                "{}",
                line.escape_ascii()
            );
        }
        // A closing quote followed by \v is fine: it is a C isspace.
        assert_eq!(split(b"\"a\"\x0bb"), words(&[b"a", b"b"]));
    }

    #[test]
    fn into_request_reencodes() {
        let r = split_args(br#"SET "a b" c"#).map(InlineArgs::into_request);
        let r = r.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            &r.frame()[..],
            b"*3\r\n$3\r\nSET\r\n$3\r\na b\r\n$1\r\nc\r\n"
        );
        assert!(r.is_inline());
        assert_eq!(r.arg(1), Some(&b"a b"[..]));
    }
}
