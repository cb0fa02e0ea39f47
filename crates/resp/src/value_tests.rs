use super::*;
use ProtocolError as E;

fn parse(wire: &[u8]) -> Result<Option<(Value, usize)>, ProtocolError> {
    Value::parse(&Bytes::copy_from_slice(wire), &Limits::default())
}

fn value(wire: &[u8]) -> Value {
    match parse(wire) {
        Ok(Some((v, n))) if n == wire.len() => v,
        other => panic!("{}: {other:?}", wire.escape_ascii()),
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn every_type() {
    assert_eq!(value(b"+OK\r\n"), Value::Simple(b("OK")));
    assert_eq!(value(b"-ERR x\r\n"), Value::Error(b("ERR x")));
    assert_eq!(value(b"!6\r\nERR\r\nx\r\n"), Value::Error(b("ERR\r\nx")));
    assert_eq!(value(b":-5\r\n"), Value::Integer(-5));
    assert_eq!(value(b"$3\r\na\r\n\r\n"), Value::Bulk(b("a\r\n")));
    assert_eq!(value(b"$-1\r\n"), Value::Null);
    assert_eq!(value(b"_\r\n"), Value::Null);
    assert_eq!(value(b"*-1\r\n"), Value::NullArray);
    assert_eq!(value(b"*0\r\n"), Value::Array(vec![]));
    assert_eq!(value(b",2.5\r\n"), Value::Double(2.5));
    assert_eq!(value(b"#f\r\n"), Value::Boolean(false));
    assert_eq!(
        value(b"(-12345678901234567890\r\n"),
        Value::BigNumber(b("-12345678901234567890"))
    );
    assert_eq!(
        value(b"=8\r\nmkd:# hi\r\n"),
        Value::Verbatim {
            format: *b"mkd",
            text: b("# hi")
        }
    );
    assert_eq!(
        value(b"*2\r\n:1\r\n~1\r\n>1\r\n+x\r\n"),
        Value::Array(vec![
            Value::Integer(1),
            Value::Set(vec![Value::Push(vec![Value::Simple(b("x"))])])
        ])
    );
    assert_eq!(
        value(b"%2\r\n+a\r\n:1\r\n+b\r\n%0\r\n"),
        Value::Map(vec![
            (Value::Simple(b("a")), Value::Integer(1)),
            (Value::Simple(b("b")), Value::Map(vec![]))
        ])
    );
}

#[test]
fn attributes_wrap_the_next_element() {
    let v = value(b"*2\r\n|1\r\n+ttl\r\n:10\r\n+a\r\n+b\r\n");
    assert_eq!(
        v,
        Value::Array(vec![
            Value::Attribute {
                attrs: vec![(Value::Simple(b("ttl")), Value::Integer(10))],
                value: Box::new(Value::Simple(b("a")))
            },
            Value::Simple(b("b"))
        ])
    );
    let v = value(b"|1\r\n+a\r\n+b\r\n|0\r\n:1\r\n");
    assert_eq!(
        v,
        Value::Attribute {
            attrs: vec![(Value::Simple(b("a")), Value::Simple(b("b")))],
            value: Box::new(Value::Attribute {
                attrs: vec![],
                value: Box::new(Value::Integer(1))
            })
        }
    );
    assert_eq!(v.as_int(), Some(1), "accessors look through attributes");
}

#[test]
fn strings_are_slices_of_the_frame() {
    let wire = Bytes::from_static(b"*2\r\n$3\r\nabc\r\n+de\r\n");
    let parsed = Value::parse(&wire, &Limits::default());
    let Ok(Some((Value::Array(items), 18))) = parsed else {
        panic!("{parsed:?}");
    };
    let ptrs: Vec<_> = items
        .iter()
        .filter_map(|v| v.as_bytes().map(<[u8]>::as_ptr))
        .collect();
    assert_eq!(
        ptrs,
        [
            wire.as_ptr().wrapping_add(8),
            wire.as_ptr().wrapping_add(14)
        ]
    );
}

#[test]
fn incomplete_and_malformed() {
    assert_eq!(parse(b"*2\r\n:1\r\n"), Ok(None));
    assert_eq!(parse(b""), Ok(None));
    assert_eq!(parse(b"*1\r\n&\r\n"), Err(E::InvalidReplyType(b'&')));
    let limits = Limits {
        max_depth: 2,
        ..Limits::default()
    };
    let wire = Bytes::from_static(b"*1\r\n*1\r\n*0\r\n");
    assert_eq!(Value::parse(&wire, &limits), Err(E::TooDeep));
}

#[test]
fn claimed_counts_do_not_reserve_memory() {
    // A million elements claimed, three bytes present: must not allocate
    // for the claim (this would take 64 MB per level otherwise).
    let wire = Bytes::from_static(b"*1000000\r\n*1000000\r\n:1\r\n");
    assert_eq!(Value::parse(&wire, &Limits::default()), Ok(None));
}

#[test]
fn accessors() {
    let bulk = Value::Bulk(b("42"));
    assert_eq!(bulk.as_bytes(), Some(&b"42"[..]));
    assert_eq!(bulk.as_str(), Some("42"));
    assert_eq!(bulk.as_int(), Some(42));
    assert_eq!(Value::Simple(b("-7")).as_int(), Some(-7));
    assert_eq!(Value::Simple(b("07")).as_int(), None);
    assert_eq!(Value::Bulk(Bytes::from_static(b"\xff")).as_str(), None);
    assert_eq!(Value::Integer(3).as_bytes(), None);
    assert_eq!(Value::BigNumber(b("123")).as_bytes(), Some(&b"123"[..]));
    let verbatim = Value::Verbatim {
        format: *b"txt",
        text: b("hi"),
    };
    assert_eq!(verbatim.as_str(), Some("hi"));
    assert_eq!(Value::Double(1.0).as_int(), None);
    let set = Value::Set(vec![Value::Integer(1)]);
    assert_eq!(set.as_array().map(<[Value]>::len), Some(1));
    assert_eq!(Value::Map(vec![]).as_array(), None);
    assert!(Value::Error(b("ERR")).is_error());
    assert!(!Value::Simple(b("ERR")).is_error());
}

#[test]
fn pairs_and_fields_in_both_protocols() {
    // CLUSTER SHARDS-like entry, RESP2 (flat array) and RESP3 (map).
    let resp2 = value(b"*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*0\r\n");
    let resp3 = value(b"%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*0\r\n");
    for v in [&resp2, &resp3] {
        let pairs = v.to_pairs().unwrap_or_default();
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[0].0.as_str(), Some("slots"));
        let slots = v
            .field("slots")
            .and_then(Value::as_array)
            .unwrap_or_default();
        assert_eq!(
            slots.iter().filter_map(Value::as_int).collect::<Vec<_>>(),
            [0, 5460]
        );
        assert_eq!(
            v.field("nodes")
                .and_then(Value::as_array)
                .map(<[Value]>::len),
            Some(0)
        );
        assert_eq!(v.field("Slots"), None, "keys are case-sensitive");
        assert_eq!(v.field("missing"), None);
    }
    assert_eq!(Value::Array(vec![Value::Integer(1)]).to_pairs(), None);
    assert_eq!(Value::Integer(1).field("x"), None);
}

fn encoded(v: &Value, proto: Option<Protocol>) -> String {
    let mut out = BytesMut::new();
    match proto {
        None => v.encode(&mut out),
        Some(p) => v.encode_for(&mut out, p),
    }
    out.escape_ascii().to_string()
}

#[test]
fn encode_writes_resp3_types_as_they_are() {
    let v = Value::Array(vec![
        Value::Map(vec![(Value::Simple(b("k")), Value::Double(0.5))]),
        Value::Set(vec![Value::Boolean(true)]),
        Value::Push(vec![Value::BigNumber(b("1"))]),
        Value::Verbatim {
            format: *b"txt",
            text: b("x"),
        },
        Value::Null,
        Value::NullArray,
        Value::Error(b("E a")),
        Value::Error(b("E\na")),
        Value::Attribute {
            attrs: vec![],
            value: Box::new(Value::Integer(1)),
        },
    ]);
    assert_eq!(
        encoded(&v, None),
        r"*9\r\n%1\r\n+k\r\n,0.5\r\n~1\r\n#t\r\n>1\r\n(1\r\n=5\r\ntxt:x\r\n$-1\r\n*-1\r\n-E a\r\n!3\r\nE\na\r\n|0\r\n:1\r\n"
    );
    assert_eq!(
        encoded(&v, Some(Protocol::Resp3)),
        r"*9\r\n%1\r\n+k\r\n,0.5\r\n~1\r\n#t\r\n>1\r\n(1\r\n=5\r\ntxt:x\r\n_\r\n_\r\n-E a\r\n!3\r\nE\na\r\n|0\r\n:1\r\n"
    );
    assert_eq!(
        encoded(&v, Some(Protocol::Resp2)),
        r"*9\r\n*2\r\n+k\r\n$3\r\n0.5\r\n*1\r\n:1\r\n*1\r\n$1\r\n1\r\n$1\r\nx\r\n$-1\r\n*-1\r\n-E a\r\n-E a\r\n:1\r\n"
    );
}

#[test]
fn encode_then_parse_round_trips() {
    let v = value(
        b"*3\r\n|1\r\n+a\r\n:1\r\n%1\r\n$1\r\nk\r\n~2\r\n#t\r\n,inf\r\n=6\r\ntxt:ok\r\n(9\r\n",
    );
    let mut out = BytesMut::new();
    v.encode(&mut out);
    assert_eq!(value(&out), v);
}
