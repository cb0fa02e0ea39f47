//! Known orthrus defects the users mode meets, each recognised by its
//! reply so that a run can go on and count them instead of shrinking them
//! again; `--strict` reports them as differences. These are not rules:
//! each is a defect to fix (and then to remove from here). Defects whose
//! effect would change the data (or the replies after them) are kept out
//! by the generator and [`crate::world`] instead, as said there: a user
//! with `~* &*` and only allowing command rules may run every command
//! (`world`); SET without GET needs read access (`world`: no `%W~`);
//! AUTH, HELLO and RESET are checked against command rules (`generate`:
//! HELLO and RESET as root only); a mirror's copy of an EVALSHA it does
//! not have the script of is lost (`fill`: no EVALSHA on `m:`); SORT_RO,
//! and SORT with BY or GET for a user without `~*`, refused at MULTI's
//! queue time, aborting the transaction (`generate`: not in MULTI).
//!
//! - `sort-ro`: SORT_RO is refused to every user without `~*`
//!   (`-NOPERM orthrus: 'sort_ro' names keys orthrus cannot find`): its
//!   BY/GET key spec is "unknown", and only SORT is exempted from
//!   `keys_incomplete`; Redis checks its key and refuses BY/GET only.
//! - `bitfield-get`: BITFIELD with only GET is checked as a write (its key
//!   spec's static flags); Redis's `bitfieldGetKeys` makes it a read, so a
//!   `%R~` user may run it.
//! - `exec-refused`: an EXEC refused by the user's rules is answered
//!   `-NOPERM ...`; Redis answers `-EXECABORT Transaction discarded because
//!   of: NOPERM ...` (`rejectCommand` aborts an EXEC).
//! - `subscriber-name`: a command with a subcommand refused in RESP2
//!   subscriber mode is named by its container (`Can't execute
//!   'function'`); Redis names the subcommand (`'function|delete'`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Report known defects as differences (`--strict`).
pub static STRICT: AtomicBool = AtomicBool::new(false);

/// How often each known defect was seen, by [`NAMES`].
pub static SEEN: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];
/// The names of [`SEEN`]'s counters.
pub const NAMES: [&str; 4] = ["sort-ro", "bitfield-get", "exec-refused", "subscriber-name"];

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
    let which = if name == "SORT_RO"
        && p.starts_with(b"-NOPERM orthrus: 'sort_ro' names keys orthrus cannot find")
        && !s.starts_with(b"-NOPERM")
    {
        0
    } else if name == "BITFIELD"
        && only_gets(args)
        && p.starts_with(b"-NOPERM")
        && !s.starts_with(b"-NOPERM")
    {
        1
    } else if name == "EXEC"
        && p.starts_with(b"-NOPERM")
        && s.starts_with(b"-EXECABORT Transaction discarded because of: NOPERM")
    {
        2
    } else if container_named(s, p) {
        3
    } else {
        return false;
    };
    SEEN[which].fetch_add(1, Ordering::Relaxed);
    true
}

/// `s` is `-ERR Can't execute 'a|b': ...` where `p` has `'a'`.
fn container_named(s: &[u8], p: &[u8]) -> bool {
    const HEAD: &[u8] = b"-ERR Can't execute '";
    let (Some(s), Some(p)) = (s.strip_prefix(HEAD), p.strip_prefix(HEAD)) else {
        return false;
    };
    let Some(bar) = s.iter().position(|&b| b == b'|') else {
        return false;
    };
    let Some(close) = s.iter().position(|&b| b == b'\'') else {
        return false;
    };
    bar < close && p.get(..bar) == s.get(..bar) && p.get(bar..) == s.get(close..)
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
