//! The frames of client-side caching: reading a node's `invalidate` push,
//! and writing one for a client as a RESP3 push, as a `__redis__:invalidate`
//! message to a RESP2 subscriber, or as `tracking-redir-broken`.

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Limits, Protocol, Value, encode};

use crate::observe::clients::Invalidation;

/// Pushes for a client from invalidations other clients redirected to it:
/// RESP3 pushes, or in RESP2 messages on `__redis__:invalidate` when it is
/// subscribed (else nothing, as Redis sends nothing there). Invalidations
/// of every key in a row are one (every master sends its own for one
/// FLUSHALL).
pub fn redirected(mut mail: Vec<Invalidation>, proto: Protocol, subscribed: bool) -> Vec<Bytes> {
    mail.dedup_by(|a, b| a.is_none() && b.is_none());
    match proto {
        Protocol::Resp3 => mail.iter().map(invalidate_push).collect(),
        Protocol::Resp2 if subscribed => mail.iter().map(invalidate_message).collect(),
        Protocol::Resp2 => Vec::new(),
    }
}

/// The keys of an `invalidate` push (`None`: every key), or `None` for any
/// other push.
pub fn invalidation(frame: &Bytes) -> Option<Invalidation> {
    let (value, _) = Value::parse(frame, &Limits::for_replies()).ok()??;
    let parts = value.as_array()?;
    if !parts
        .first()?
        .as_bytes()?
        .eq_ignore_ascii_case(b"invalidate")
    {
        return None;
    }
    Some(match parts.get(1)? {
        Value::Null | Value::NullArray => None,
        keys => Some(
            keys.as_array()?
                .iter()
                .filter_map(|k| k.as_bytes().map(Bytes::copy_from_slice))
                .collect(),
        ),
    })
}

/// Whether `push` is the RESP3 invalidation of every key.
pub fn is_flush(push: &[u8]) -> bool {
    push == FLUSH_PUSH
}

const FLUSH_PUSH: &[u8] = b">2\r\n$10\r\ninvalidate\r\n_\r\n";

fn keys_frame(out: &mut BytesMut, keys: &Invalidation, proto: Protocol) {
    match keys {
        None => encode::null_array(out, proto),
        Some(keys) => {
            encode::array_header(out, keys.len());
            for k in keys {
                encode::bulk(out, k);
            }
        }
    }
}

/// `>2 invalidate [keys]` (RESP3).
pub fn invalidate_push(keys: &Invalidation) -> Bytes {
    let mut out = BytesMut::new();
    encode::push_header(&mut out, 2, Protocol::Resp3);
    encode::bulk(&mut out, b"invalidate");
    keys_frame(&mut out, keys, Protocol::Resp3);
    out.freeze()
}

/// `message __redis__:invalidate [keys]` (RESP2 subscriber).
fn invalidate_message(keys: &Invalidation) -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, 3);
    encode::bulk(&mut out, b"message");
    encode::bulk(&mut out, b"__redis__:invalidate");
    keys_frame(&mut out, keys, Protocol::Resp2);
    out.freeze()
}

/// `>2 tracking-redir-broken id` (RESP3): the REDIRECT client is gone.
pub fn redir_broken(id: u64) -> Bytes {
    let mut out = BytesMut::new();
    encode::push_header(&mut out, 2, Protocol::Resp3);
    encode::bulk(&mut out, b"tracking-redir-broken");
    encode::integer(&mut out, i64::try_from(id).unwrap_or(i64::MAX));
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidate_pushes_are_read_and_written_back_the_same() {
        let keys = Bytes::from_static(b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        let read = invalidation(&keys);
        assert_eq!(
            read,
            Some(Some(vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(b"b")
            ]))
        );
        assert_eq!(invalidate_push(&read.flatten()), keys);
        let flush = Bytes::from_static(b">2\r\n$10\r\ninvalidate\r\n_\r\n");
        assert_eq!(invalidation(&flush), Some(None));
        assert_eq!(invalidate_push(&None), flush);
        assert!(is_flush(&flush) && !is_flush(&keys));
        assert_eq!(
            invalidate_message(&None),
            Bytes::from_static(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*-1\r\n")
        );
        let other = Bytes::from_static(b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n");
        assert_eq!(invalidation(&other), None);
    }
}
