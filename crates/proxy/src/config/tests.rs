use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn defaults_need_only_seeds() {
    let cfg = Config::load(
        None,
        env(&[("ORTHRUS_SEEDS", "127.0.0.1:1")]),
        &Overrides::default(),
    )
    .unwrap();
    let s = cfg.validate().unwrap();
    assert_eq!(s.listen.to_string(), "127.0.0.1:7777");
    assert_eq!(s.seeds.len(), 1);
    assert!(s.threads >= 1);
}

#[test]
fn file_then_env_then_flags() {
    let dir = tempfile_dir();
    let path = dir.join("orthrus.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:1000\"\nseeds = [\"a:1\"]\nthreads = 3\n[backend]\nrequest_timeout_ms = 77\n",
    )
    .unwrap();
    let cfg = Config::load(Some(&path), Vec::new(), &Overrides::default()).unwrap();
    assert_eq!((cfg.listen.as_str(), cfg.threads), ("127.0.0.1:1000", 3));
    assert_eq!(cfg.backend.request_timeout_ms, 77);

    let e = env(&[
        ("ORTHRUS_LISTEN", "127.0.0.1:2000"),
        ("ORTHRUS_SEEDS", "b:2,c:3"),
        ("ORTHRUS_BACKEND__REQUEST_TIMEOUT_MS", "88"),
    ]);
    let cfg = Config::load(Some(&path), e.clone(), &Overrides::default()).unwrap();
    assert_eq!(cfg.listen, "127.0.0.1:2000");
    assert_eq!(cfg.seeds, vec!["b:2", "c:3"]);
    assert_eq!(cfg.backend.request_timeout_ms, 88);
    assert_eq!(cfg.threads, 3);

    let flags = Overrides {
        listen: Some("127.0.0.1:3000".into()),
        seeds: Some("d:4".into()),
        threads: Some(2),
        ..Overrides::default()
    };
    let cfg = Config::load(Some(&path), e, &flags).unwrap();
    assert_eq!((cfg.listen.as_str(), cfg.threads), ("127.0.0.1:3000", 2));
    assert_eq!(cfg.seeds, vec!["d:4"]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_values_name_the_setting() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("ORTHRUS_SEEDS", "x:1"), ("ORTHRUS_LISTEN", "nope")],
            "listen",
        ),
        (&[], "seeds"),
        (&[("ORTHRUS_SEEDS", "x:notaport")], "seeds"),
        (
            &[
                ("ORTHRUS_SEEDS", "x:1"),
                ("ORTHRUS_BACKEND__CONNECT_TIMEOUT_MS", "0"),
            ],
            "backend.connect_timeout_ms",
        ),
        (
            &[("ORTHRUS_SEEDS", "x:1"), ("ORTHRUS_THREADS", "5000")],
            "threads",
        ),
    ];
    for (vars, setting) in cases {
        let err = Config::load(None, env(vars), &Overrides::default())
            .and_then(Config::validate)
            .unwrap_err();
        assert!(
            err.to_string().contains(setting),
            "{err} should name {setting}"
        );
    }
}

#[test]
fn other_tools_variables_are_ignored_but_typos_in_sections_are_not() {
    let vars = env(&[
        ("ORTHRUS_SEEDS", "a:1"),
        ("ORTHRUS_CONFIG", "/x"),
        ("ORTHRUS_BENCH_REQUIRE_PROXY", "1"),
    ]);
    let cfg = Config::load(None, vars, &Overrides::default()).unwrap();
    assert_eq!(cfg.seeds, vec!["a:1"]);
    let vars = env(&[
        ("ORTHRUS_SEEDS", "a:1"),
        ("ORTHRUS_BACKEND__REQUEST_TIMEOUT", "5"),
    ]);
    let err = Config::load(None, vars, &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("request_timeout"), "{err}");
}

#[test]
fn a_removed_setting_says_what_replaced_it() {
    let dir = tempfile_dir();
    let path = dir.join("old.toml");
    std::fs::write(&path, "seeds = [\"a:1\"]\n[cluster]\nmax_redirects = 5\n").unwrap();
    let err = Config::load(Some(&path), Vec::new(), &Overrides::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("cluster.max_redirects"), "{text}");
    assert!(text.contains("backend.request_timeout_ms"), "{text}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn unknown_keys_are_refused() {
    let dir = tempfile_dir();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "seeds = [\"a:1\"]\nlisten_addr = \"x\"\n").unwrap();
    let err = Config::load(Some(&path), Vec::new(), &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("listen_addr"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "orthrus-config-test-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn listen_takes_a_unix_socket_and_its_permissions() {
    let load = |pairs: &[(&str, &str)]| {
        let mut all = vec![("ORTHRUS_SEEDS", "127.0.0.1:1")];
        all.extend_from_slice(pairs);
        Config::load(None, env(&all), &Overrides::default())
            .unwrap()
            .validate()
    };
    let s = load(&[
        ("ORTHRUS_LISTEN", "unix:/run/orthrus.sock"),
        ("ORTHRUS_UNIX_SOCKET_PERM", "770"),
    ])
    .unwrap();
    assert_eq!(
        s.listen,
        Listen::Unix {
            path: PathBuf::from("/run/orthrus.sock"),
            perm: Some(0o770)
        }
    );
    assert_eq!(s.listen.to_string(), "unix:/run/orthrus.sock");
    assert_eq!(s.listen.tcp(), None);
    for (pairs, setting) in [
        (vec![("ORTHRUS_LISTEN", "unix:")], "listen"),
        (
            vec![
                ("ORTHRUS_LISTEN", "unix:/x"),
                ("ORTHRUS_UNIX_SOCKET_PERM", "999"),
            ],
            "unix_socket_perm",
        ),
        (
            vec![("ORTHRUS_UNIX_SOCKET_PERM", "700")],
            "unix_socket_perm",
        ),
        (vec![("ORTHRUS_LISTEN", "nowhere")], "listen"),
    ] {
        match load(&pairs) {
            Err(ConfigError::Invalid { setting: s, .. }) => assert_eq!(s, setting, "{pairs:?}"),
            other => panic!("{pairs:?}: {other:?}"),
        }
    }
}

#[test]
fn read_from_comes_from_the_file_the_environment_and_the_flag() {
    let load = |vars: &[(&str, &str)], flag: Option<&str>| {
        let flags = Overrides {
            read_from: flag.map(str::to_owned),
            ..Overrides::default()
        };
        let mut all = vec![("ORTHRUS_SEEDS", "a:1")];
        all.extend_from_slice(vars);
        Config::load(None, env(&all), &flags).and_then(Config::validate)
    };
    assert_eq!(load(&[], None).unwrap().read_from, ReadFrom::Master);
    let vars = [("ORTHRUS_CLUSTER__READ_FROM", "replica")];
    assert_eq!(load(&vars, None).unwrap().read_from, ReadFrom::Replica);
    let flag = load(&vars, Some("Master")).unwrap();
    assert_eq!(flag.read_from, ReadFrom::Master);
    // az-affinity: replica reads, with the zone orthrus runs in.
    let zoned = [
        ("ORTHRUS_CLUSTER__READ_FROM", "az-affinity"),
        ("ORTHRUS_CLUSTER__AVAILABILITY_ZONE", "az-1"),
    ];
    assert_eq!(load(&zoned, None).unwrap().read_from, ReadFrom::Replica);
    let err = load(&zoned[..1], None).unwrap_err().to_string();
    assert!(err.contains("needs cluster.availability_zone"), "{err}");
    let primary = [(
        "ORTHRUS_CLUSTER__READ_FROM",
        "az-affinity-replicas-and-primary",
    )];
    let err = load(&primary, None).unwrap_err().to_string();
    assert!(err.contains("needs cluster.availability_zone"), "{err}");
    for (value, says) in [
        ("prefer-replica", "not offered"),
        ("slave", "not one of master, replica"),
    ] {
        let err = load(&[], Some(value)).unwrap_err().to_string();
        assert!(
            err.contains("cluster.read_from") && err.contains(says),
            "{err}"
        );
    }
}

#[test]
fn tls_settings_from_env_and_flags() {
    let e = env(&[
        ("ORTHRUS_SEEDS", "127.0.0.1:1"),
        ("ORTHRUS_TLS__LISTEN", "127.0.0.1:6380"),
        ("ORTHRUS_TLS__AUTH_CLIENTS", "optional"),
        ("ORTHRUS_BACKEND__TLS__ENABLED", "true"),
        ("ORTHRUS_BACKEND__TLS__SERVER_NAME", "redis.internal"),
    ]);
    let cfg = Config::load(None, e.clone(), &Overrides::default()).unwrap();
    assert_eq!(cfg.tls.listen.as_deref(), Some("127.0.0.1:6380"));
    assert_eq!(cfg.tls.auth_clients, Some(AuthClients::Optional));
    assert!(cfg.backend.tls.enabled);
    assert_eq!(
        cfg.backend.tls.server_name.as_deref(),
        Some("redis.internal")
    );
    let flags = Overrides {
        tls_auth_clients: Some("no".into()),
        backend_tls_ca_cert_file: Some("/etc/ca.crt".into()),
        ..Overrides::default()
    };
    let cfg = Config::load(None, e, &flags).unwrap();
    assert_eq!(cfg.tls.auth_clients, Some(AuthClients::No));
    assert_eq!(cfg.backend.tls.ca_cert_file.as_deref(), Some("/etc/ca.crt"));
    // The files are read by validate: a listener without them is refused.
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("tls.listen: needs tls.cert_file"), "{err}");
}

#[test]
fn listen_none_needs_a_tls_listener() {
    let cfg = Config {
        listen: "none".to_owned(),
        seeds: vec!["127.0.0.1:1".to_owned()],
        ..Config::default()
    };
    let err = cfg.validate().unwrap_err().to_string();
    assert!(
        err.contains("listen: is none and there is no tls.listen"),
        "{err}"
    );
    assert_eq!(
        Listen::parse("none", None).unwrap().to_string(),
        "none",
        "shown as written"
    );
}
