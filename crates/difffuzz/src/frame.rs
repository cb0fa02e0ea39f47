//! Looking inside a reply frame: the elements of an aggregate, the payload
//! of a bulk string.

use orthrus_resp::{Limits, scan_reply};

/// The elements of an aggregate frame (array, set, push or map: a map's
/// keys and values alternate); empty for anything else.
pub fn elements(frame: &[u8]) -> Vec<&[u8]> {
    let Some(&kind) = frame.first() else {
        return Vec::new();
    };
    if !matches!(kind, b'*' | b'~' | b'>' | b'%') {
        return Vec::new();
    }
    let Some(line_end) = frame.windows(2).position(|w| w == b"\r\n") else {
        return Vec::new();
    };
    let n: usize = std::str::from_utf8(&frame[1..line_end])
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let count = if kind == b'%' { n * 2 } else { n };
    let limits = Limits::for_replies();
    let mut at = line_end + 2;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let Some(rest) = frame.get(at..) else { break };
        let Ok(Some(len)) = scan_reply(rest, &limits) else {
            break;
        };
        out.push(&rest[..len]);
        at += len;
    }
    out
}

/// The payload of a bulk string frame.
pub fn bulk_payload(frame: &[u8]) -> Option<&[u8]> {
    let line_end = frame.windows(2).position(|w| w == b"\r\n")?;
    let is_value = frame.first() == Some(&b'$') && !frame.starts_with(b"$-");
    is_value
        .then(|| frame.get(line_end + 2..frame.len().saturating_sub(2)))
        .flatten()
}
