//! Test input for the one-pass readers: well-formed frames cut short or
//! damaged at one byte, then noise.

use proptest::prelude::*;

/// Each of `frames` (never empty) cut short at a random place, or with one
/// byte replaced by one of `bytes`, or left whole; then fewer than `noise`
/// bytes drawn from `bytes`.
pub(crate) fn damaged(
    frames: impl Strategy<Value = Vec<u8>>,
    bytes: &'static [u8],
    noise: usize,
) -> impl Strategy<Value = Vec<u8>> {
    let byte = proptest::sample::select(bytes);
    let tail = proptest::collection::vec(byte.clone(), 0..noise);
    (frames, any::<usize>(), any::<usize>(), byte, tail).prop_map(|(mut f, cut, at, b, tail)| {
        match cut % 3 {
            0 => f.truncate(cut % (f.len() + 1)),
            1 => {
                let at = at % f.len().max(1);
                if let Some(x) = f.get_mut(at) {
                    *x = b;
                }
            }
            _ => {}
        }
        f.extend_from_slice(&tail);
        f
    })
}
