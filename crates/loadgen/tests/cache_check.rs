//! `orthrus-bench cache-check` end to end, small: the real binary starts
//! its own clusters and orthrus (the one built next to this test,
//! target/<profile>/orthrus) with the reply cache on, and every part must
//! pass and print its figures. Without that binary the test is skipped
//! with a warning, unless ORTHRUS_BENCH_REQUIRE_PROXY is set (CI sets it).

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The run bounds itself (--timeout per part); this only catches a hang.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs cache-check with `args`; its exit code and stdout.
fn cache_check(orthrus: &PathBuf, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orthrus-bench"))
        .arg("cache-check")
        .arg("--orthrus")
        .arg(orthrus)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cache-check did not finish within {RUN_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let text = reader.join().unwrap();
    eprintln!("{text}");
    (status.code(), text)
}

/// The number after `label` in `text`.
fn number_after(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    text[at + label.len()..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in:\n{text}"))
}

#[test]
fn staleness_and_read_your_writes_pass_small() {
    let Some(orthrus) = common::orthrus_binary("skipping cache-check") else {
        return;
    };
    let (code, out) = cache_check(
        &orthrus,
        &[
            "--part",
            "staleness,ryw",
            "--writes",
            "2000",
            // A debug orthrus reads slowly: more reads between two writes,
            // so that the cache answers a good share of them.
            "--reads-per-write",
            "16",
            "--ops",
            "20000",
            "--timeout",
            "60",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    for part in ["staleness", "ryw", "cache-check"] {
        assert!(out.contains(&format!("\n{part}: PASSED")), "{part}: {out}");
    }
    // staleness: every write was seen, the reads were served from the
    // cache and checked.
    assert!(
        out.contains("acknowledgement to first seen through orthrus, 2000 writes"),
        "{out}"
    );
    assert!(
        number_after(&out, "at the last write's acknowledgement: hits") > 0,
        "{out}"
    );
    // ryw: the three disturbances happened while the clients ran, and the
    // FLUSHALL's nils were judged as such.
    for event in [
        "migrated from node",
        "failed over to its replica",
        "FLUSHALL through orthrus (",
    ] {
        assert!(out.contains(event), "{event}: {out}");
    }
    assert!(
        number_after(&out, "nils the FLUSHALL explains:") > 0,
        "{out}"
    );
    // orthrus was redirected by the half-moved slot and the moved roles.
    assert!(number_after(&out, "orthrus_redirects_ask") > 0, "{out}");
    assert!(number_after(&out, "orthrus_redirects_moved") > 0, "{out}");
    assert!(
        number_after(&out, "INFO # Cache during the run: hits") > 0,
        "{out}"
    );
}

/// At a small budget the part measures and judges; its verdict is not
/// asserted: the cache's fixed tables (2 MiB of key generations, a 1 MiB
/// admission sketch per worker) alone are more than a quarter of 8 MiB.
/// What is asserted: the budget was filled and kept, both worker counts
/// were measured, and the exit code follows the printed verdict.
#[test]
fn memory_is_measured_with_the_budget_filled() {
    let Some(orthrus) = common::orthrus_binary("skipping cache-check") else {
        return;
    };
    let (code, out) = cache_check(
        &orthrus,
        &[
            "--part",
            "memory",
            "--max-memory-mb",
            "8",
            "--timeout",
            "60",
        ],
    );
    for workers in ["1 worker(s): RSS cache off", "4 worker(s): RSS cache off"] {
        assert!(out.contains(workers), "{workers}: {out}");
    }
    assert!(
        !out.contains("was not filled") && !out.contains("over the budget"),
        "{out}"
    );
    // Every key was read six times: each filled once (the admission
    // sketch admits a key at its fifth read).
    let keys = number_after(&out, "cache.max_memory_mb 8,");
    let first = out.find("INFO # Cache:").unwrap_or(0);
    let fills = number_after(&out[first..], "fills");
    assert!(
        keys > 10_000 && fills * 10 >= keys * 9,
        "{keys} keys, {fills} fills: {out}"
    );
    let over = out.contains(": OVER (");
    assert!(
        out.contains(if over {
            "\nmemory: FAILED"
        } else {
            "\nmemory: PASSED"
        }),
        "{out}"
    );
    assert_eq!(code, Some(i32::from(over)), "{out}");
}
