//! Tests of the result types and their JSON form.

use super::*;

#[test]
fn report_json_round_trips() {
    let report = sample_report();
    let text = serde_json::to_string_pretty(&report).unwrap();
    let back: Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report);
    assert!(text.contains("\"kind\": \"single\""), "{text}");
    assert!(
        text.contains("\"ratio_percent\": null"),
        "the baseline has no ratio"
    );
}

#[test]
fn stats_over_samples() {
    let s = Stats::from_samples(&[2.0, 1.0, 3.0]).unwrap();
    assert_eq!((s.min, s.max, s.avg, s.samples), (1.0, 3.0, 2.0, 3));
    assert!(Stats::from_samples(&[]).is_none());
    assert!(Stats::from_samples(&[1.0, f64::NAN]).is_none());
}

#[test]
fn target_result_pools_repeats_and_processes() {
    let t = |k: f64| PerSet {
        keys: k,
        hash: 1.0,
        list: 1.0,
        proc: k + 2.0,
    };
    let runs = vec![vec![t(1.0), t(3.0)], vec![t(5.0)]];
    let mut r = TargetResult::from_runs("x".into(), runs).unwrap();
    assert_eq!(r.stats.keys.min, 1.0);
    assert_eq!(r.stats.keys.max, 5.0);
    assert_eq!(r.stats.keys.avg, 3.0);
    assert_eq!(r.stats.proc.avg, 5.0);
    assert_eq!(r.stats.keys.samples, 3);
    let baseline = PerSet::from_fn(|_| Stats {
        min: 1.0,
        max: 1.0,
        avg: 1.5,
        samples: 1,
    });
    r.set_ratio(&baseline);
    let ratio = r.ratio_percent.unwrap();
    assert!((ratio.keys - 50.0).abs() < 1e-9);
    assert!((ratio.hash - 150.0).abs() < 1e-9);
}

#[test]
fn ratio_of_the_original() {
    // Cerberus table, 1 concurrency, hash row: 23.6971 / 40.9572.
    let r = ratio_percent(23.6971, 40.9572);
    assert_eq!(format!("{r:.2}%"), "57.86%");
    assert_eq!(ratio_percent(1.0, 0.0), 0.0);
}

#[test]
fn json_round_trip_of_per_set() {
    let p = PerSet {
        keys: 1.5,
        hash: 2.0,
        list: 3.0,
        proc: 6.5,
    };
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(text, r#"{"keys":1.5,"hash":2.0,"list":3.0,"proc":6.5}"#);
    let back: PerSet<f64> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, p);
}
