//! The command line: help, bad settings, precedence as the binary sees it.

mod common;

use std::process::Command;
use std::time::Duration;

fn orthrus(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orthrus"));
    cmd.args(args)
        .env_remove("ORTHRUS_SEEDS")
        .env_remove("ORTHRUS_LISTEN")
        .env_remove("ORTHRUS_THREADS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::run_to_exit(cmd, Duration::from_secs(20))
}

#[test]
fn help_documents_every_flag() {
    let out = orthrus(&["--help"], &[]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--seeds",
        "--threads",
        "--config",
        "ORTHRUS_SEEDS",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
}

#[test]
fn bad_settings_exit_64_naming_the_setting() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        (&[], &[], "seeds"),
        (&["--seeds", "127.0.0.1:notaport"], &[], "seeds"),
        (
            &["--seeds", "127.0.0.1:1", "--listen", "nowhere"],
            &[],
            "listen",
        ),
        (
            &["--seeds", "127.0.0.1:1"],
            &[("ORTHRUS_BACKEND__CONNECT_TIMEOUT_MS", "0")],
            "backend.connect_timeout_ms",
        ),
        (
            &["--seeds", "127.0.0.1:1", "--threads", "2"],
            &[("ORTHRUS_BACKEND__MAX_CONNECTIONS_PER_NODE", "7")],
            "backend.max_connections_per_node",
        ),
        (
            &["--seeds", "127.0.0.1:1"],
            &[("ORTHRUS_BACKEND__MAX_CONNECTIONS_PER_NODE", "1000001")],
            "backend.max_connections_per_node",
        ),
        (
            &["--seeds", "127.0.0.1:1"],
            &[("ORTHRUS_SLOWLOG__MAX_LEN", "10001")],
            "slowlog.max_len",
        ),
        (
            &["--seeds", "127.0.0.1:1"],
            &[("ORTHRUS_SLOWLOG__LOG_SLOWER_THAN_US", "soon")],
            "slowlog.log_slower_than_us",
        ),
        (
            &[],
            &[
                ("ORTHRUS_SEEDS", "127.0.0.1:1"),
                ("ORTHRUS_THREADS", "lots"),
            ],
            "threads",
        ),
        (
            &["--seeds", "127.0.0.1:1", "--mode", "sentinel"],
            &[],
            "cluster.mode",
        ),
        (
            &["--seeds", "127.0.0.1:1,127.0.0.1:2"],
            &[("ORTHRUS_CLUSTER__MODE", "standalone")],
            "seeds",
        ),
        (
            &[
                "--seeds",
                "127.0.0.1:1",
                "--config",
                "/nonexistent/orthrus.toml",
            ],
            &[],
            "orthrus.toml",
        ),
    ];
    for (args, env, setting) in cases {
        let out = orthrus(args, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?} {env:?}: {err}");
        assert!(
            err.contains(setting),
            "{args:?}: error should name {setting}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one clear line: {err}");
    }
}

#[test]
fn check_config_prints_the_effective_settings_with_passwords_masked() {
    let out = orthrus(
        &[
            "--check-config",
            "--seeds",
            "127.0.0.1:1",
            "--requirepass",
            "sekret-1",
        ],
        &[
            ("ORTHRUS_BACKEND__PASSWORD", "sekret-2"),
            ("ORTHRUS_THREADS", "3"),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("listen = \"127.0.0.1:7777\"") && text.contains("threads = 3"),
        "{text}"
    );
    assert!(text.contains("password = \"********\""), "{text}");
    assert!(!text.contains("sekret"), "a password was printed: {text}");
    let bad = orthrus(&["--check-config", "--seeds", "nope"], &[]);
    assert_eq!(bad.status.code(), Some(64));
}

#[test]
fn the_example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/orthrus.toml");
    let cfg = orthrus_proxy::Config::load(
        Some(std::path::Path::new(path)),
        Vec::new(),
        &Default::default(),
    )
    .expect("config/orthrus.toml loads");
    let settings = cfg.validate().expect("config/orthrus.toml is valid");
    assert_eq!(settings.listen.to_string(), "127.0.0.1:7777");
}
