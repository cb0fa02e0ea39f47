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
    orthrus_resp::integer_reply(frame)
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
    let (count, mut at) = orthrus_resp::array_header(frame)?;
    let limits = orthrus_resp::Limits::for_replies();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_as_redis_writes_them() {
        assert_eq!(parse_integer(b":5\r\n"), Some(5));
        assert_eq!(parse_integer(b":-3\r\n"), Some(-3));
        assert_eq!(parse_integer(b":0\r\n"), Some(0));
        for bad in [
            &b":\r\n"[..],
            b":5",
            b":5x\r\n",
            b"+5\r\n",
            b":99999999999999999999\r\n",
        ] {
            assert_eq!(parse_integer(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn array_elements_are_found_in_place() {
        let frame = b"*3\r\n$1\r\na\r\n$-1\r\n:7\r\n";
        let (count, ranges) = array_element_ranges(frame).unwrap();
        assert_eq!(count, 3);
        assert_eq!(ranges.collect::<Vec<_>>(), [(4, 11), (11, 16), (16, 20)]);
        // A damaged array gives the elements that are whole.
        let (count, ranges) = array_element_ranges(b"*2\r\n$1\r\na\r\n$3\r\nb").unwrap();
        assert_eq!((count, ranges.count()), (2, 1));
        for other in [&b"*-1\r\n"[..], b"*2\r", b"*x\r\n", b":1\r\n", b"*"] {
            assert!(array_element_ranges(other).is_none(), "{other:?}");
        }
    }
}
