//! Property tests for replies: random nested values of every type, encoded
//! and scanned at every prefix, parsed back, resumed in random chunks; and
//! scanner/parser agreement on damaged frames.

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Limits, ReplyScanner, Value, scan_reply};
use proptest::prelude::*;

fn text_without_crlf() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(
        any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'),
        0..12,
    )
    .prop_map(Bytes::from)
}

fn any_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..16).prop_map(Bytes::from)
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        text_without_crlf().prop_map(Value::Simple),
        any_bytes().prop_map(Value::Error),
        any::<i64>().prop_map(Value::Integer),
        any_bytes().prop_map(Value::Bulk),
        Just(Value::Null),
        Just(Value::NullArray),
        any::<f64>()
            .prop_filter("NaN never equals itself", |f| !f.is_nan())
            .prop_map(Value::Double),
        Just(Value::Double(f64::INFINITY)),
        Just(Value::Double(f64::NEG_INFINITY)),
        any::<bool>().prop_map(Value::Boolean),
        ("-?[0-9]{1,40}").prop_map(|s| Value::BigNumber(Bytes::from(s))),
        (any::<[u8; 3]>(), any_bytes()).prop_map(|(format, text)| Value::Verbatim { format, text }),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 64, 6, |inner| {
        let pairs = proptest::collection::vec((inner.clone(), inner.clone()), 0..4);
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Set),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Push),
            pairs.clone().prop_map(Value::Map),
            (pairs, inner).prop_map(|(attrs, value)| Value::Attribute {
                attrs,
                value: Box::new(value)
            }),
        ]
    })
}

fn encode(v: &Value) -> Bytes {
    let mut out = BytesMut::new();
    v.encode(&mut out);
    out.freeze()
}

proptest! {
    #[test]
    fn scan_finds_exactly_the_frame(v in value()) {
        let frame = encode(&v);
        let limits = Limits::default();
        prop_assert_eq!(scan_reply(&frame, &limits), Ok(Some(frame.len())));
        for cut in 0..frame.len() {
            prop_assert_eq!(scan_reply(&frame[..cut], &limits), Ok(None), "cut at {}", cut);
            let prefix = frame.slice(..cut);
            prop_assert_eq!(Value::parse(&prefix, &limits), Ok(None), "cut at {}", cut);
        }
        // Trailing bytes are the next frame's.
        let mut two = BytesMut::from(&frame[..]);
        two.extend_from_slice(b":1\r\n");
        prop_assert_eq!(scan_reply(&two, &limits), Ok(Some(frame.len())));
    }

    #[test]
    fn parse_gives_back_the_value(v in value()) {
        let frame = encode(&v);
        let parsed = Value::parse(&frame, &Limits::default());
        prop_assert_eq!(parsed, Ok(Some((v.clone(), frame.len()))));
    }

    #[test]
    fn scanner_resumes_across_random_chunks(
        vs in proptest::collection::vec(value(), 1..4),
        sizes in proptest::collection::vec(1usize..24, 1..10),
    ) {
        let frames: Vec<Bytes> = vs.iter().map(encode).collect();
        let wire: Vec<u8> = frames.iter().flat_map(|f| f.to_vec()).collect();
        let mut scanner = ReplyScanner::new(Limits::default());
        let mut buf: Vec<u8> = Vec::new();
        let mut got = Vec::new();
        let mut rest = &wire[..];
        for &size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (head, tail) = rest.split_at(size.min(rest.len()));
            rest = tail;
            buf.extend_from_slice(head);
            while let Some(n) = scanner.scan(&buf).map_err(|e| TestCaseError::fail(e.to_string()))? {
                got.push(buf.drain(..n).collect::<Vec<u8>>());
            }
        }
        let want: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
        prop_assert_eq!(got, want);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn scanner_and_parser_agree_on_damaged_frames(
        v in value(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
        small in any::<bool>(),
    ) {
        let mut wire = encode(&v).to_vec();
        for (at, byte) in edits {
            if !wire.is_empty() {
                let i = at.index(wire.len());
                wire[i] = byte;
            }
        }
        let len = cut.index(wire.len() + 1);
        let wire = Bytes::copy_from_slice(&wire[..len]);
        let limits = if small {
            Limits { max_bulk_len: 8, max_array_len: 3, max_inline_len: 8, max_depth: 2 }
        } else {
            Limits::default()
        };
        let scanned = scan_reply(&wire, &limits);
        let parsed = Value::parse(&wire, &limits).map(|o| o.map(|(_, n)| n));
        prop_assert_eq!(scanned, parsed);
        let mut scanner = ReplyScanner::new(limits);
        prop_assert_eq!(scanner.scan(&wire), scanned);
    }
}

#[test]
fn limit_headers_are_refused_without_their_data() {
    use orthrus_resp::ProtocolError;
    let limits = Limits::default();
    assert_eq!(
        scan_reply(b"$999999999999\r\n", &limits),
        Err(ProtocolError::InvalidBulkLength)
    );
    assert_eq!(
        scan_reply(b"*99999999999\r\n", &limits),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    assert_eq!(
        scan_reply(b"%99999999999\r\n", &limits),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    let nan = encode(&Value::Double(f64::NAN));
    assert_eq!(&nan[..], b",nan\r\n");
    assert!(matches!(Value::parse(&nan, &limits), Ok(Some((Value::Double(f), 6))) if f.is_nan()));
}
