//! Arbitrary bytes into the reply scanner and the value parser.
//!
//! Checks: no panic; `scan_reply` and `Value::parse` agree on every input
//! (same frame length, same "need more", same error); the resumable
//! `ReplyScanner`, fed growing prefixes, reaches the same verdict; and a
//! parsed value re-encodes to a frame that parses and scans back to itself.
//!
//! Input: the first byte picks the limits and seeds the prefix steps; the
//! rest is the backend's byte stream.

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use orthrus_resp::{Limits, ReplyScanner, Value, scan_reply};

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let limits = if seed & 0x80 != 0 {
        Limits {
            max_bulk_len: 16,
            max_array_len: 8,
            max_inline_len: 32,
            max_depth: 3,
        }
    } else {
        Limits::default()
    };
    let buf = Bytes::copy_from_slice(stream);
    let scanned = scan_reply(&buf, &limits);
    let parsed = Value::parse(&buf, &limits);
    let parsed_len = parsed
        .as_ref()
        .map(|o| o.as_ref().map(|(_, n)| *n))
        .map_err(|e| *e);
    assert_eq!(scanned, parsed_len, "scan_reply and Value::parse disagree");

    // The resumable scanner, fed growing prefixes of the same bytes.
    let mut scanner = ReplyScanner::new(limits.clone());
    let mut state = u32::from(seed) | 1;
    let mut end = 0;
    loop {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        end = (end + 1 + (state >> 24) as usize % 17).min(stream.len());
        let verdict = scanner.scan(&stream[..end]);
        if verdict != Ok(None) || end == stream.len() {
            assert_eq!(verdict, scanned, "ReplyScanner disagrees at {end}");
            break;
        }
    }

    // Re-encoding a parsed value gives a frame that reads back the same.
    if let Ok(Some((value, _))) = parsed {
        let mut out = BytesMut::new();
        value.encode(&mut out);
        let frame = out.freeze();
        let wide = Limits::default();
        assert_eq!(scan_reply(&frame, &wide), Ok(Some(frame.len())));
        let Ok(Some((again, n))) = Value::parse(&frame, &wide) else {
            panic!("re-encoded value does not parse");
        };
        assert_eq!(n, frame.len());
        let mut out2 = BytesMut::new();
        again.encode(&mut out2);
        assert_eq!(out2.freeze(), frame, "encoding is not stable");
    }
});
