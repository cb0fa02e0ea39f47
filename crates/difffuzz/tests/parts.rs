//! The fuzzer's own parts, without servers: the generator is a function of
//! the seed, the text form round-trips, the shrinker finds a planted
//! difference's two steps.

use orthrus_difffuzz::generate::{Shape, sequence};
use orthrus_difffuzz::script::redis_cli_script;
use orthrus_difffuzz::sequence::{Action, Sequence};
use orthrus_difffuzz::shrink::shrink;

#[test]
fn the_generator_is_a_function_of_the_seed() {
    for i in 0..200 {
        assert_eq!(
            sequence(7, i, Shape::default()),
            sequence(7, i, Shape::default())
        );
    }
    let differ = (0..20)
        .filter(|&i| sequence(7, i, Shape::default()) != sequence(8, i, Shape::default()))
        .count();
    assert_eq!(differ, 20, "another seed gives other sequences");
    let first = sequence(7, 0, Shape::default());
    assert!(first.steps.len() >= Shape::default().min_steps);
    assert!(!first.conns.is_empty());
}

#[test]
fn the_text_form_round_trips() {
    for i in 0..300 {
        let seq = sequence(11, i, Shape::default());
        let text = seq.to_text();
        let back = Sequence::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, seq, "{text}");
    }
}

#[test]
fn the_generator_covers_the_step_kinds() {
    let (mut pipes, mut sends, mut scans, mut multi, mut subs, mut off) = (0, 0, 0, 0, 0, 0);
    for i in 0..300 {
        for step in sequence(3, i, Shape::default()).steps {
            match &step.action {
                Action::Pipeline(_) => pipes += 1,
                Action::Send(_) => sends += 1,
                Action::Scan(_) => scans += 1,
                Action::Call(a) if a[0] == b"MULTI" => multi += 1,
                Action::Call(a) if a[0].ends_with(b"SUBSCRIBE") => subs += 1,
                Action::Call(a) if a.len() == 3 && a[2] == b"OFF" => off += 1,
                _ => {}
            }
        }
    }
    for (what, n) in [
        ("pipelines", pipes),
        ("blocking wake-ups", sends),
        ("SCAN iterations", scans),
        ("MULTI", multi),
        ("subscriptions", subs),
        ("CLIENT REPLY OFF", off),
    ] {
        assert!(n > 10, "{what}: only {n} in 300 sequences");
    }
}

#[test]
fn the_shrinker_finds_a_planted_difference() {
    // The planted "difference": a SET of {a}9 on connection 0, then a GET
    // of it on connection 1, anywhere in a long sequence.
    let mut seq = sequence(5, 3, Shape::default());
    let planted_set = Sequence::parse("conn 0 resp2\nconn 1 resp2\n0> SET {a}9 planted\n").unwrap();
    let planted_get = Sequence::parse("conn 0 resp2\nconn 1 resp2\n1> GET {a}9\n").unwrap();
    while seq.conns.len() < 2 {
        seq.conns.push(orthrus_difffuzz::Proto::Resp2);
    }
    let n = seq.steps.len();
    seq.steps.insert(n / 3, planted_set.steps[0].clone());
    seq.steps.insert(2 * n / 3, planted_get.steps[0].clone());
    let shows = |s: &Sequence| {
        let set = s.steps.iter().position(|st| st == &planted_set.steps[0]);
        let get = s.steps.iter().position(|st| st == &planted_get.steps[0]);
        matches!((set, get), (Some(a), Some(b)) if a < b)
    };
    assert!(shows(&seq));
    let mut runs = 0;
    let small = shrink(&seq, 1_000, &mut |s| {
        runs += 1;
        shows(s)
    });
    assert_eq!(
        small.steps,
        vec![planted_set.steps[0].clone(), planted_get.steps[0].clone()]
    );
    assert!(
        runs < 300,
        "{runs} candidates for {} steps",
        seq.steps.len()
    );
    let script = redis_cli_script(&small, &["planted".to_string()]);
    assert!(script.contains("say 3 'SET {a}9 planted'"), "{script}");
    assert!(script.contains("say 4 'GET {a}9'"), "{script}");
}

/// `--cache` sends every read a reply cache keeps twice in a row, alone
/// or inside its pipeline, and nothing else twice.
#[test]
fn cached_reads_are_repeated_and_nothing_else() {
    let seq = Sequence::parse(
        "conn 0 resp2\nconn 1 resp3\n0> SET k v\n0> GET k\n1| INCR n\n1| hget h f\n\n0> DEL k\n",
    )
    .unwrap();
    let repeated = seq.with_reads_repeated();
    assert_eq!(
        repeated.to_text(),
        "conn 0 resp2\nconn 1 resp3\n0> SET k v\n0> GET k\n0> GET k\n1| INCR n\n1| hget h f\n1| hget h f\n\n0> DEL k\n"
    );
}
