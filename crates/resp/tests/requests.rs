//! Property tests for request parsing: multibulk pipelines cut at every
//! byte and in random chunks, inline lines, and chunking invariance on
//! arbitrary protocol-looking bytes.

use bytes::BytesMut;
use orthrus_resp::{Limits, ProtocolError, Request, RequestParser};
use proptest::prelude::*;

type Args = Vec<Vec<u8>>;

/// Any bytes, CR, LF and empty arguments included.
fn arg() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..24),
        proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'$'), Just(b'*')],
            0..6
        ),
    ]
}

fn request() -> impl Strategy<Value = Args> {
    proptest::collection::vec(arg(), 1..7)
}

fn pipeline() -> impl Strategy<Value = Vec<Args>> {
    proptest::collection::vec(request(), 1..6)
}

fn encode(args: &Args) -> Vec<u8> {
    Request::from_args(args).frame().to_vec()
}

/// Feeds `wire` in the given pieces; returns the requests and any error.
fn feed<'a>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
    limits: &Limits,
) -> (Vec<Request>, Option<ProtocolError>) {
    let mut parser = RequestParser::new(limits.clone());
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match parser.parse(&mut buf) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fn check(requests: &[Request], want: &[Args], frames: &[Vec<u8>]) -> Result<(), TestCaseError> {
    prop_assert_eq!(requests.len(), want.len());
    for ((r, args), frame) in requests.iter().zip(want).zip(frames) {
        prop_assert_eq!(&r.frame()[..], &frame[..]);
        prop_assert_eq!(r.arg_count(), args.len());
        prop_assert_eq!(r.args().map(<[u8]>::to_vec).collect::<Args>(), args.clone());
        for (i, a) in args.iter().enumerate() {
            prop_assert_eq!(r.arg(i), Some(&a[..]));
            let bytes = r.arg_bytes(i);
            prop_assert_eq!(bytes.as_deref(), Some(&a[..]));
        }
        prop_assert!(!r.is_inline());
    }
    Ok(())
}

/// Splits `wire` into chunks of the given sizes (cycled).
fn chunks<'a>(wire: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = wire;
    for &size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (head, tail) = rest.split_at(size.clamp(1, rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

proptest! {
    #[test]
    fn pipelines_cut_at_every_byte(reqs in pipeline()) {
        let frames: Vec<Vec<u8>> = reqs.iter().map(encode).collect();
        let wire = frames.concat();
        let limits = Limits::default();
        for cut in 0..=wire.len() {
            let (got, err) = feed([&wire[..cut], &wire[cut..]], &limits);
            prop_assert_eq!(err, None);
            check(&got, &reqs, &frames)?;
        }
    }

    #[test]
    fn pipelines_in_random_chunks(
        reqs in pipeline(),
        sizes in proptest::collection::vec(1usize..40, 1..20),
    ) {
        let frames: Vec<Vec<u8>> = reqs.iter().map(encode).collect();
        let wire = frames.concat();
        let (got, err) = feed(chunks(&wire, &sizes), &Limits::default());
        prop_assert_eq!(err, None);
        check(&got, &reqs, &frames)?;
        // One byte at a time, the worst case for resumption.
        let (got, err) = feed(wire.chunks(1), &Limits::default());
        prop_assert_eq!(err, None);
        check(&got, &reqs, &frames)?;
    }

    #[test]
    fn inline_lines_round_trip(
        lines in proptest::collection::vec(inline_line(), 1..5),
        sizes in proptest::collection::vec(1usize..20, 1..10),
    ) {
        let wire: Vec<u8> = lines.iter().flat_map(|(text, _)| text.clone()).collect();
        let (got, err) = feed(chunks(&wire, &sizes), &Limits::default());
        prop_assert_eq!(err, None);
        let want: Vec<&Args> = lines.iter().map(|(_, args)| args).collect();
        prop_assert_eq!(got.len(), want.len());
        for (r, args) in got.iter().zip(want) {
            prop_assert!(r.is_inline());
            prop_assert_eq!(&r.args().map(<[u8]>::to_vec).collect::<Args>(), args);
            // The frame is a multibulk encoding of the same arguments.
            prop_assert_eq!(&r.frame()[..], &encode(args)[..]);
        }
    }

    /// Whatever the bytes, how they are cut never changes the outcome.
    #[test]
    fn chunking_never_changes_the_outcome(
        wire in proptest::collection::vec(protocol_byte(), 0..200),
        sizes in proptest::collection::vec(1usize..16, 1..10),
        small in any::<bool>(),
    ) {
        let limits = if small {
            Limits { max_bulk_len: 8, max_array_len: 4, max_inline_len: 12, max_depth: 4 }
        } else {
            Limits::default()
        };
        let whole = feed([&wire[..]], &limits);
        let cut = feed(chunks(&wire, &sizes), &limits);
        prop_assert_eq!(&whole, &cut);
        // Whatever was parsed re-parses to the same arguments (with the
        // default limits: an inline word may be longer than a small
        // max_bulk_len, as in Redis, where only the line is limited).
        for r in &whole.0 {
            let (again, err) = feed([&r.frame()[..]], &Limits::default());
            prop_assert_eq!(err, None);
            prop_assert_eq!(again.len(), 1);
            prop_assert!(again[0].args().eq(r.args()));
        }
    }
}

/// Bytes that make up requests, plus any byte now and then.
fn protocol_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => prop::sample::select(&b"*$\r\n0123456789-abc \"'\\x"[..]),
        1 => any::<u8>(),
    ]
}

const BLANKS: &[&[u8]] = &[b" ", b"  ", b"\t", b" \t "];

/// One inline line and the arguments it must give.
fn inline_line() -> impl Strategy<Value = (Vec<u8>, Args)> {
    let word = prop_oneof![safe_token(), double_quoted(), single_quoted()];
    (
        proptest::collection::vec(word, 1..6),
        proptest::collection::vec(prop::sample::select(BLANKS), 6),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(words, blanks, crlf, leading)| {
            let mut line = Vec::new();
            if leading {
                line.extend_from_slice(b"  ");
            }
            let mut args = Vec::new();
            for (i, (text, arg)) in words.into_iter().enumerate() {
                if i > 0 {
                    line.extend_from_slice(blanks[i % blanks.len()]);
                }
                line.extend_from_slice(&text);
                args.push(arg);
            }
            line.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            (line, args)
        })
}

/// A bare word: no blanks, quotes or backslashes, and no leading `*`
/// (which would make the line multibulk).
fn safe_token() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    proptest::collection::vec(
        prop::sample::select(&b"abcXYZ019-_:{}.,;!?@#%&*+/=<>[]()~^$|"[..]),
        1..12,
    )
    .prop_filter("not multibulk", |w| w.first() != Some(&b'*'))
    .prop_map(|w| (w.clone(), w))
}

/// Any bytes, written in double quotes with escapes.
fn double_quoted() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    proptest::collection::vec(any::<u8>(), 0..12).prop_map(|raw| {
        let mut text = vec![b'"'];
        for &b in &raw {
            match b {
                b'"' => text.extend_from_slice(b"\\\""),
                b'\\' => text.extend_from_slice(b"\\\\"),
                b'\n' => text.extend_from_slice(b"\\n"),
                b'\r' => text.extend_from_slice(b"\\r"),
                b'\t' => text.extend_from_slice(b"\\t"),
                0x07 => text.extend_from_slice(b"\\a"),
                0x08 => text.extend_from_slice(b"\\b"),
                b' '..=b'~' => text.push(b),
                _ => text.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            }
        }
        text.push(b'"');
        (text, raw)
    })
}

/// Bytes without newline or backslash, in single quotes (`\'` for a quote).
fn single_quoted() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    proptest::collection::vec(
        any::<u8>().prop_filter("no LF or backslash", |b| *b != b'\n' && *b != b'\\'),
        0..12,
    )
    .prop_map(|raw| {
        let mut text = vec![b'\''];
        for &b in &raw {
            if b == b'\'' {
                text.extend_from_slice(b"\\'");
            } else {
                text.push(b);
            }
        }
        text.push(b'\'');
        (text, raw)
    })
}

#[test]
fn limit_headers_are_refused_without_their_data() {
    let limits = Limits::default();
    for (wire, err) in [
        (
            &b"*1\r\n$999999999999\r\n"[..],
            ProtocolError::InvalidBulkLength,
        ),
        (b"*99999999999\r\n", ProtocolError::InvalidMultibulkLength),
        (b"*2000000\r\n", ProtocolError::InvalidMultibulkLength),
        (b"*1\r\n$536870913\r\n", ProtocolError::InvalidBulkLength),
    ] {
        assert_eq!(
            feed([wire], &limits),
            (vec![], Some(err)),
            "{}",
            wire.escape_ascii()
        );
    }
    let long = vec![b'a'; limits.max_inline_len + 1];
    assert_eq!(
        feed([&long[..]], &limits),
        (vec![], Some(ProtocolError::TooBigInlineRequest))
    );
}
