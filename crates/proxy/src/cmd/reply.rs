//! Building the replies orthrus makes itself, and reading the parts of
//! nodes' replies that merges need (integers, array elements), on the
//! borrowed bytes.

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Protocol, encode};

pub fn simple(s: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(s.len() + 3);
    encode::simple(&mut out, s.as_bytes());
    out.freeze()
}

pub fn bulk(b: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(b.len() + 16);
    encode::bulk(&mut out, b);
    out.freeze()
}

pub fn integer(n: i64) -> Bytes {
    let mut out = BytesMut::with_capacity(24);
    encode::integer(&mut out, n);
    out.freeze()
}

pub fn null(proto: Protocol) -> Bytes {
    let mut out = BytesMut::with_capacity(5);
    encode::null(&mut out, proto);
    out.freeze()
}

/// Text replies (INFO, CLIENT INFO) are verbatim strings in RESP3.
pub fn verbatim(text: &str, proto: Protocol) -> Bytes {
    let mut out = BytesMut::with_capacity(text.len() + 24);
    encode::verbatim(&mut out, "txt", text.as_bytes(), proto);
    out.freeze()
}

/// `:n\r\n` as a number.
pub fn parse_integer(frame: &[u8]) -> Option<i64> {
    let body = frame.strip_prefix(b":")?.strip_suffix(b"\r\n")?;
    std::str::from_utf8(body).ok()?.parse().ok()
}

/// The element frames of an array (or set) reply, as zero-copy slices.
pub fn array_elements(frame: &Bytes) -> Option<Vec<Bytes>> {
    let (count, ranges) = array_element_ranges(frame)?;
    let out: Vec<Bytes> = ranges.map(|(start, end)| frame.slice(start..end)).collect();
    (out.len() == count).then_some(out)
}

/// How many elements an array (or set) reply says it has, and where each
/// element frame lies in it, `start..end`, in order, as far as they are
/// complete (fewer than said: a damaged reply); `None` for another reply.
/// Nothing is copied.
pub fn array_element_ranges(
    frame: &[u8],
) -> Option<(usize, impl Iterator<Item = (usize, usize)> + '_)> {
    if !matches!(frame.first(), Some(b'*' | b'~')) {
        return None;
    }
    let line_end = memchr_crlf(frame)?;
    let count: usize = std::str::from_utf8(frame.get(1..line_end)?)
        .ok()?
        .parse()
        .ok()?;
    let limits = orthrus_resp::Limits::for_replies();
    let mut at = line_end.checked_add(2)?;
    let mut left = count;
    let ranges = std::iter::from_fn(move || {
        left = left.checked_sub(1)?;
        let len = orthrus_resp::scan_reply(frame.get(at..)?, &limits).ok()??;
        let start = at;
        at = at.checked_add(len)?;
        Some((start, at))
    });
    Some((count, ranges))
}

/// Where the first line ends.
fn memchr_crlf(frame: &[u8]) -> Option<usize> {
    frame.windows(2).position(|w| w == b"\r\n")
}
