//! Known orthrus differences the users mode meets, each recognised by its
//! reply so that a run can go on and count them instead of shrinking them
//! again; `--strict` reports them as differences. Those whose effect would
//! change the data are kept out by the generator and [`crate::world`]: SET
//! without GET needs read access (`world`: no `%W~` patterns, as
//! docs/security.md says flags that vary with the arguments are taken at
//! their widest); SORT with BY or GET for a user without `~*` is refused at
//! MULTI's queue time, aborting the transaction, where Redis fails it at
//! EXEC (`generate`: not in MULTI).
//!
//! - `bitfield-get`: BITFIELD with only GET is checked as a write (its key
//!   spec's static flags, taken at their widest); Redis's
//!   `bitfieldGetKeys` makes it a read, so a `%R~` user may run it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Report known defects as differences (`--strict`).
pub static STRICT: AtomicBool = AtomicBool::new(false);

/// How often each known difference was seen, by [`NAMES`].
pub static SEEN: [AtomicU64; 1] = [AtomicU64::new(0)];
/// The names of [`SEEN`]'s counters.
pub const NAMES: [&str; 1] = ["bitfield-get"];

/// Whether the replies `s` (the reference's) and `p` (orthrus's) to
/// `args` differ by a known defect (counted; never under `--strict`).
pub fn known(args: &[Vec<u8>], s: &[u8], p: &[u8]) -> bool {
    if STRICT.load(Ordering::Relaxed) {
        return false;
    }
    let name = args
        .first()
        .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
        .unwrap_or_default();
    let which = if name == "BITFIELD"
        && only_gets(args)
        && p.starts_with(b"-NOPERM")
        && !s.starts_with(b"-NOPERM")
    {
        0
    } else {
        return false;
    };
    SEEN[which].fetch_add(1, Ordering::Relaxed);
    true
}

/// BITFIELD key GET type offset [GET type offset ...].
fn only_gets(args: &[Vec<u8>]) -> bool {
    let ops = args.get(2..).unwrap_or_default();
    !ops.is_empty()
        && ops.len() % 3 == 0
        && ops.chunks(3).all(|op| op[0].eq_ignore_ascii_case(b"GET"))
}

/// A line per known defect seen, for the end of a run.
pub fn summary() -> Vec<String> {
    NAMES
        .iter()
        .zip(&SEEN)
        .map(|(n, c)| (n, c.load(Ordering::Relaxed)))
        .filter(|(_, c)| *c > 0)
        .map(|(n, c)| format!("known orthrus defect {n}: {c} replies"))
        .collect()
}
