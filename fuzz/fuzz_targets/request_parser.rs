//! Arbitrary bytes into `RequestParser`, whole and in arbitrary chunks.
//!
//! Checks: no panic; how the bytes are cut never changes the requests or
//! the error; every parsed frame re-parses, alone, to the same arguments.
//!
//! Input: the first byte picks the limits and seeds the chunk sizes; the
//! rest is the client's byte stream.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use orthrus_resp::{Limits, ProtocolError, Request, RequestParser};

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let limits = if seed & 0x80 != 0 {
        // Small limits make every limit check reachable with short inputs.
        Limits {
            max_bulk_len: 16,
            max_array_len: 8,
            max_inline_len: 32,
            max_depth: 4,
        }
    } else {
        Limits::default()
    };
    let whole = feed(std::iter::once(stream), &limits);
    let cut = feed(Chunks::new(stream, seed), &limits);
    assert_eq!(whole, cut, "chunking changed the outcome");
    for request in &whole.0 {
        let (again, err) = feed(std::iter::once(&request.frame()[..]), &Limits::default());
        assert_eq!(err, None);
        assert_eq!(again.len(), 1);
        assert!(again[0].args().eq(request.args()));
        assert_eq!(again[0].frame(), request.frame());
    }
});

/// Parses `pieces` appended one after another; returns the requests and
/// the error that stopped parsing, if any.
fn feed<'a>(
    pieces: impl Iterator<Item = &'a [u8]>,
    limits: &Limits,
) -> (Vec<Request>, Option<ProtocolError>) {
    let mut parser = RequestParser::new(limits.clone());
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match parser.parse(&mut buf) {
                Ok(Some(request)) => out.push(request),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

/// Cuts a slice into pseudo-random pieces of 1 to 17 bytes.
struct Chunks<'a> {
    rest: &'a [u8],
    state: u32,
}

impl<'a> Chunks<'a> {
    fn new(rest: &'a [u8], seed: u8) -> Self {
        Self {
            rest,
            state: u32::from(seed) | 1,
        }
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        self.state = self
            .state
            .wrapping_mul(1_664_525)
            .wrapping_add(1_013_904_223);
        let size = 1 + (self.state >> 24) as usize % 17;
        let (head, tail) = self.rest.split_at(size.min(self.rest.len()));
        self.rest = tail;
        Some(head)
    }
}
