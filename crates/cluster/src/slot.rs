//! Hash slots: the 16384 buckets a Redis Cluster divides its keys into.

use std::fmt;

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// `SLOT_COUNT` is a power of two, so reducing a CRC to a slot is a mask.
const SLOT_MASK: u16 = SLOT_COUNT - 1;

/// CRC16/XMODEM, the cluster's key hash, with sixteen lookup tables (16
/// bytes a step, 8 KiB of tables): the sum runs on every keyed request.
const XMODEM: crc::Crc<u16, crc::Table<16>> =
    crc::Crc::<u16, crc::Table<16>>::new(&crc::CRC_16_XMODEM);

/// One hash slot, always `< SLOT_COUNT`: the range is checked once, here, so
/// that every table indexed by a `Slot` can rely on it.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Ord, PartialOrd, Debug)]
pub struct Slot(u16);

/// The slot number was not below [`SLOT_COUNT`].
#[derive(thiserror::Error, Copy, Clone, Eq, PartialEq, Debug)]
#[error("slot {0} is out of range (a cluster has {SLOT_COUNT} slots)")]
pub struct SlotOutOfRange(pub u16);

// === impl Slot ===

impl Slot {
    /// The slot that owns `key`: CRC16/XMODEM of its hash tag (or of the
    /// whole key when it has none), modulo 16384.
    #[inline]
    pub fn for_key(key: &[u8]) -> Slot {
        Slot(XMODEM.checksum(hash_tag(key)) & SLOT_MASK)
    }

    /// `None` if `n >= SLOT_COUNT`.
    #[inline]
    pub const fn new(n: u16) -> Option<Slot> {
        if n < SLOT_COUNT { Some(Slot(n)) } else { None }
    }

    /// The slot number, `0..16384`.
    #[inline]
    pub const fn get(self) -> u16 {
        self.0
    }

    /// The slot number as an index into a per-slot table.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Every slot, in order.
    pub fn all() -> impl DoubleEndedIterator<Item = Slot> + ExactSizeIterator {
        (0..SLOT_COUNT).map(Slot)
    }
}

impl TryFrom<u16> for Slot {
    type Error = SlotOutOfRange;

    fn try_from(n: u16) -> Result<Slot, SlotOutOfRange> {
        Slot::new(n).ok_or(SlotOutOfRange(n))
    }
}

impl From<Slot> for u16 {
    fn from(slot: Slot) -> u16 {
        slot.0
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The part of `key` that is hashed, as the cluster specification defines
/// it: if the key has a `{`, and a `}` somewhere after that first `{`, and at
/// least one byte between the two, only those bytes are hashed; otherwise the
/// whole key is.
///
/// So `{user}.a` hashes `user`, `foo{}{bar}` hashes the whole key (the first
/// tag is empty), `foo{{bar}}` hashes `{bar`, and `foo{bar}{zap}` hashes `bar`.
#[inline]
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = find(b'{', key) else {
        return key;
    };
    let Some(after) = key.get(open + 1..) else {
        return key;
    };
    match find(b'}', after) {
        Some(len) if len > 0 => after.get(..len).unwrap_or(key),
        _ => key,
    }
}

/// Keys up to this long are searched eight bytes at a time in a
/// register; longer ones with `memchr`, whose vector set-up costs more
/// than a short key's whole search.
const SHORT_KEY: usize = 64;

/// The first position of `byte` in `hay`.
#[inline]
fn find(byte: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() > SHORT_KEY {
        return memchr::memchr(byte, hay);
    }
    let mut words = hay.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let word: [u8; 8] = word.try_into().unwrap_or_default();
        if let Some(i) = find_in_word(byte, u64::from_le_bytes(word)) {
            return Some(at + i);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == byte)
        .map(|i| at + i)
}

/// The first byte of `word` (little-endian order) equal to `byte`: the
/// bytes equal to it become zero, and the lowest zero byte is exact (the
/// borrow that can mark a byte above it never reaches below).
#[inline]
fn find_in_word(byte: u8, word: u64) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let x = word ^ ONES.wrapping_mul(u64::from(byte));
    let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
    (zeros != 0).then(|| (zeros.trailing_zeros() / 8) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_check_value() {
        // The XMODEM check value from the cluster specification's appendix.
        assert_eq!(
            crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
            0x31C3
        );
        assert_eq!(Slot::for_key(b"123456789").get(), 0x31C3 & SLOT_MASK);
        assert_eq!(Slot::for_key(b"123456789").get(), 12739);
    }

    #[test]
    fn known_slots() {
        // Values answered by a real server's CLUSTER KEYSLOT.
        assert_eq!(Slot::for_key(b"foo").get(), 12182);
        assert_eq!(Slot::for_key(b"bar").get(), 5061);
        assert_eq!(Slot::for_key(b"user1000").get(), 3443);
        assert_eq!(Slot::for_key(b"").get(), 0);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(
            Slot::for_key(b"{user1000}.following"),
            Slot::for_key(b"{user1000}.followers")
        );
        assert_eq!(
            Slot::for_key(b"{user1000}.following"),
            Slot::for_key(b"user1000")
        );
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"{}"), b"{}");
        assert_eq!(hash_tag(b"{"), b"{");
        assert_eq!(hash_tag(b"}{"), b"}{");
        assert_eq!(hash_tag(b"a{b"), b"a{b");
        assert_eq!(hash_tag(b"{a}"), b"a");
        assert_eq!(hash_tag(b"}}{x}"), b"x");
        assert_eq!(hash_tag(b""), b"");
    }

    #[test]
    fn tags_are_found_in_keys_of_every_length() {
        // The specification's own loop, byte by byte.
        fn reference(key: &[u8]) -> &[u8] {
            let Some(open) = key.iter().position(|&b| b == b'{') else {
                return key;
            };
            match key[open + 1..].iter().position(|&b| b == b'}') {
                Some(0) | None => key,
                Some(len) => &key[open + 1..open + 1 + len],
            }
        }
        for len in (0..80).chain([127, 128, 129]) {
            for open in 0..len {
                for close in open..len {
                    let mut key = vec![b'k'; len];
                    key[open] = b'{';
                    key[close] = b'}';
                    assert_eq!(hash_tag(&key), reference(&key), "{len} {open} {close}");
                }
            }
        }
    }

    #[test]
    fn tags_are_found_among_bytes_next_to_the_braces() {
        // Bytes one apart from `{` and `}`, zero and the high ones are
        // what a word-at-a-time search could mistake for a brace.
        for filler in [0x00, 0x7a, 0x7c, 0x7e, 0x80, 0xfb, 0xfd, 0xff] {
            for len in 0..40 {
                for open in 0..len {
                    for close in open..len {
                        let mut key = vec![filler; len];
                        key[open] = b'{';
                        key[close] = b'}';
                        let want = match key[open + 1..].iter().position(|&b| b == b'}') {
                            Some(0) | None => &key[..],
                            Some(n) => &key[open + 1..open + 1 + n],
                        };
                        assert_eq!(hash_tag(&key), want, "{filler} {len} {open} {close}");
                    }
                }
                assert_eq!(hash_tag(&vec![filler; len]), &vec![filler; len][..]);
            }
        }
    }

    #[test]
    fn binary_keys() {
        assert_eq!(hash_tag(b"\x00{\xff\x00}\xff"), b"\xff\x00");
        assert_eq!(
            Slot::for_key(b"\x00{\xff\x00}\xff"),
            Slot::for_key(b"\xff\x00")
        );
        assert_eq!(hash_tag(b"\x00\xff{"), b"\x00\xff{");
        assert_eq!(hash_tag(b"{{}"), b"{");
        for key in [&b"\x00"[..], b"\xff\xff", b"{\x00}", b"\x7b\x7d"] {
            assert!(Slot::for_key(key).get() < SLOT_COUNT);
        }
    }

    #[test]
    fn sixteen_tables_sum_as_one_byte_at_a_time() {
        // Every length across the 16-byte steps and their tails, and every
        // starting alignment, against the byte-at-a-time crc16 crate.
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 131 + 7) as u8).collect();
        for start in 0..17 {
            for end in start..bytes.len() {
                let key = &bytes[start..end];
                assert_eq!(
                    XMODEM.checksum(key),
                    crc16::State::<crc16::XMODEM>::calculate(key),
                    "{start}..{end}"
                );
            }
        }
    }

    #[test]
    fn range() {
        assert_eq!(Slot::new(0).map(Slot::get), Some(0));
        assert_eq!(Slot::new(16383).map(Slot::index), Some(16383));
        assert_eq!(Slot::new(16384), None);
        assert_eq!(Slot::try_from(u16::MAX), Err(SlotOutOfRange(u16::MAX)));
        assert_eq!(Slot::all().len(), 16384);
        assert_eq!(Slot::all().next_back().map(u16::from), Some(16383));
        assert_eq!(Slot::new(42).map(|s| s.to_string()).as_deref(), Some("42"));
    }
}
