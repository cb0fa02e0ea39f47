//! Hot-path throughput: parsing a pipeline of client commands, and finding
//! reply frame ends.
//!
//! Run: `cargo bench -p orthrus-resp -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use orthrus_resp::{Limits, ReplyScanner, Request, RequestParser, Value, scan_reply};

const COUNT: usize = 1000;

/// 1000 commands, alternating `GET k` and `SET k v` with 16-byte keys and
/// 32-byte values.
fn pipeline() -> Vec<u8> {
    let mut wire = Vec::new();
    for i in 0..COUNT {
        let key = format!("key:{i:012}");
        let frame = if i % 2 == 0 {
            Request::from_args(&[b"GET".as_slice(), key.as_bytes()])
        } else {
            let value = format!("value:{i:026}");
            Request::from_args(&[b"SET".as_slice(), key.as_bytes(), value.as_bytes()])
        };
        wire.extend_from_slice(frame.frame());
    }
    wire
}

/// 1000 replies: `+OK`, a 32-byte bulk, an integer and a 3-element array,
/// in turn.
fn replies() -> Vec<u8> {
    let mut wire = Vec::new();
    for i in 0..COUNT {
        match i % 4 {
            0 => wire.extend_from_slice(b"+OK\r\n"),
            1 => wire.extend_from_slice(format!("$32\r\nvalue:{i:026}\r\n").as_bytes()),
            2 => wire.extend_from_slice(format!(":{}\r\n", i * 7919).as_bytes()),
            _ => wire.extend_from_slice(
                format!("*3\r\n$5\r\nfield\r\n:{i}\r\n$16\r\nkey:{i:012}\r\n").as_bytes(),
            ),
        }
    }
    wire
}

fn parse_requests(c: &mut Criterion) {
    let wire = pipeline();
    let mut group = c.benchmark_group("request");
    group.throughput(Throughput::Elements(COUNT as u64));
    group.bench_function("parse_pipeline_1000", |b| {
        let mut parser = RequestParser::new(Limits::default());
        b.iter(|| {
            let mut buf = BytesMut::from(&wire[..]);
            let mut n = 0;
            while let Ok(Some(request)) = parser.parse(&mut buf) {
                black_box(request.arg(1));
                n += 1;
            }
            assert_eq!(n, COUNT);
        });
    });
    group.finish();
}

fn scan_replies(c: &mut Criterion) {
    let wire = replies();
    let limits = Limits::for_replies();
    let mut group = c.benchmark_group("reply");
    group.throughput(Throughput::Elements(COUNT as u64));
    group.bench_function("scan_reply_1000", |b| {
        b.iter(|| {
            let mut rest = &wire[..];
            let mut n = 0;
            while let Ok(Some(len)) = scan_reply(black_box(rest), &limits) {
                rest = &rest[len..];
                n += 1;
            }
            assert_eq!(n, COUNT);
        });
    });
    group.bench_function("scanner_1000", |b| {
        let mut scanner = ReplyScanner::new(limits.clone());
        b.iter(|| {
            let mut rest = &wire[..];
            let mut n = 0;
            while let Ok(Some(len)) = scanner.scan(black_box(rest)) {
                rest = &rest[len..];
                n += 1;
            }
            assert_eq!(n, COUNT);
        });
    });
    let bytes = bytes::Bytes::from(wire.clone());
    group.bench_function("value_parse_1000", |b| {
        b.iter(|| {
            let mut rest = bytes.clone();
            let mut n = 0;
            while let Ok(Some((value, len))) = Value::parse(&rest, &limits) {
                black_box(value);
                let _ = rest.split_to(len);
                n += 1;
            }
            assert_eq!(n, COUNT);
        });
    });
    group.finish();
}

criterion_group!(benches, parse_requests, scan_replies);
criterion_main!(benches);
