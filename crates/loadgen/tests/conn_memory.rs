//! `orthrus-bench conn-memory` end to end: the real binary against a real
//! redis-server started by orthrus-devcluster.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use orthrus_devcluster::{NodeOptions, RedisNode};
use orthrus_loadgen::conn_memory::ConnMemory;

fn conn_memory(args: &[String]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orthrus-bench"))
        .arg("conn-memory")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run bounds itself (--timeout); this only catches a hang.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("conn-memory did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_redis_server_costs_a_few_kib_per_connection_and_gives_it_back() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let pid = node.pid().unwrap();
    let args: Vec<String> = [
        "--target",
        &format!("single={}", node.addr()),
        "--pid",
        &pid.to_string(),
        "--connections",
        "400",
        "--settle-ms",
        "100",
        "--timeout",
        "30",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let output = conn_memory(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let m: ConnMemory = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (m.target.as_str(), m.pid, m.connections),
        ("single", pid, 400)
    );
    assert!(m.idle_kib > 1000, "{m:?}");
    // Redis keeps a client struct and small buffers per connection: more
    // than nothing, far less than 100 KiB.
    assert!(
        m.pinged_kib_per_conn > 0.0 && m.pinged_kib_per_conn < 100.0,
        "{m:?}"
    );
    assert!(
        m.open_kib_per_conn > -5.0 && m.open_kib_per_conn < 100.0,
        "{m:?}"
    );
    assert!(
        m.closed_over_idle > 0.5 && m.closed_over_idle < 10.0,
        "{m:?}"
    );
    let [idle, open, closed] = m.fds;
    assert!(open >= idle + 400 && closed < idle + 400, "{m:?}");
    // Every connection was closed: the server counts only itself, once it
    // has read the last closes.
    orthrus_devcluster::wait_until(Duration::from_secs(10), "connected_clients:1", || {
        let text = format!("{:?}", node.cmd(&["INFO", "clients"]).unwrap());
        text.contains("connected_clients:1\\r\\n")
            .then_some(())
            .ok_or(text)
    })
    .expect("every connection closed");
}

#[test]
fn the_table_names_every_target_and_a_wrong_pid_is_caught() {
    let node = RedisNode::start(NodeOptions::default()).unwrap();
    let addr = node.addr().to_string();
    let pid = node.pid().unwrap().to_string();
    let common = ["--connections", "50", "--settle-ms", "0", "--timeout", "5"];
    let mut args: Vec<String> = common.iter().map(|s| s.to_string()).collect();
    args.extend([
        "--target".into(),
        format!("one={addr}"),
        "--pid".into(),
        pid.clone(),
    ]);
    args.extend([
        "--target".into(),
        format!("two={addr}"),
        "--pid".into(),
        pid,
    ]);
    let output = conn_memory(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].contains("KiB/conn 50") && lines[1].starts_with("one "));
    assert!(lines[2].starts_with("two "), "{stdout}");

    // This test's own process is not behind the address: its open files
    // never grow by 50, and the run says so within its timeout.
    let mut args: Vec<String> = common.iter().map(|s| s.to_string()).collect();
    args.extend([
        "--target".into(),
        format!("x={addr}"),
        "--pid".into(),
        std::process::id().to_string(),
    ]);
    let output = conn_memory(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is it the process behind"), "{stderr}");
}
