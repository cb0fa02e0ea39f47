use super::*;
use ProtocolError as E;

fn scan(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    scan_reply(buf, &Limits::default())
}

/// Checks that `frame` scans to its full length, that every prefix asks for
/// more, and that bytes after it are not counted.
fn assert_frame(frame: &[u8]) {
    assert_eq!(
        scan(frame),
        Ok(Some(frame.len())),
        "{}",
        frame.escape_ascii()
    );
    for cut in 0..frame.len() {
        assert_eq!(
            scan(&frame[..cut]),
            Ok(None),
            "{} cut at {cut}",
            frame.escape_ascii()
        );
    }
    let mut more = frame.to_vec();
    more.extend_from_slice(b"+NEXT\r\n");
    assert_eq!(scan(&more), Ok(Some(frame.len())));
}

#[test]
fn every_type() {
    for frame in [
        &b"+OK\r\n"[..],
        b"+\r\n",
        b"-ERR unknown command\r\n",
        b":0\r\n",
        b":-9223372036854775808\r\n",
        b"$5\r\nhello\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*3\r\n:1\r\n$1\r\na\r\n+b\r\n",
        b"_\r\n",
        b"#t\r\n",
        b",3.14\r\n",
        b",-inf\r\n",
        b"(3492890328409238509324850943850943825024385\r\n",
        b"!21\r\nSYNTAX invalid syntax\r\n",
        b"=15\r\ntxt:Some string\r\n",
        b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n",
        b"~2\r\n+a\r\n+b\r\n",
        b">3\r\n+message\r\n+chan\r\n$2\r\nhi\r\n",
        b"%0\r\n",
        b"~0\r\n",
    ] {
        assert_frame(frame);
    }
}

#[test]
fn nested_aggregates() {
    assert_frame(b"*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n%1\r\n+k\r\n~1\r\n_\r\n");
    assert_frame(b"*3\r\n*0\r\n*-1\r\n$-1\r\n");
    assert_frame(b"*1\r\n*1\r\n*1\r\n*1\r\n*0\r\n");
}

#[test]
fn attribute_travels_with_its_element() {
    // Top level: the attribute and the reply it annotates are one frame.
    assert_frame(b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.19\r\n$1\r\nb\r\n,0.05\r\n*2\r\n:2039123\r\n:9543892\r\n");
    // Inside an aggregate it does not count as an element.
    assert_frame(b"*2\r\n:1\r\n|1\r\n+ttl\r\n:3600\r\n:2\r\n");
    // Empty and back-to-back attributes.
    assert_frame(b"|0\r\n+OK\r\n");
    assert_frame(b"|1\r\n+a\r\n+b\r\n|0\r\n:1\r\n");
    // An attribute inside an attribute.
    assert_frame(b"|1\r\n|1\r\n+x\r\n+y\r\n+k\r\n+v\r\n+OK\r\n");
    // An attribute alone is not a frame.
    assert_eq!(scan(b"|1\r\n+a\r\n+b\r\n"), Ok(None));
}

#[test]
fn depth_limit() {
    let limits = Limits {
        max_depth: 3,
        ..Limits::default()
    };
    assert_eq!(
        scan_reply(b"*1\r\n*1\r\n*1\r\n:1\r\n", &limits),
        Ok(Some(16))
    );
    assert_eq!(scan_reply(b"*1\r\n*1\r\n*0\r\n", &limits), Ok(Some(12)));
    assert_eq!(
        scan_reply(b"*1\r\n*1\r\n*1\r\n*0\r\n", &limits),
        Err(E::TooDeep)
    );
    // Attributes count as a level.
    assert_eq!(
        scan_reply(b"*1\r\n*1\r\n*1\r\n|0\r\n:1\r\n", &limits),
        Err(E::TooDeep)
    );
    // Depth is the number of open levels, not of aggregates seen.
    assert_eq!(
        scan_reply(b"*3\r\n*1\r\n*1\r\n:1\r\n*1\r\n*0\r\n*0\r\n", &limits),
        Ok(Some(28))
    );
    assert_eq!(
        E::TooDeep.to_string(),
        "Protocol error: reply nesting too deep"
    );
}

#[test]
fn deep_nesting_spills_past_the_inline_levels() {
    let depth = 100;
    let mut frame = b"*1\r\n".repeat(depth);
    frame.extend_from_slice(b":7\r\n");
    assert_frame(&frame);
    let mut deeper = b"*1\r\n".repeat(129);
    deeper.extend_from_slice(b":7\r\n");
    assert_eq!(scan(&deeper), Err(E::TooDeep));
}

#[test]
fn hostile_nesting_does_not_overflow_the_stack() {
    let limits = Limits {
        max_depth: usize::MAX,
        ..Limits::default()
    };
    let frame = b"*1\r\n".repeat(200_000);
    assert_eq!(scan_reply(&frame, &limits), Ok(None));
}

#[test]
fn errors() {
    for (frame, err) in [
        (&b"@\r\n"[..], E::InvalidReplyType(b'@')),
        (b"+a\rb\r\n", E::InvalidReply),
        (b"*1\r\n$3\r\nabcd", E::InvalidReply),
        (b"*1\r\n@", E::InvalidReplyType(b'@')),
        (b"*?\r\n", E::StreamedReply),
        (b"*1048577\r\n", E::InvalidMultibulkLength),
        (b"%1048577\r\n", E::InvalidMultibulkLength),
        (b"$536870913\r\n", E::InvalidBulkLength),
    ] {
        assert_eq!(scan(frame), Err(err), "{}", frame.escape_ascii());
    }
    assert_eq!(
        E::InvalidReplyType(b'@').to_string(),
        "Protocol error: invalid reply type byte '@'"
    );
    assert_eq!(E::InvalidReply.to_string(), "Protocol error: invalid reply");
    assert_eq!(
        E::StreamedReply.to_string(),
        "Protocol error: streamed replies are not supported"
    );
}

#[test]
fn reply_limits_allow_big_aggregates() {
    let limits = Limits::for_replies();
    assert_eq!(scan_reply(b"*4000000\r\n", &limits), Ok(None));
    assert_eq!(
        scan_reply(b"*4294967296\r\n", &limits),
        Err(E::InvalidMultibulkLength)
    );
}

#[test]
fn reply_limits_allow_any_depth() {
    // 10,000 nested one-element arrays around an integer: deeper than any
    // client request may be, and a legitimate node reply.
    let depth = 10_000;
    let mut frame = b"*1\r\n".repeat(depth);
    frame.extend_from_slice(b":1\r\n");
    let limits = Limits::for_replies();
    assert_eq!(scan_reply(&frame, &limits), Ok(Some(frame.len())));
    assert_eq!(scan_reply(&frame[..frame.len() - 1], &limits), Ok(None));
    let mut scanner = ReplyScanner::default();
    let head = &frame[..frame.len() / 2];
    assert_eq!(scanner.scan(head), Ok(None));
    assert_eq!(scanner.scan(&frame), Ok(Some(frame.len())));
    // Request-side limits still refuse it.
    assert!(scan_reply(&frame, &Limits::default()).is_err());
}

#[test]
fn classify_by_first_bytes() {
    for (frame, class) in [
        (&b"+OK\r\n"[..], ReplyClass::Normal),
        (b"$5\r\n-MOVE\r\n", ReplyClass::Normal),
        (b"", ReplyClass::Normal),
        (b"-ERR wrong\r\n", ReplyClass::Error),
        (b"-MOVED 3999 127.0.0.1:6381\r\n", ReplyClass::Moved),
        (b"-MOVEDX\r\n", ReplyClass::Error),
        (b"-ASK 3999 127.0.0.1:6381\r\n", ReplyClass::Ask),
        (b"-ASKING\r\n", ReplyClass::Error),
        (
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            ReplyClass::TryAgain,
        ),
        (b"-TRYAGAIN\r\n", ReplyClass::TryAgain),
        (b"-TRYAGAINX\r\n", ReplyClass::Error),
        (
            b"-CLUSTERDOWN The cluster is down\r\n",
            ReplyClass::ClusterDown,
        ),
        (b"!9\r\nMOVED 1 x\r\n", ReplyClass::Moved),
        (b"!3\r\nERR\r\n", ReplyClass::Error),
    ] {
        assert_eq!(classify(frame), class, "{}", frame.escape_ascii());
    }
}

#[test]
fn scanner_resumes_and_matches_scan_reply() {
    let frame = b"*3\r\n$5\r\nhello\r\n*2\r\n:1\r\n:2\r\n|1\r\n+a\r\n+b\r\n%1\r\n+k\r\n+v\r\n";
    let mut stream = frame.to_vec();
    stream.extend_from_slice(b"+OK\r\n");
    let mut scanner = ReplyScanner::default();
    for end in 0..frame.len() {
        assert_eq!(scanner.scan(&stream[..end]), Ok(None), "at {end}");
    }
    assert_eq!(scanner.scan(&stream), Ok(Some(frame.len())));
    // Starts afresh on the next frame.
    assert_eq!(scanner.scan(&stream[frame.len()..]), Ok(Some(5)));
}

#[test]
fn scanner_walks_a_big_reply_once() {
    let n = 1000;
    let mut frame = format!("*{n}\r\n").into_bytes();
    for i in 0..n {
        frame.extend_from_slice(format!(":{i}\r\n").as_bytes());
    }
    let mut scanner = ReplyScanner::new(Limits::default());
    let half = frame.len() / 2;
    assert_eq!(scanner.scan(&frame[..half]), Ok(None));
    assert!(
        scanner.cur.pos > half - 8,
        "kept position {}",
        scanner.cur.pos
    );
    assert_eq!(scanner.levels.len(), 1);
    assert_eq!(scanner.scan(&frame), Ok(Some(frame.len())));
    assert_eq!(scanner.levels.len(), 0);
}

#[test]
fn scanner_resets_after_an_error_or_a_shrunk_buffer() {
    let mut scanner = ReplyScanner::default();
    assert_eq!(scanner.scan(b"*2\r\n:1\r\n"), Ok(None));
    assert_eq!(scanner.scan(b"+OK\r\n"), Ok(Some(5)));
    assert_eq!(scanner.scan(b"*1\r\n@"), Err(E::InvalidReplyType(b'@')));
    assert_eq!(scanner.scan(b":1\r\n"), Ok(Some(4)));
    scanner.set_limits(Limits {
        max_depth: 0,
        ..Limits::default()
    });
    assert_eq!(scanner.limits().max_depth, 0);
    assert_eq!(scanner.scan(b"*0\r\n"), Err(E::TooDeep));
}

#[test]
fn long_simple_lines_resume_their_search() {
    let mut scanner = ReplyScanner::default();
    let mut line = b"+".to_vec();
    line.extend(std::iter::repeat_n(b'x', 10_000));
    assert_eq!(scanner.scan(&line), Ok(None));
    assert_eq!(scanner.cur.line_scan, line.len());
    line.extend_from_slice(b"\r\n");
    assert_eq!(scanner.scan(&line), Ok(Some(line.len())));
}

/// Bytes of reply lines plus a little payload, for random damage.
const REPLY_BYTES: &[u8] = b"+-:$*0123456789-\r\n\r\nab";

fn reply_wire() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let scalar = prop_oneof![
        "[a-zA-Z ]{0,20}".prop_map(|s| format!("+{s}\r\n")),
        "[A-Z]{1,8} [a-z ]{0,12}".prop_map(|s| format!("-{s}\r\n")),
        any::<i64>().prop_map(|n| format!(":{n}\r\n")),
        "[a-z]{0,20}".prop_map(|s| format!("${}\r\n{s}\r\n", s.len())),
        Just("$-1\r\n".to_string()),
        Just("_\r\n".to_string()),
    ];
    let array = proptest::collection::vec(scalar.clone(), 0..6)
        .prop_map(|items| format!("*{}\r\n{}", items.len(), items.concat()));
    let reply = prop_oneof![
        scalar,
        array,
        Just("*2\r\n*1\r\n:1\r\n+OK\r\n".to_string()),
        Just("*-1\r\n".to_string()),
        Just("%1\r\n+a\r\n:1\r\n".to_string()),
    ];
    crate::damaged::damaged(reply.prop_map(String::into_bytes), REPLY_BYTES, 24)
}

proptest::proptest! {
    /// Whatever the one-pass reading of a flat reply accepts, the general
    /// walk measures the same.
    #[test]
    fn one_pass_and_general_walk_agree(
        input in reply_wire(),
        max_bulk_len in 0usize..24,
        max_array_len in 0usize..6,
        max_depth in 0usize..3,
    ) {
        let small = Limits { max_bulk_len, max_array_len, max_depth, ..Limits::for_replies() };
        for limits in [Limits::for_replies(), small] {
            if let Some(len) = flat_reply_len(&input, &limits) {
                proptest::prop_assert_eq!(scan_stepwise(&input, &limits), Ok(Some(len)));
                // A scanner that saw the first half before: it resumes.
                let mut scanner = ReplyScanner::new(limits);
                proptest::prop_assert_eq!(scanner.scan(&input[..len / 2]), Ok(None));
                proptest::prop_assert_eq!(scanner.scan(&input), Ok(Some(len)));
            }
        }
    }
}

#[test]
fn one_pass_reads_the_common_replies() {
    let limits = Limits::for_replies();
    for (reply, len) in [
        (&b"+OK\r\nrest"[..], 5),
        (b"-ERR no\r\n", 9),
        (b":-12\r\n", 6),
        (b"$3\r\nabc\r\n+", 9),
        (b"$0\r\n\r\n", 6),
        (b"$-1\r\n", 5),
        (b"*0\r\n", 4),
        (b"*3\r\n$1\r\na\r\n$-1\r\n:7\r\nrest", 20),
    ] {
        assert_eq!(
            flat_reply_len(reply, &limits),
            Some(len),
            "{}",
            reply.escape_ascii()
        );
    }
    for left in [
        &b"*1\r\n*0\r\n"[..],
        b"*2\r\n:1\r\n",
        b"*-1\r\n",
        b"$3\r\nab",
        b"+OK\r",
        b":1x\r\n",
        b"$03\r\nabc\r\n",
        b"_\r\n",
    ] {
        assert_eq!(
            flat_reply_len(left, &limits),
            None,
            "{}",
            left.escape_ascii()
        );
    }
}

#[test]
fn array_headers_and_integers_are_read_as_the_token_reader_reads_them() {
    assert_eq!(array_header(b"*3\r\n$1\r\na\r\n"), Some((3, 4)));
    assert_eq!(array_header(b"~0\r\n"), Some((0, 4)));
    assert_eq!(array_header(b"*12\r\n"), Some((12, 5)));
    for other in [
        &b"*-1\r\n"[..],
        b"*2\r",
        b"*2\rx",
        b"*x\r\n",
        b"*01\r\n",
        b":1\r\n",
        b"*",
        b"",
    ] {
        assert_eq!(array_header(other), None, "{other:?}");
    }
    assert_eq!(integer_reply(b":42\r\n"), Some(42));
    assert_eq!(integer_reply(b":-7\r\n"), Some(-7));
    for other in [&b":\r\n"[..], b":5", b":5\r\n:6\r\n", b":-0\r\n", b"+5\r\n"] {
        assert_eq!(integer_reply(other), None, "{other:?}");
    }
}
