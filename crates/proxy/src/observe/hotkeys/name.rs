//! The name a HOTKEYS session keeps for a key: the key itself up to
//! [`KEPT_BYTES`], else its first [`KEPT_BYTES`] bytes and a marker,
//! `...(N bytes #H)`, with the key's whole length and the 16 hex digits of
//! the hash the summaries already take of the whole key, so that two long
//! keys that share their first bytes stay two entries, in the summaries
//! and in the reply. A session's memory is then bounded by its COUNT,
//! whatever the keys weigh.

use std::io::Write as _;

/// Bytes of a key kept as they are.
pub const KEPT_BYTES: usize = 256;

/// Room for the kept bytes and the longest marker
/// (`...(18446744073709551615 bytes #0123456789abcdef)`).
const NAME_ROOM: usize = KEPT_BYTES + 64;

/// A long key's shown name, built on the stack.
pub(super) struct Shortened {
    buf: [u8; NAME_ROOM],
    len: usize,
}

impl Shortened {
    /// The name of `key` (longer than [`KEPT_BYTES`]), whose hash of the
    /// whole is `hash`.
    pub(super) fn new(key: &[u8], hash: u64) -> Shortened {
        let mut buf = [0u8; NAME_ROOM];
        let kept = key.get(..KEPT_BYTES).unwrap_or(key);
        let mut rest: &mut [u8] = &mut buf;
        // The room fits the longest marker: neither write can fail.
        let _ = rest.write_all(kept);
        let _ = write!(rest, "...({} bytes #{hash:016x})", key.len());
        let len = NAME_ROOM.saturating_sub(rest.len());
        Shortened { buf, len }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_key_keeps_its_first_bytes_its_length_and_its_hash() {
        let mut key = vec![b'k'; 1 << 20];
        let name = Shortened::new(&key, 0xab);
        let shown = std::str::from_utf8(name.as_bytes()).unwrap();
        assert_eq!(
            shown.strip_prefix(&"k".repeat(KEPT_BYTES)),
            Some("...(1048576 bytes #00000000000000ab)")
        );
        key.truncate(KEPT_BYTES + 1);
        let longest = Shortened::new(&key, u64::MAX);
        assert!(
            longest
                .as_bytes()
                .ends_with(b"...(257 bytes #ffffffffffffffff)")
        );
    }
}
