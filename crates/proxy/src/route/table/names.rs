//! Command names looked up in any case, as clients send them (`get`,
//! `GET`, `Get`), without first copying the name into lower case: every
//! request looks its command up here.
//!
//! Open addressing over a power-of-two array at most half full. A name is
//! read eight bytes at a time and put in lower case in a register, which
//! both hashes it and, for names of up to eight bytes, compares it whole.

/// Command names (stored in lower case) and what is known of each.
pub struct Names<T> {
    /// A power of two long (or empty); never more than half full.
    cells: Vec<Option<Cell<T>>>,
    len: usize,
}

struct Cell<T> {
    /// The name's first eight bytes in lower case (zeros past its end):
    /// most names are whole in it, compared at once.
    first: u64,
    name: Box<[u8]>,
    value: T,
}

/// Odd multiplier of the hash (the golden ratio's, as FxHash uses).
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

const LOW_BITS: u64 = u64::from_ne_bytes([0x7f; 8]);
const HIGH_BITS: u64 = u64::from_ne_bytes([0x80; 8]);

// === impl Names ===

impl<T> Default for Names<T> {
    fn default() -> Names<T> {
        Names {
            cells: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Names<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What is known of `name`, in any case.
    #[inline]
    pub fn get(&self, name: &[u8]) -> Option<&T> {
        let mask = self.cells.len().checked_sub(1)?;
        let (first, hash) = fold(name);
        let mut at = index(hash, mask);
        loop {
            let cell = self.cells.get(at)?.as_ref()?;
            if cell.first == first && cell.name.len() == name.len() && same_rest(&cell.name, name) {
                return Some(&cell.value);
            }
            at = at.wrapping_add(1) & mask;
        }
    }

    /// Sets what is known of `name` (stored in lower case), replacing
    /// what was.
    pub fn insert(&mut self, name: &[u8], value: T) {
        if self.len.saturating_add(1).saturating_mul(2) > self.cells.len() {
            self.grow();
        }
        let mask = self.cells.len().saturating_sub(1);
        let (first, hash) = fold(name);
        let mut at = index(hash, mask);
        while let Some(Some(cell)) = self.cells.get_mut(at) {
            if cell.name.eq_ignore_ascii_case(name) {
                cell.value = value;
                return;
            }
            at = at.wrapping_add(1) & mask;
        }
        if let Some(slot) = self.cells.get_mut(at) {
            *slot = Some(Cell {
                first,
                name: name.to_ascii_lowercase().into(),
                value,
            });
            self.len = self.len.saturating_add(1);
        }
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.cells.iter().flatten().map(|cell| &cell.value)
    }

    /// Doubles the array (sixteen cells at first) and places every entry
    /// again.
    fn grow(&mut self) {
        let size = self.cells.len().saturating_mul(2).max(16);
        let old = std::mem::replace(&mut self.cells, (0..size).map(|_| None).collect());
        self.len = 0;
        for cell in old.into_iter().flatten() {
            self.insert(&cell.name, cell.value);
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Names<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(
                self.cells
                    .iter()
                    .flatten()
                    .map(|cell| (String::from_utf8_lossy(&cell.name), &cell.value)),
            )
            .finish()
    }
}

impl<T> FromIterator<(Box<[u8]>, T)> for Names<T> {
    fn from_iter<I: IntoIterator<Item = (Box<[u8]>, T)>>(entries: I) -> Names<T> {
        let mut names = Names::default();
        for (name, value) in entries {
            names.insert(&name, value);
        }
        names
    }
}

/// `name`'s first eight bytes in lower case, and its hash: its bytes
/// eight at a time in lower case, mixed as FxHash mixes.
#[inline]
fn fold(name: &[u8]) -> (u64, u64) {
    let mut words = name.chunks_exact(8);
    let mut hash = name.len() as u64;
    let mut first = None;
    for word in &mut words {
        let word: [u8; 8] = word.try_into().unwrap_or_default();
        let word = lower(u64::from_le_bytes(word));
        first.get_or_insert(word);
        hash = (hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
    // The last bytes shifted into place (a copy into an array would call
    // memcpy for a name of three bytes).
    let tail = words
        .remainder()
        .iter()
        .rev()
        .fold(0u64, |word, &b| (word << 8) | u64::from(b));
    let tail = lower(tail);
    hash = (hash.rotate_left(5) ^ tail).wrapping_mul(SEED);
    (first.unwrap_or(tail), hash)
}

/// The eight bytes of `word` in ASCII lower case: `A`..=`Z` gain the
/// case bit, every other byte stays. Each test is a byte's own sum (the
/// high bit clear first, so no carry crosses into the next byte).
#[inline]
fn lower(word: u64) -> u64 {
    let low = word & LOW_BITS;
    let from_a = low.wrapping_add(u64::from_ne_bytes([0x80 - b'A'; 8]));
    let past_z = low.wrapping_add(u64::from_ne_bytes([0x80 - b'Z' - 1; 8]));
    let upper = from_a & !past_z & !word & HIGH_BITS;
    word | (upper >> 2)
}

/// Whether two names of one length, whose first eight bytes already
/// match, match in the rest too, in any case.
#[inline]
fn same_rest(stored: &[u8], name: &[u8]) -> bool {
    match (stored.get(8..), name.get(8..)) {
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        _ => true,
    }
}

/// The first cell to probe for a hash: its high (best mixed) bits.
#[inline]
fn index(hash: u64, mask: usize) -> usize {
    (hash >> 32) as usize & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_in_any_case_and_others_are_not() {
        let words = [
            "get",
            "set",
            "client|list",
            "georadius_ro",
            "x",
            "",
            "zrangebyscore",
            "function|restore",
            "a@b",
            "a`b",
        ];
        let mut names: Names<usize> = Names::default();
        for (i, w) in words.iter().enumerate() {
            names.insert(w.as_bytes(), i);
        }
        assert_eq!(names.len(), words.len());
        for (i, w) in words.iter().enumerate() {
            assert_eq!(names.get(w.as_bytes()), Some(&i), "{w}");
            assert_eq!(
                names.get(w.to_ascii_uppercase().as_bytes()),
                Some(&i),
                "{w}"
            );
        }
        for missing in [
            "ge",
            "gets",
            "GETT",
            "client|lis",
            "a",
            "georadius-ro",
            "aab",
        ] {
            assert_eq!(names.get(missing.as_bytes()), None, "{missing}");
        }
        names.insert(b"GET", 99);
        assert_eq!(names.get(b"get"), Some(&99));
        assert_eq!(names.len(), words.len());
        let mut values: Vec<usize> = names.values().copied().collect();
        values.sort_unstable();
        assert_eq!(values.len(), words.len());
    }

    #[test]
    fn lower_case_of_every_byte_as_std_has_it() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut bytes = [b'x'; 8];
                bytes[at] = b;
                let mut want = bytes;
                want.make_ascii_lowercase();
                assert_eq!(
                    lower(u64::from_le_bytes(bytes)).to_le_bytes(),
                    want,
                    "{b} at {at}"
                );
            }
        }
    }

    #[test]
    fn a_table_of_many_names_finds_each() {
        let names: Names<usize> = (0..2_000)
            .map(|i| (format!("Cmd{i}").into_bytes().into_boxed_slice(), i))
            .collect();
        assert_eq!(names.len(), 2_000);
        for i in 0..2_000 {
            assert_eq!(names.get(format!("cMD{i}").as_bytes()), Some(&i));
        }
        assert_eq!(names.get(b"cmd2000"), None);
        assert!(Names::<u8>::default().get(b"get").is_none());
    }
}
