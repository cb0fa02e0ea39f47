//! Finding where a protocol line ends.

use memchr::{memchr, memchr2};

/// Bytes looked at one by one before handing over to `memchr`: nearly every
/// line (`$3`, `*2`, `:1000`, `+OK`) ends within this many, where the SIMD
/// search's setup costs more than it saves.
const SHORT_LINE: usize = 32;

/// Offset of the first CR in `hay`.
pub(crate) fn find_cr(hay: &[u8]) -> Option<usize> {
    let (head, tail) = hay.split_at(hay.len().min(SHORT_LINE));
    match head.iter().position(|&b| b == b'\r') {
        Some(i) => Some(i),
        None => memchr(b'\r', tail).map(|i| i + SHORT_LINE),
    }
}

/// Offset of the first CR or LF in `hay`.
pub(crate) fn find_cr_or_lf(hay: &[u8]) -> Option<usize> {
    let (head, tail) = hay.split_at(hay.len().min(SHORT_LINE));
    match head.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(i) => Some(i),
        None => memchr2(b'\r', b'\n', tail).map(|i| i + SHORT_LINE),
    }
}

/// Whether `buf` has CRLF at `at`: `Ok(false)` while it is not all there,
/// `Err(())` as soon as a byte is wrong, so that a bad frame is refused at
/// once rather than after more bytes arrive.
pub(crate) fn crlf_at(buf: &[u8], at: usize) -> Result<bool, ()> {
    match (buf.get(at), buf.get(at.saturating_add(1))) {
        (Some(b'\r'), Some(b'\n')) => Ok(true),
        (Some(b'\r'), None) | (None, _) => Ok(false),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_line_ends_near_and_far() {
        for at in [0, 1, 31, 32, 33, 100] {
            let mut hay = vec![b'x'; 120];
            hay[at] = b'\r';
            assert_eq!(find_cr(&hay), Some(at));
            assert_eq!(find_cr_or_lf(&hay), Some(at));
            hay[at] = b'\n';
            assert_eq!(find_cr(&hay), None);
            assert_eq!(find_cr_or_lf(&hay), Some(at));
        }
        assert_eq!(find_cr(b""), None);
        assert_eq!(find_cr_or_lf(b"abc"), None);
    }

    #[test]
    fn crlf_at_decides_early() {
        assert_eq!(crlf_at(b"ab\r\n", 2), Ok(true));
        assert_eq!(crlf_at(b"ab\r", 2), Ok(false));
        assert_eq!(crlf_at(b"ab", 2), Ok(false));
        assert_eq!(crlf_at(b"abX", 2), Err(()));
        assert_eq!(crlf_at(b"ab\rX", 2), Err(()));
    }
}
