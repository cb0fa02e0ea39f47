use super::*;
use ProtocolError as E;

fn parser() -> RequestParser {
    RequestParser::new(Limits::default())
}

/// Parses everything in `input` at once.
fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
    let mut p = parser();
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some(r) = p.parse(&mut buf)? {
        out.push(r.args().map(<[u8]>::to_vec).collect());
    }
    Ok(out)
}

fn args(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

#[test]
fn multibulk_frame_is_the_received_bytes_uncopied() {
    let wire = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n";
    let mut buf = BytesMut::from(&wire[..]);
    let start = buf.as_ptr();
    let mut p = parser();
    let first = p.parse(&mut buf).ok().flatten();
    let first = first.unwrap_or_else(|| panic!("no request"));
    assert_eq!(&first.frame()[..], &wire[..31]);
    assert_eq!(
        first.frame().as_ptr(),
        start,
        "frame must share the read buffer"
    );
    assert_eq!(
        first.args().collect::<Vec<_>>(),
        [&b"SET"[..], b"k", b"hello"]
    );
    assert_eq!(
        first.arg_bytes(2).map(|b| b.as_ptr()),
        Some(start.wrapping_add(24))
    );
    assert!(!first.is_inline());
    let second = p.parse(&mut buf).ok().flatten();
    assert_eq!(second.as_ref().and_then(|r| r.arg(0)), Some(&b"PING"[..]));
    assert!(buf.is_empty());
    assert_eq!(p.parse(&mut buf), Ok(None));
}

#[test]
fn binary_safe_arguments() {
    let wire = b"*2\r\n$3\r\n\r\n\0\r\n$0\r\n\r\n";
    assert_eq!(
        parse_all(wire),
        Ok(vec![vec![b"\r\n\0".to_vec(), Vec::new()]])
    );
}

#[test]
fn every_split_point_waits_then_parses() {
    let wire = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\nPING\r\n*0\r\n\r\n*1\r\n$4\r\nQUIT\r\n";
    let want = vec![args(&["GET", "key"]), args(&["PING"]), args(&["QUIT"])];
    for cut in 0..=wire.len() {
        let mut p = parser();
        let mut buf = BytesMut::from(&wire[..cut]);
        let mut got = Vec::new();
        while let Some(r) = p
            .parse(&mut buf)
            .unwrap_or_else(|e| panic!("cut {cut}: {e}"))
        {
            got.push(r.args().map(<[u8]>::to_vec).collect::<Vec<_>>());
        }
        buf.extend_from_slice(&wire[cut..]);
        while let Some(r) = p
            .parse(&mut buf)
            .unwrap_or_else(|e| panic!("cut {cut}: {e}"))
        {
            got.push(r.args().map(<[u8]>::to_vec).collect());
        }
        assert_eq!(got, want, "cut at {cut}");
        assert!(buf.is_empty());
    }
}

#[test]
fn empty_multibulks_are_skipped() {
    assert_eq!(parse_all(b"*0\r\n*-1\r\n*-100\r\n"), Ok(vec![]));
    assert_eq!(
        parse_all(b"*0\r\n*1\r\n$1\r\na\r\n"),
        Ok(vec![args(&["a"])])
    );
    // string2ll refuses "-0".
    assert_eq!(parse_all(b"*-0\r\n"), Err(E::InvalidMultibulkLength));
}

#[test]
fn inline_requests() {
    assert_eq!(parse_all(b"PING\r\n"), Ok(vec![args(&["PING"])]));
    assert_eq!(parse_all(b"SET a b\n"), Ok(vec![args(&["SET", "a", "b"])]));
    assert_eq!(
        parse_all(b"\r\n\n   \r\nSET \"a b\" 'c'\r\nGET x\r\n"),
        Ok(vec![args(&["SET", "a b", "c"]), args(&["GET", "x"])])
    );
    let mut p = parser();
    let mut buf = BytesMut::from(&b"GET \"x\\r\"\r\n"[..]);
    let r = p.parse(&mut buf).ok().flatten();
    let r = r.unwrap_or_else(|| panic!("no request"));
    assert!(r.is_inline());
    assert_eq!(&r.frame()[..], b"*2\r\n$3\r\nGET\r\n$2\r\nx\r\r\n");
}

#[test]
fn blank_inline_lines_are_consumed_even_when_nothing_follows() {
    let mut p = parser();
    let mut buf = BytesMut::from(&b"\r\n\r\n*1\r\n$4\r\nPI"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    assert_eq!(&buf[..], b"*1\r\n$4\r\nPI");
}

#[test]
fn invalid_multibulk_length() {
    for wire in [
        &b"*abc\r\n"[..],
        b"*\r\n",
        b"*1x\r\n",
        b"*01\r\n",
        b"*+1\r\n",
        b"*2147483648\r\n",
        b"*99999999999\r\n",
        b"*99999999999999999999999\r\n",
        b"*3\rX",
    ] {
        assert_eq!(
            parse_all(wire),
            Err(E::InvalidMultibulkLength),
            "{}",
            wire.escape_ascii()
        );
    }
}

#[test]
fn multibulk_count_over_the_limit_is_refused_at_once() {
    let mut p = RequestParser::new(Limits {
        max_array_len: 3,
        ..Limits::default()
    });
    let mut buf = BytesMut::from(&b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n*4\r\n"[..]);
    assert!(matches!(p.parse(&mut buf), Ok(Some(_))));
    assert_eq!(p.parse(&mut buf), Err(E::InvalidMultibulkLength));
    // The default limit: a million, not Redis's INT_MAX.
    assert_eq!(parse_all(b"*1048577\r\n"), Err(E::InvalidMultibulkLength));
    assert_eq!(parse_all(b"*1048576\r\n"), Ok(vec![]));
}

#[test]
fn invalid_bulk_length() {
    for wire in [
        &b"*1\r\n$-1\r\n"[..],
        b"*1\r\n$abc\r\n",
        b"*1\r\n$\r\n",
        b"*1\r\n$01\r\n",
        b"*1\r\n$536870913\r\n",
        b"*1\r\n$999999999999\r\n",
        b"*1\r\n$99999999999999999999999\r\n",
        b"*1\r\n$3\rXfoo\r\n",
    ] {
        assert_eq!(
            parse_all(wire),
            Err(E::InvalidBulkLength),
            "{}",
            wire.escape_ascii()
        );
    }
    // Exactly the limit is fine (and waits for the data).
    assert_eq!(parse_all(b"*1\r\n$536870912\r\n"), Ok(vec![]));
}

#[test]
fn bulk_limit_follows_set_limits() {
    let mut p = parser();
    let mut buf = BytesMut::from(&b"*2\r\n$1\r\na\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    p.set_limits(Limits {
        max_bulk_len: 4,
        ..Limits::default()
    });
    assert_eq!(p.limits().max_bulk_len, 4);
    buf.extend_from_slice(b"$5\r\n");
    assert_eq!(p.parse(&mut buf), Err(E::InvalidBulkLength));
}

#[test]
fn expected_dollar() {
    assert_eq!(parse_all(b"*1\r\n:1\r\n"), Err(E::ExpectedDollar(b':')));
    // Decided by the first byte, without waiting for the line.
    assert_eq!(
        parse_all(b"*2\r\n$1\r\na\r\nx"),
        Err(E::ExpectedDollar(b'x'))
    );
    assert_eq!(
        E::ExpectedDollar(b'x').to_string(),
        "Protocol error: expected '$', got 'x'"
    );
}

#[test]
fn expected_crlf_after_bulk() {
    assert_eq!(parse_all(b"*1\r\n$3\r\nfooXY"), Err(E::ExpectedCrlf));
    // Decided as soon as the first wrong byte is there.
    assert_eq!(parse_all(b"*1\r\n$3\r\nfooX"), Err(E::ExpectedCrlf));
    assert_eq!(parse_all(b"*1\r\n$3\r\nfoo\rX"), Err(E::ExpectedCrlf));
    assert_eq!(parse_all(b"*1\r\n$3\r\nfoo\r"), Ok(vec![]));
}

#[test]
fn unbalanced_quotes() {
    assert_eq!(parse_all(b"SET \"a b\r\n"), Err(E::UnbalancedQuotes));
    assert_eq!(parse_all(b"SET 'a'b\r\n"), Err(E::UnbalancedQuotes));
}

#[test]
fn too_big_inline_request() {
    let limits = Limits {
        max_inline_len: 16,
        ..Limits::default()
    };
    // No newline yet, more than the limit buffered.
    let mut p = RequestParser::new(limits.clone());
    let mut buf = BytesMut::from(&[b'a'; 17][..]);
    assert_eq!(p.parse(&mut buf), Err(E::TooBigInlineRequest));
    // Exactly the limit, with or without its CR, still waits.
    for wire in [&[b'a'; 16][..], b"aaaaaaaaaaaaaaaa\r"] {
        let mut p = RequestParser::new(limits.clone());
        let mut buf = BytesMut::from(wire);
        assert_eq!(p.parse(&mut buf), Ok(None));
    }
    // A complete line over the limit is refused too, whatever the reads.
    let mut p = RequestParser::new(limits);
    let mut buf = BytesMut::from(&b"aaaaaaaaaaaaaaaaa\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Err(E::TooBigInlineRequest));
    // The default is 64 KiB.
    let mut p = parser();
    let mut buf = BytesMut::from(&vec![b'x'; 64 * 1024][..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    buf.extend_from_slice(b"x");
    assert_eq!(p.parse(&mut buf), Err(E::TooBigInlineRequest));
}

#[test]
fn too_big_count_strings() {
    // Like Redis: more than 64 KiB from the `*` on, without a CR.
    let mut wire = b"*".to_vec();
    wire.extend(std::iter::repeat_n(b'1', 64 * 1024 - 1));
    let mut p = parser();
    let mut buf = BytesMut::from(&wire[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    buf.extend_from_slice(b"1");
    assert_eq!(p.parse(&mut buf), Err(E::TooBigMbulkCountString));

    let mut wire = b"*1\r\n$".to_vec();
    wire.extend(std::iter::repeat_n(b'1', 64 * 1024 - 1));
    let mut p = parser();
    let mut buf = BytesMut::from(&wire[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    buf.extend_from_slice(b"1");
    assert_eq!(p.parse(&mut buf), Err(E::TooBigBulkCountString));
}

#[test]
fn too_big_request_is_refused_before_the_data() {
    let mut p = RequestParser::new(Limits {
        max_bulk_len: usize::MAX,
        ..Limits::default()
    });
    // The data starts at 17: 17 + 4294967276 + 2 = u32::MAX.
    let mut buf = BytesMut::from(&b"*1\r\n$4294967276\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    let mut p = RequestParser::new(Limits {
        max_bulk_len: usize::MAX,
        ..Limits::default()
    });
    let mut buf = BytesMut::from(&b"*1\r\n$4294967277\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Err(E::TooBigRequest));
}

#[test]
fn big_bulk_is_not_rescanned() {
    let mut p = parser();
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nSET\r\n$1000000\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    let header_end = buf.len();
    let mb = p
        .multibulk
        .as_ref()
        .map(|mb| (mb.pos, mb.remaining, mb.bulk_len));
    assert_eq!(mb, Some((header_end, 1, Some(1_000_000))));
    for _ in 0..1000 {
        buf.extend_from_slice(&[b'v'; 1000]);
        assert_eq!(p.parse(&mut buf), Ok(None));
    }
    buf.extend_from_slice(b"\r\n");
    let r = p.parse(&mut buf).ok().flatten();
    assert_eq!(
        r.as_ref().and_then(|r| r.arg(1)).map(<[u8]>::len),
        Some(1_000_000)
    );
    assert!(p.multibulk.is_none());
}

#[test]
fn many_args_keep_their_progress() {
    let n = 10_000;
    let mut wire = format!("*{n}\r\n").into_bytes();
    for i in 0..n {
        let a = i.to_string();
        wire.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    let half = wire.len() / 2;
    let mut p = parser();
    let mut buf = BytesMut::from(&wire[..half]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    let read = p
        .multibulk
        .as_ref()
        .map_or(0, |mb| mb.args.as_slice().len());
    assert!(read > n / 3, "only {read} args kept");
    buf.extend_from_slice(&wire[half..]);
    let r = p.parse(&mut buf).ok().flatten();
    assert_eq!(r.as_ref().map(Request::arg_count), Some(n));
    assert_eq!(r.as_ref().and_then(|r| r.arg(9999)), Some(&b"9999"[..]));
}

#[test]
fn line_search_resumes() {
    let mut p = parser();
    let mut buf = BytesMut::from(&b"GET aaaa"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    assert_eq!(p.line_scan, 8);
    buf.extend_from_slice(b"\r\n");
    assert!(matches!(p.parse(&mut buf), Ok(Some(_))));
    assert_eq!(p.line_scan, 0);
}

#[test]
fn shrunk_buffer_resets_the_parser() {
    let mut p = parser();
    let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
    buf.clear();
    buf.extend_from_slice(b"PING\r\n");
    let r = p.parse(&mut buf).ok().flatten();
    assert_eq!(r.as_ref().and_then(|r| r.arg(0)), Some(&b"PING"[..]));
}

#[test]
fn small_requests_keep_args_inline() {
    let mut p = parser();
    let mut buf = BytesMut::from(&b"*8\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n"[..]);
    let r = p.parse(&mut buf).ok().flatten();
    assert_eq!(r.as_ref().map(Request::arg_count), Some(8));
    assert_eq!(r.as_ref().map(Request::args_spilled), Some(false));
    buf.extend_from_slice(b"*9\r\n");
    buf.extend_from_slice(&b"$1\r\na\r\n".repeat(9));
    let r = p.parse(&mut buf).ok().flatten();
    assert_eq!(r.as_ref().map(Request::args_spilled), Some(true));
}

/// Bytes that make up headers, plus a little payload: random strings of
/// these hit every branch of both paths (counts, lengths, zeros, signs,
/// misplaced line ends).
const WIRE_BYTES: &[u8] = b"*$0123456789-\r\n\r\nab";

fn wire() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let frame = proptest::collection::vec("[a-z]{0,12}", 1..11).prop_map(|words| {
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
        }
        out
    });
    crate::damaged::damaged(frame, WIRE_BYTES, 40)
}

proptest::proptest! {
    /// Whatever the one-pass reader accepts, the general path reads the
    /// same way: same request, same bytes left.
    #[test]
    fn one_pass_and_general_path_agree(
        input in wire(),
        max_inline_len in 1usize..12,
        max_array_len in 1usize..12,
        max_bulk_len in 0usize..14,
    ) {
        let limits = Limits { max_inline_len, max_array_len, max_bulk_len, ..Limits::default() };
        for limits in [Limits::default(), limits] {
            let mut fast = BytesMut::from(&input[..]);
            let Some(quick) = parse_whole(&mut fast, &limits, false) else {
                proptest::prop_assert_eq!(&fast[..], &input[..]);
                continue;
            };
            let mut slow = BytesMut::from(&input[..]);
            let general = RequestParser::new(limits).parse_stepwise(&mut slow);
            proptest::prop_assert_eq!(general, Ok(Some(quick)));
            proptest::prop_assert_eq!(&slow[..], &fast[..]);
        }
    }
}

#[test]
fn one_pass_reader_takes_the_common_case() {
    let wire = b"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000012345\r\nrest";
    let mut buf = BytesMut::from(&wire[..]);
    let r = parse_whole(&mut buf, &Limits::default(), false);
    assert_eq!(
        r.as_ref().and_then(|r| r.arg(1)),
        Some(&b"key:000000012345"[..])
    );
    assert_eq!(&buf[..], b"rest");
    for declined in [
        &b"*2\r\n$3\r\nGET\r\n$16\r\nkey:0000000"[..],
        b"*9\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n",
        b"*1\r\n$01\r\na\r\n",
        b"*1\r\n$1234567890\r\n",
        b"*0\r\n",
        b"PING\r\n",
    ] {
        let mut buf = BytesMut::from(declined);
        assert!(parse_whole(&mut buf, &Limits::default(), false).is_none());
        assert_eq!(&buf[..], declined);
    }
}

/// Parses `input` in one read, as a client that has not authenticated.
fn parse_unauthenticated(input: &[u8]) -> Result<Option<Vec<Vec<u8>>>, ProtocolError> {
    let mut p = parser();
    p.set_unauthenticated(true);
    let mut buf = BytesMut::from(input);
    Ok(p.parse(&mut buf)?
        .map(|r| r.args().map(<[u8]>::to_vec).collect()))
}

#[test]
fn before_auth_a_big_header_is_refused_before_its_body() {
    // The header alone decides: no byte of the 200 MiB body is waited for.
    assert_eq!(
        parse_unauthenticated(b"*2\r\n$3\r\nGET\r\n$209715210\r\n"),
        Err(E::UnauthenticatedBulkLength)
    );
    assert_eq!(
        parse_unauthenticated(b"*11\r\n"),
        Err(E::UnauthenticatedMultibulkLength)
    );
    // Redis's order: a count above INT_MAX is invalid from anyone.
    assert_eq!(
        parse_unauthenticated(b"*4294967296\r\n"),
        Err(E::InvalidMultibulkLength)
    );
    // At the limits, a request is read as usual (and answered NOAUTH).
    let at_limit = format!("*1\r\n${}\r\n{}\r\n", 16 * 1024, "a".repeat(16 * 1024));
    assert!(matches!(
        parse_unauthenticated(at_limit.as_bytes()),
        Ok(Some(_))
    ));
    let ten = format!("*10\r\n{}", "$1\r\na\r\n".repeat(10));
    assert!(matches!(parse_unauthenticated(ten.as_bytes()), Ok(Some(_))));
    let over = format!(
        "*1\r\n${}\r\n{}\r\n",
        16 * 1024 + 1,
        "a".repeat(16 * 1024 + 1)
    );
    assert_eq!(
        parse_unauthenticated(over.as_bytes()),
        Err(E::UnauthenticatedBulkLength)
    );
}

#[test]
fn before_auth_inline_requests_have_the_same_limits() {
    let eleven = format!("{}\r\n", ["a"; 11].join(" "));
    assert_eq!(
        parse_unauthenticated(eleven.as_bytes()),
        Err(E::UnauthenticatedMultibulkLength)
    );
    let long = "a".repeat(16 * 1024 + 1);
    assert_eq!(
        parse_unauthenticated(long.as_bytes()),
        Err(E::UnauthenticatedBulkLength)
    );
    assert!(matches!(parse_unauthenticated(b"AUTH pw\r\n"), Ok(Some(_))));
}

#[test]
fn after_auth_the_usual_limits_return() {
    let mut p = parser();
    p.set_unauthenticated(true);
    let mut buf = BytesMut::from(&b"*1\r\n$20000\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Err(E::UnauthenticatedBulkLength));
    let mut p = parser();
    p.set_unauthenticated(false);
    let mut buf = BytesMut::from(&b"*11\r\n$20000\r\n"[..]);
    assert_eq!(p.parse(&mut buf), Ok(None));
}

#[test]
fn awaiting_counts_an_incomplete_request_to_the_end_of_its_announced_argument() {
    let mut p = parser();
    assert_eq!(p.awaiting(), 0);
    let mut buf = BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000\r\nab"[..]);
    assert!(matches!(p.parse(&mut buf), Ok(None)));
    // 4 + 9 + 7 bytes of headers and arguments, the $1000 line (7), then
    // the value and its CRLF.
    assert_eq!(p.awaiting(), 4 + 9 + 7 + 7 + 1000 + 2);
    let mut rest = BytesMut::from(&buf[..]);
    rest.extend_from_slice(&vec![b'x'; 998]);
    rest.extend_from_slice(b"\r\n");
    assert!(matches!(p.parse(&mut rest), Ok(Some(_))));
    assert_eq!(p.awaiting(), 0);
}
