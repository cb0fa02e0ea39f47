//! SIGHUP reloads what can change at run time (here: the log level, the
//! client password and the SLOWLOG threshold) without dropping connected clients, and refuses a bad
//! configuration while keeping the current one.

mod common;

use std::time::{Duration, Instant};

use common::{Proxy, cluster, send};

#[test]
fn sighup_reloads_level_and_password_keeping_clients() {
    let cluster = cluster(3, 0);
    let dir = std::env::temp_dir().join(format!("orthrus-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("orthrus.toml");
    let write = |password: &str, level: &str, slower_than_us: i64| {
        std::fs::write(
            &file,
            format!(
                "[client]\npassword = \"{password}\"\n[log]\nlevel = \"{level}\"\n\
                 [slowlog]\nlog_slower_than_us = {slower_than_us}\n"
            ),
        )
        .unwrap();
    };
    write("first-pw", "info", -1);
    let file_arg = file.to_string_lossy().into_owned();
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--config", &file_arg],
        &[("RUST_LOG", "")],
    );

    let mut kept = proxy.stream();
    assert_eq!(send(&mut kept, &["AUTH", "first-pw"]), "+OK\r\n");
    let deadline = Instant::now() + Duration::from_secs(20);
    while send(&mut kept, &["SET", "r", "1"]) != "+OK\r\n" {
        assert!(Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !proxy.log_text().contains("DEBUG"),
        "debug lines before the reload"
    );
    assert_eq!(
        send(&mut kept, &["SLOWLOG", "LEN"]),
        ":0\r\n",
        "slowlog off"
    );

    write("second-pw", "debug", 0);
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !proxy.log_text().contains("configuration reloaded") {
        assert!(
            Instant::now() < deadline,
            "no reload logged:\n{}",
            proxy.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = proxy.log_text();
    assert!(
        log.contains("client.password")
            && log.contains("log.level")
            && log.contains("slowlog.log_slower_than_us"),
        "{log}"
    );
    assert!(
        !log.contains("second-pw") && !log.contains("first-pw"),
        "a password reached the log"
    );

    // The connected client is still there; new clients need the new password.
    assert_eq!(send(&mut kept, &["GET", "r"]), "$1\r\n1\r\n");
    // Every request is logged now.
    assert_eq!(send(&mut kept, &["SLOWLOG", "LEN"]), ":1\r\n");
    let mut fresh = proxy.stream();
    assert_eq!(
        send(&mut fresh, &["AUTH", "first-pw"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(send(&mut fresh, &["AUTH", "second-pw"]), "+OK\r\n");
    orthrus_devcluster::wait_until(Duration::from_secs(5), "DEBUG lines in the log", || {
        if proxy.log_text().contains("DEBUG") {
            Ok(())
        } else {
            Err("the new log level did not apply".to_owned())
        }
    })
    .unwrap();

    // A bad configuration is refused; the current one stays.
    std::fs::write(&file, "[client]\nmax_clients = 0\n").unwrap();
    proxy.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !proxy.log_text().contains("configuration refused") {
        assert!(Instant::now() < deadline, "bad config not reported");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut after = proxy.stream();
    assert_eq!(send(&mut after, &["AUTH", "second-pw"]), "+OK\r\n");
    assert_eq!(send(&mut kept, &["GET", "r"]), "$1\r\n1\r\n");
    std::fs::remove_dir_all(&dir).unwrap();
}
