//! The normalisation applied before two replies are compared, and the
//! comparison. Every rule here is a difference that is not a defect; the
//! list, with why, is in docs/commands.md ("What differs from one
//! redis-server") and docs/operations.md (the fuzzer's section).
//!
//! 1. Errors both sides give with the same code (`ERR`, `WRONGTYPE`, ...)
//!    are equal when orthrus's text names orthrus: the text is its own.
//! 2. `-CROSSSLOT` from orthrus for a command whose keys span slots (the
//!    generator sends only reads that way) is what Redis Cluster answers.
//! 3. Replies in hash-table order are sorted (SMEMBERS, SINTER, SUNION,
//!    SDIFF, KEYS, HKEYS, HVALS, PUBSUB CHANNELS, SORT BY nosort without
//!    LIMIT; HGETALL and every RESP3
//!    map as pairs; every RESP3 set; the channels an argument-less
//!    (P|S)UNSUBSCRIBE confirms); SCAN-family commands are iterated to
//!    cursor 0 and their elements sorted (the runner does that).
//! 4. Replies that are random or clocks are compared by shape (types,
//!    nullness, counts): SRANDMEMBER, HRANDFIELD, ZRANDMEMBER, RANDOMKEY,
//!    TIME, LASTSAVE, XINFO CONSUMERS; a non-negative TTL, PTTL,
//!    EXPIRETIME or PEXPIRETIME counts as "some time left"; INFO is not
//!    compared.
//! 5. DUMP's payload is compared by shape: a set or hash in a hash table
//!    is serialised in the order of that node's table. So is HELLO's map
//!    (the connection's id, the server's version).
//! 6. EXEC's array is compared element by element under the rule of the
//!    command queued there.
//! 7. The messages one PUBLISH brings a connection subscribed to several
//!    matching patterns are compared in any order (a node keeps patterns
//!    in a hash table).
//! 8. `-NOPERM` refusals are compared by their code only: orthrus writes
//!    Redis 7.2's texts ("No permissions to access a key"), Redis 7.0
//!    others ("this user has no permissions to access one of the keys
//!    used as arguments"), and a script refused to a user with key or
//!    channel rules has orthrus's own (the users mode); so are those an
//!    `-EXECABORT` gives as its reason.
//! 9. SORT with a BY pattern or GET gets `-ERR BY|GET option of SORT
//!    denied in Cluster mode.` from a Redis 7.0 cluster node, whatever the
//!    user (the users mode sends them, never with STORE, to see that a
//!    user without access to every key is refused first).
//! 10. An error text that names a key of a route whose prefix orthrus
//!     removes (`-NOGROUP No such key 'c:k3' ...`) names it as the upstream
//!     stores it (`'k3'`): the texts are compared with `'c:` read as `'`.
//!     So does a script's reply that returns its `KEYS` (cut on the way):
//!     a script's bulk strings are compared with a leading `c:` dropped.

use orthrus_cluster::Slot;

use crate::frame::elements;
use crate::run::{Kind, Obs};
use crate::sequence::quote_args;

/// Why two observations differ, or `None` when they agree.
pub fn differ(single: &Obs, proxy: &Obs) -> Option<String> {
    let (s, p) = match (&single.reply, &proxy.reply) {
        (Ok(s), Ok(p)) => (s, p),
        (Err(_), Err(_)) => return None,
        (Ok(_), Err(e)) => return Some(format!("orthrus: {e}")),
        (Err(e), Ok(_)) => return Some(format!("the single server: {e}")),
    };
    if s == p || single.kind != proxy.kind {
        return (s != p).then(|| "replies differ".into());
    }
    if single.kind == Kind::Message {
        return (sorted(s, 1) != sorted(p, 1)).then(|| "messages differ".into());
    }
    if refused_alike(s, p) {
        return None;
    }
    if single.kind != Kind::Reply {
        return Some("replies differ".into());
    }
    let name = command_name(&single.args);
    if name == "EXEC" && !single.queued.is_empty() {
        let (es, ep) = (elements(s), elements(p));
        if es.len() == single.queued.len() && ep.len() == es.len() {
            let bad = single
                .queued
                .iter()
                .zip(es.iter().zip(&ep))
                .position(|(q, (a, b))| !same(q, a, b));
            return bad.map(|i| {
                format!(
                    "EXEC's reply {} ({}) differs",
                    i + 1,
                    quote_args(&single.queued[i])
                )
            });
        }
    }
    (!same(&single.args, s, p)).then(|| "replies differ".into())
}

/// Whether two replies to `args` agree after normalisation.
pub fn same(args: &[Vec<u8>], s: &[u8], p: &[u8]) -> bool {
    if s == p {
        return true;
    }
    if s.first() == Some(&b'-') && p.first() == Some(&b'-') {
        let code = |f: &[u8]| f.split(|&b| b == b' ').next().map(<[u8]>::to_vec);
        if code(s) == code(p) && contains(p, b"orthrus") {
            return true;
        }
    }
    if refused_alike(s, p) {
        return true;
    }
    if s.first() == Some(&b'-') && uncut(s) == p {
        return true;
    }
    let name = command_name(args);
    if name.starts_with("EVAL") && uncut_bulks(s) == p {
        return true;
    }
    let sort_option = |f: &[u8]| {
        f.starts_with(b"-ERR BY option of SORT denied in Cluster mode.")
            || f.starts_with(b"-ERR GET option of SORT denied in Cluster mode.")
    };
    if (name == "SORT" || name == "SORT_RO") && sort_option(p) {
        return true;
    }
    if p.starts_with(b"-CROSSSLOT") && spans_slots(args) {
        return true;
    }
    canonical(args, s) == canonical(args, p)
}

/// An error text with `'c:` read as `'` (rule 10).
fn uncut(frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frame.len());
    let mut i = 0;
    while i < frame.len() {
        if frame[i..].starts_with(b"'c:") {
            out.push(b'\'');
            i += 3;
        } else {
            out.push(frame[i]);
            i += 1;
        }
    }
    out
}

/// A frame with `c:` dropped from the start of every bulk string (rule
/// 10, scripts).
fn uncut_bulks(frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frame.len());
    let mut rest = frame;
    while !rest.is_empty() {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(rest.len(), |i| i + 2);
        let (line, after) = rest.split_at(end);
        let len = line
            .strip_prefix(b"$")
            .and_then(|l| std::str::from_utf8(l).ok())
            .and_then(|l| l.trim_end().parse::<usize>().ok());
        match len {
            Some(n) if n >= 2 && after.starts_with(b"c:") && after.len() >= n + 2 => {
                out.extend_from_slice(format!("${}\r\n", n - 2).as_bytes());
                out.extend_from_slice(&after[2..n + 2]);
                rest = &after[n + 2..];
            }
            _ => {
                out.extend_from_slice(line);
                rest = after;
            }
        }
    }
    out
}

/// Both refused by a user's rules (rule 8).
/// A refused EXEC gives the refusal as its reason.
fn refused_alike(s: &[u8], p: &[u8]) -> bool {
    const ABORT: &[u8] = b"-EXECABORT Transaction discarded because of: NOPERM";
    (s.starts_with(b"-NOPERM") && p.starts_with(b"-NOPERM"))
        || (s.starts_with(ABORT) && p.starts_with(ABORT))
}

fn canonical(args: &[Vec<u8>], frame: &[u8]) -> Vec<u8> {
    let name = command_name(args);
    let sub = args
        .get(1)
        .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
        .unwrap_or_default();
    match name.as_str() {
        "INFO" => Vec::new(),
        "SRANDMEMBER" | "HRANDFIELD" | "ZRANDMEMBER" | "RANDOMKEY" | "TIME" | "LASTSAVE"
        | "DUMP" => shape(frame).into_bytes(),
        "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" => match integer(frame) {
            Some(n) if n >= 0 => b"some time left".to_vec(),
            _ => frame.to_vec(),
        },
        "SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "KEYS" | "HKEYS" | "HVALS" => sorted(frame, 1),
        "PUBSUB" if sub == "CHANNELS" || sub == "SHARDCHANNELS" => sorted(frame, 1),
        // The connection's id and the server's version are the target's.
        "HELLO" => shape(frame).into_bytes(),
        // A consumer's idle and inactive times are clocks.
        "XINFO" if sub == "CONSUMERS" => shape(frame).into_bytes(),
        "HGETALL" => sorted(frame, 2),
        // BY nosort gives a set's elements in its hash table's order.
        "SORT" | "SORT_RO" if has_word(args, "NOSORT") => match has_word(args, "LIMIT") {
            true => shape(frame).into_bytes(),
            false => sorted(frame, 1),
        },
        "UNSUBSCRIBE" | "PUNSUBSCRIBE" | "SUNSUBSCRIBE" if args.len() == 1 => unsubscribed(frame),
        _ => match frame.first() {
            Some(b'%') => sorted(frame, 2),
            Some(b'~') => sorted(frame, 1),
            _ => frame.to_vec(),
        },
    }
}

/// Whether an argument is `word` (in any case).
fn has_word(args: &[Vec<u8>], word: &str) -> bool {
    args.iter().any(|a| a.eq_ignore_ascii_case(word.as_bytes()))
}

/// The command's name in upper case.
pub fn command_name(args: &[Vec<u8>]) -> String {
    args.first()
        .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
        .unwrap_or_default()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether the arguments that are keys of the generator's pool (`kN`,
/// `{t}N`, each maybe under a route prefix `c:` or `m:`) fall in more
/// than one slot.
pub fn spans_slots(args: &[Vec<u8>]) -> bool {
    let mut slots = args
        .iter()
        .skip(1)
        .filter(|a| is_pool_key(a))
        .map(|a| Slot::for_key(a));
    match slots.next() {
        Some(first) => slots.any(|s| s != first),
        None => false,
    }
}

fn is_pool_key(arg: &[u8]) -> bool {
    let arg = match arg {
        [b'c' | b'm', b':', rest @ ..] => rest,
        _ => arg,
    };
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    match arg {
        [b'k', rest @ ..] => digits(rest),
        [b'{', t, b'}', rest @ ..] => t.is_ascii_lowercase() && digits(rest),
        _ => false,
    }
}

/// The elements of an aggregate sorted, `group` at a time.
pub fn sorted(frame: &[u8], group: usize) -> Vec<u8> {
    let items = elements(frame);
    if items.is_empty() || items.len() % group != 0 {
        return frame.to_vec();
    }
    let mut groups: Vec<Vec<u8>> = items.chunks(group).map(<[&[u8]]>::concat).collect();
    groups.sort();
    let header_end = frame.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
    let mut out = frame[..header_end + 2].to_vec();
    groups.iter().for_each(|g| out.extend_from_slice(g));
    out
}

/// An unsubscribe from everything: the node leaves its channels in
/// hash-table order, so the channels are sorted and the counts kept in
/// order (they count down the same way whatever the order).
fn unsubscribed(frame: &[u8]) -> Vec<u8> {
    let frames = elements(frame);
    let confirmations: Vec<Vec<&[u8]>> = match frames.first().map(|f| elements(f).len()) {
        Some(3) => frames.iter().map(|f| elements(f)).collect(),
        _ => vec![elements(frame)],
    };
    let mut channels: Vec<&[u8]> = confirmations
        .iter()
        .filter_map(|c| c.get(1).copied())
        .collect();
    channels.sort();
    let counts = confirmations.iter().filter_map(|c| c.get(2).copied());
    let mut out = Vec::new();
    channels
        .into_iter()
        .chain(counts)
        .for_each(|p| out.extend_from_slice(p));
    out
}

/// Types, nullness and element counts, without contents.
pub fn shape(frame: &[u8]) -> String {
    let Some(&kind) = frame.first() else {
        return "nothing".into();
    };
    if matches!(kind, b'*' | b'~' | b'>' | b'%') && !frame.starts_with(b"*-1") {
        let inner: Vec<String> = elements(frame).iter().map(|i| shape(i)).collect();
        return format!("{}[{}]", kind as char, inner.join(","));
    }
    if frame.starts_with(b"$-1") || frame.starts_with(b"*-1") || frame.starts_with(b"_") {
        return "nil".into();
    }
    (kind as char).to_string()
}

fn integer(frame: &[u8]) -> Option<i64> {
    std::str::from_utf8(frame.strip_prefix(b":")?)
        .ok()?
        .trim_end()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn unordered_replies_are_sorted() {
        let a = b"*2\r\n$1\r\na\r\n$1\r\nb\r\n";
        let b = b"*2\r\n$1\r\nb\r\n$1\r\na\r\n";
        assert!(same(&args("SMEMBERS k1"), a, b));
        assert!(!same(&args("LRANGE k1 0 -1"), a, b));
    }

    #[test]
    fn crossslot_counts_only_across_slots() {
        let cross = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
        assert!(same(&args("SINTER {a}1 {b}1"), b"*0\r\n", cross));
        assert!(!same(&args("SINTER {a}1 {a}2"), b"*0\r\n", cross));
    }

    #[test]
    fn a_script_may_return_its_keys_cut() {
        let sent = b"*3\r\n$4\r\nc:k4\r\n$4\r\nc:k4\r\n$3\r\n3.5\r\n";
        let cut = b"*3\r\n$2\r\nk4\r\n$2\r\nk4\r\n$3\r\n3.5\r\n";
        assert!(same(&args("EVAL x 2 c:k4 c:k4 3.5"), sent, cut));
        assert!(!same(&args("LRANGE c:k4 0 -1"), sent, cut));
    }

    #[test]
    fn a_ttl_is_some_time_left() {
        assert!(same(&args("TTL k1"), b":1000\r\n", b":999\r\n"));
        assert!(!same(&args("TTL k1"), b":-1\r\n", b":999\r\n"));
    }
}
