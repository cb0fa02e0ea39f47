//! Property tests: hash-tag and slot invariants, address round trips, and
//! the redirect parsers on arbitrary bytes.

use orthrus_cluster::{
    Action, NodeAddr, Redirect, RedirectPolicy, SLOT_COUNT, Slot, decide, hash_tag,
};
use proptest::prelude::*;

/// Bytes with many braces, so that tags of every shape come up.
fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(b'{'), Just(b'}'), Just(0u8), Just(0xFFu8), any::<u8>()],
        0..40,
    )
}

/// A host that `NodeAddr` accepts: printable, no brackets, not empty.
fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9.-]{1,20}",
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
        "[0-9a-f:]{2,39}",
        "[!-Z^-~]{1,12}",
        "[a-z]{1,5}\\.[é漢]{1,3}",
    ]
    .prop_filter("non-empty", |h| !h.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn slot_is_in_range(key in key_bytes()) {
        prop_assert!(Slot::for_key(&key).get() < SLOT_COUNT);
        prop_assert_eq!(Slot::for_key(&key).index(), usize::from(Slot::for_key(&key).get()));
    }

    #[test]
    fn shared_tag_means_shared_slot(
        tag in prop::collection::vec(any::<u8>().prop_filter("no closing brace", |b| *b != b'}'), 1..20),
        prefix_a in prop::collection::vec(any::<u8>().prop_filter("no brace", |b| *b != b'{'), 0..10),
        prefix_b in prop::collection::vec(any::<u8>().prop_filter("no brace", |b| *b != b'{'), 0..10),
        suffix_a in key_bytes(),
        suffix_b in key_bytes(),
    ) {
        let key = |prefix: &[u8], suffix: &[u8]| [prefix, b"{", &tag, b"}", suffix].concat();
        let (a, b) = (key(&prefix_a, &suffix_a), key(&prefix_b, &suffix_b));
        prop_assert_eq!(hash_tag(&a), &tag[..]);
        prop_assert_eq!(Slot::for_key(&a), Slot::for_key(&b));
        prop_assert_eq!(Slot::for_key(&a), Slot::for_key(&tag));
    }

    #[test]
    fn tag_is_a_substring_without_close_brace(key in key_bytes()) {
        let tag = hash_tag(&key);
        if tag.len() != key.len() {
            prop_assert!(!tag.is_empty());
            prop_assert!(!tag.contains(&b'}'), "tag {:?} holds a closing brace", tag);
            // It starts right after the key's first '{'.
            let open = key.iter().position(|&b| b == b'{').unwrap();
            prop_assert_eq!(&key[open + 1..open + 1 + tag.len()], tag);
            prop_assert_eq!(key[open + 1 + tag.len()], b'}');
        }
    }

    #[test]
    fn addr_display_parse_round_trip(host in host(), port in 1u16..) {
        let addr = NodeAddr::new(host.as_str(), port);
        let text = addr.to_string();
        prop_assert_eq!(text.parse::<NodeAddr>(), Ok(addr.clone()));
        // A redirect carrying the address parses back to it, too.
        let frame = format!("-MOVED 1 {text}\r\n");
        prop_assert_eq!(
            Redirect::parse(frame.as_bytes()),
            Some(Redirect::Moved { slot: Slot::new(1).unwrap(), addr })
        );
    }

    #[test]
    fn redirect_round_trip(slot in 0u16..SLOT_COUNT, host in host(), port in 1u16.., ask: bool) {
        let addr = NodeAddr::new(host.as_str(), port);
        let word = if ask { "ASK" } else { "MOVED" };
        let frame = format!("-{word} {slot} {addr}\r\n");
        let slot = Slot::new(slot).unwrap();
        let expected = if ask { Redirect::Ask { slot, addr: addr.clone() } } else { Redirect::Moved { slot, addr: addr.clone() } };
        prop_assert_eq!(Redirect::parse(frame.as_bytes()), Some(expected));
        let action = decide(frame.as_bytes(), 0, &RedirectPolicy::default());
        let expected = if ask { Action::Ask { addr } } else { Action::Moved { slot, addr } };
        prop_assert_eq!(action, expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), attempt in 0u32..10) {
        let _ = Redirect::parse(&bytes);
        let _ = decide(&bytes, attempt, &RedirectPolicy::default());
        let _ = String::from_utf8_lossy(&bytes).parse::<NodeAddr>();
    }

    #[test]
    fn redirect_like_bytes_never_panic(
        word in prop_oneof![Just("-MOVED "), Just("-ASK "), Just("!20\r\nMOVED "), Just("-TRYAGAIN"), Just("-CLUSTERDOWN")],
        tail in prop::collection::vec(prop_oneof![Just(b':'), Just(b'['), Just(b']'), Just(b' '), Just(b'\r'), any::<u8>()], 0..30),
        attempt in 0u32..10,
    ) {
        let frame = [word.as_bytes(), &tail].concat();
        let _ = Redirect::parse(&frame);
        let _ = decide(&frame, attempt, &RedirectPolicy::default());
    }
}
