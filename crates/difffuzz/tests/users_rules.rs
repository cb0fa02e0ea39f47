//! The users mode's generator keeps to orthrus's route rules: no key of
//! the mirrored route in MULTI, WATCH or a blocking command, no key of a
//! route whose prefix is removed there or in a command whose reply names
//! keys, one route per command but for the split ones; and every
//! connection logs in first.

use orthrus_difffuzz::generate::{Shape, sequence_in};
use orthrus_difffuzz::world::World;
use orthrus_difffuzz::{Action, Sequence};

const SPLIT: &[&str] = &["MGET", "MSET", "DEL", "UNLINK", "EXISTS", "TOUCH"];
const NAMING: &[&str] = &[
    "LMPOP",
    "ZMPOP",
    "XREAD",
    "XREADGROUP",
    "BLPOP",
    "BRPOP",
    "BLMPOP",
    "BZPOPMIN",
    "BZMPOP",
    "BLMOVE",
];

fn text(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

/// The route prefix of an argument that looks like a key of the pool.
fn route(arg: &str) -> Option<&'static str> {
    let key = |s: &str| {
        let b = s.as_bytes();
        match b {
            [b'{', _, b'}', d] | [b'k', d] => d.is_ascii_digit(),
            _ => false,
        }
    };
    match arg {
        a if a.starts_with("c:") && key(&a[2..]) => Some("c:"),
        a if a.starts_with("m:") && key(&a[2..]) => Some("m:"),
        a if key(a) => Some(""),
        _ => None,
    }
}

fn check(world: &World, seq: &Sequence) {
    let mut in_multi = vec![false; seq.conns.len()];
    for (c, _) in seq.conns.iter().enumerate() {
        let first = seq.steps.iter().find(|s| s.conn == c);
        if let Some(step) = first {
            let Action::Call(args) = &step.action else {
                panic!("conn {c} starts with {:?}", step.action)
            };
            assert!(
                matches!(text(&args[0]).as_str(), "AUTH" | "HELLO"),
                "{args:?}"
            );
        }
    }
    for step in &seq.steps {
        let blocking_send = matches!(step.action, Action::Send(_));
        for args in step.action.commands() {
            let name = text(&args[0]).to_ascii_uppercase();
            let routes: Vec<&str> = args[1..].iter().filter_map(|a| route(&text(a))).collect();
            let queued = in_multi[step.conn] && !matches!(name.as_str(), "EXEC" | "DISCARD");
            let blocking = blocking_send
                || name.starts_with('B')
                    && name != "BITCOUNT"
                    && name != "BITPOS"
                    && name != "BITOP"
                    && name != "BITFIELD"
                || args.iter().any(|a| text(a).eq_ignore_ascii_case("BLOCK"));
            let line = format!(
                "{name} {:?}",
                args.iter().map(|a| text(a)).collect::<Vec<_>>()
            );
            if queued || name == "WATCH" || blocking {
                assert!(!routes.contains(&"m:"), "mirrored key: {line}");
            }
            if world.cut
                && (queued || name == "WATCH" || blocking || NAMING.contains(&name.as_str()))
            {
                assert!(!routes.contains(&"c:"), "cut key: {line}");
            }
            if !SPLIT.contains(&name.as_str()) && !name.starts_with("EVAL") {
                assert!(
                    routes.windows(2).all(|w| w[0] == w[1]),
                    "two routes: {line}"
                );
            }
            match name.as_str() {
                "MULTI" => in_multi[step.conn] = true,
                "EXEC" | "DISCARD" | "RESET" => in_multi[step.conn] = false,
                _ => {}
            }
        }
    }
}

#[test]
fn sequences_keep_to_the_route_rules() {
    for seed in 1..=6u64 {
        let world = World::draw(seed, 6);
        for index in 0..300 {
            check(
                &world,
                &sequence_in(seed, index, Shape::default(), Some(&world)),
            );
        }
    }
}

#[test]
fn both_prefix_settings_are_drawn() {
    let cuts: Vec<bool> = (1..=8u64).map(|s| World::draw(s, 6).cut).collect();
    assert!(cuts.contains(&true) && cuts.contains(&false), "{cuts:?}");
}
