//! TLS both ways, against a TLS-only cluster (`port 0`, `tls-port`,
//! `tls-cluster yes`): plain and TLS clients at once, `redis-cli --tls` and
//! `openssl s_client` through orthrus, client certificates, a node
//! certificate from the wrong CA, bad files, and certificates read again on
//! SIGHUP. Certificates are made by the test with `openssl`.

mod common;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::tls::{self, Pki, try_send};
use common::{Proxy, owner_of, send};
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions, Value, free_port, wait_until};

/// A TLS-only cluster whose nodes have certificates signed by `ca`.
fn tls_cluster(pki: &Pki, ca: &str, masters: usize, options: &[(&str, &str)]) -> Cluster {
    let mut node = NodeOptions::cluster().with_tls(pki.node_files(ca, "node"));
    for (k, v) in options {
        node = node.with_config(k, v);
    }
    Cluster::start(ClusterSpec::new(masters, 0).with_node(node)).expect("start TLS cluster")
}

fn tls_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port().expect("free port")))
}

fn arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A key whose slot `master` owns.
fn key_on(cluster: &Cluster, master: usize) -> String {
    (0..10_000)
        .map(|i| format!("tls:{i}"))
        .find(|k| owner_of(cluster, k.as_bytes()) == master)
        .expect("a key for every master")
}

fn wait_log(proxy: &Proxy, text: &str) {
    wait_until(Duration::from_secs(10), text, || {
        if proxy.log_text().contains(text) {
            Ok(())
        } else {
            Err(proxy.log_text())
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn plain_and_tls_clients_at_once_against_a_tls_only_cluster() {
    if !tls::nodes_have_tls("plain_and_tls_clients_at_once_against_a_tls_only_cluster") {
        return;
    }
    let pki = Pki::new();
    let ca = pki.ca("ca");
    let cluster = tls_cluster(&pki, "ca", 3, &[]);
    // The nodes speak TLS only: a plain client gets no answer.
    let node = cluster.nodes()[0].addr();
    let plain_to_node = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &node.port().to_string(), "PING"])
        .output()
        .expect("redis-cli");
    assert!(
        !String::from_utf8_lossy(&plain_to_node.stdout).contains("PONG"),
        "the node answered in plain text"
    );

    let server = pki.cert("ca", "orthrus");
    let tls_at = tls_addr();
    let proxy = Proxy::start(
        &cluster.seeds(),
        &[
            "--tls-listen",
            &tls_at.to_string(),
            "--tls-cert-file",
            &arg(&server.cert),
            "--tls-key-file",
            &arg(&server.key),
            "--backend-tls",
            "--backend-tls-ca-cert-file",
            &arg(&ca),
        ],
    );

    let mut plain = proxy.stream();
    let mut secure = tls::connect(tls_at, &ca, None).expect("TLS connection to orthrus");
    let masters = cluster.masters().expect("masters");
    assert_eq!(masters.len(), 3);
    for (i, &m) in masters.iter().enumerate() {
        let key = key_on(&cluster, m);
        // Written over one kind of connection, read over the other.
        let (writer, reader): (&mut dyn ReadWrite, &mut dyn ReadWrite) = if i % 2 == 0 {
            (&mut plain, &mut secure)
        } else {
            (&mut secure, &mut plain)
        };
        let (mut writer, mut reader) = (writer, reader);
        assert_eq!(
            send(&mut writer, &["SET", &key, &format!("v{i}")]),
            "+OK\r\n"
        );
        assert_eq!(send(&mut reader, &["GET", &key]), format!("$2\r\nv{i}\r\n"));
        // And it is on that master.
        let held = cluster.nodes()[m]
            .cmd(&["GET", key.as_str()])
            .expect("GET on node");
        assert_eq!(
            held,
            Value::Bulk(format!("v{i}").into_bytes().into()),
            "{key} on node {m}"
        );
    }
    // A pipeline over TLS, replies in order.
    let mut pipeline = Vec::new();
    for i in 0..200 {
        pipeline.extend_from_slice(&common::encode(&[
            "SET",
            &format!("tls:p{i}"),
            &i.to_string(),
        ]));
        pipeline.extend_from_slice(&common::encode(&["GET", &format!("tls:p{i}")]));
    }
    secure.write_all(&pipeline).expect("pipeline");
    for i in 0..200 {
        assert_eq!(common::reply_text(&mut secure), "+OK\r\n");
        let v = i.to_string();
        assert_eq!(
            common::reply_text(&mut secure),
            format!("${}\r\n{v}\r\n", v.len())
        );
    }
    // A value larger than one TLS record both ways.
    let big = "x".repeat(100_000);
    assert_eq!(send(&mut secure, &["SET", "tls:big", &big]), "+OK\r\n");
    assert_eq!(send(&mut plain, &["STRLEN", "tls:big"]), ":100000\r\n");
    assert_eq!(
        send(&mut secure, &["GET", "tls:big"]),
        format!("$100000\r\n{big}\r\n")
    );

    // Dedicated connections (blocking commands, WATCH) and pub/sub
    // connections to the nodes are TLS too.
    assert_eq!(send(&mut plain, &["RPUSH", "tls:list", "a"]), ":1\r\n");
    assert_eq!(
        send(&mut secure, &["BLPOP", "tls:list", "5"]),
        "*2\r\n$8\r\ntls:list\r\n$1\r\na\r\n"
    );
    assert_eq!(send(&mut secure, &["WATCH", "tls:w"]), "+OK\r\n");
    assert_eq!(send(&mut secure, &["MULTI"]), "+OK\r\n");
    assert_eq!(send(&mut secure, &["SET", "tls:w", "1"]), "+QUEUED\r\n");
    assert_eq!(send(&mut secure, &["EXEC"]), "*1\r\n+OK\r\n");
    let mut subscriber = tls::connect(tls_at, &ca, None).expect("TLS subscriber");
    assert_eq!(
        send(&mut subscriber, &["SUBSCRIBE", "tls:ch"]),
        "*3\r\n$9\r\nsubscribe\r\n$6\r\ntls:ch\r\n:1\r\n"
    );
    assert_eq!(send(&mut plain, &["PUBLISH", "tls:ch", "hi"]), ":1\r\n");
    assert_eq!(
        common::reply_text(&mut subscriber),
        "*3\r\n$7\r\nmessage\r\n$6\r\ntls:ch\r\n$2\r\nhi\r\n"
    );

    // redis-cli --tls, and openssl s_client.
    let cli = Command::new("redis-cli")
        .args(["--tls", "--cacert", &arg(&ca), "-h", "127.0.0.1"])
        .args([
            "-p",
            &tls_at.port().to_string(),
            "GET",
            &key_on(&cluster, masters[2]),
        ])
        .output()
        .expect("redis-cli --tls");
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "v2", "{cli:?}");
    let mut s_client = Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-CAfile",
            &arg(&ca),
            "-verify_return_error",
        ])
        .args(["-connect", &tls_at.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    let mut stdin = s_client.stdin.take().expect("stdin");
    stdin
        .write_all(b"PING\r\nGET tls:big\r\nQUIT\r\n")
        .expect("write to s_client");
    drop(stdin);
    let out = s_client.wait_with_output().expect("s_client output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("+PONG\r\n$100000\r\n{big}\r\n+OK\r\n")),
        "s_client got {:?}; stderr {}",
        &text[..text.len().min(200)],
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TCP or TLS stream, for tests that use both alike.
trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}

#[test]
fn a_node_certificate_from_another_ca_is_refused_with_a_clear_line() {
    if !tls::nodes_have_tls("a_node_certificate_from_another_ca_is_refused_with_a_clear_line") {
        return;
    }
    let pki = Pki::new();
    pki.ca("ca");
    let other = pki.ca("other-ca");
    let cluster = tls_cluster(&pki, "ca", 1, &[]);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--backend-tls", "--backend-tls-ca-cert-file", &arg(&other)],
        &[],
    );
    wait_log(&proxy, "TLS handshake failed");
    let log = proxy.log_text();
    assert!(
        log.contains("invalid peer certificate") && log.contains("backend.tls.ca_cert_file"),
        "{log}"
    );
    let reply = proxy.raw_command(&["GET", "k"]).expect("reply");
    assert!(
        reply.starts_with(b"-CLUSTERDOWN"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
}

#[test]
fn a_node_name_that_is_not_in_its_certificate_is_refused() {
    if !tls::nodes_have_tls("a_node_name_that_is_not_in_its_certificate_is_refused") {
        return;
    }
    let pki = Pki::new();
    let ca = pki.ca("ca");
    let cluster = tls_cluster(&pki, "ca", 1, &[]);
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[
            "--backend-tls",
            "--backend-tls-ca-cert-file",
            &arg(&ca),
            "--backend-tls-server-name",
            "redis.example.com",
        ],
        &[],
    );
    wait_log(&proxy, "TLS handshake failed");
    assert!(
        proxy
            .log_text()
            .contains("not valid for name \"redis.example.com\""),
        "{}",
        proxy.log_text()
    );
    // The name the certificate holds is accepted.
    let named = Proxy::start(
        &cluster.seeds(),
        &[
            "--backend-tls",
            "--backend-tls-ca-cert-file",
            &arg(&ca),
            "--backend-tls-server-name",
            "localhost",
        ],
    );
    assert_eq!(send(&mut named.stream(), &["SET", "k", "v"]), "+OK\r\n");
}

#[test]
fn a_bad_file_at_start_up_is_one_line_naming_it_and_exit_64() {
    let pki = Pki::new();
    let ca = pki.ca("ca");
    let server = pki.cert("ca", "orthrus");
    let garbage = pki.path("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let tls_at = tls_addr().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--tls-listen".into(),
                tls_at.clone(),
                "--tls-cert-file".into(),
                "/nonexistent/orthrus.crt".into(),
                "--tls-key-file".into(),
                arg(&server.key),
            ],
            "tls.cert_file: /nonexistent/orthrus.crt",
        ),
        (
            vec![
                "--tls-listen".into(),
                tls_at.clone(),
                "--tls-cert-file".into(),
                arg(&server.cert),
                "--tls-key-file".into(),
                arg(&garbage),
            ],
            "tls.key_file:",
        ),
        (
            vec![
                "--tls-listen".into(),
                tls_at.clone(),
                "--tls-cert-file".into(),
                arg(&garbage),
                "--tls-key-file".into(),
                arg(&server.key),
            ],
            "tls.cert_file:",
        ),
        (
            vec![
                "--tls-listen".into(),
                tls_at.clone(),
                "--tls-cert-file".into(),
                arg(&server.cert),
                "--tls-key-file".into(),
                arg(&server.key),
                "--tls-auth-clients".into(),
                "yes".into(),
            ],
            "tls.auth_clients: yes needs tls.ca_cert_file",
        ),
        (
            vec!["--tls-listen".into(), tls_at.clone()],
            "tls.listen: needs tls.cert_file and tls.key_file",
        ),
        (
            vec![
                "--backend-tls".into(),
                "--backend-tls-ca-cert-file".into(),
                arg(&garbage),
            ],
            "backend.tls.ca_cert_file:",
        ),
        (
            vec![
                "--backend-tls".into(),
                "--backend-tls-ca-cert-file".into(),
                arg(&ca),
                "--backend-tls-cert-file".into(),
                arg(&server.cert),
            ],
            "backend.tls.cert_file: needs backend.tls.key_file",
        ),
        (
            vec!["--listen".into(), "none".into()],
            "listen: is none and there is no tls.listen",
        ),
    ];
    for (args, expected) in cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orthrus"));
        cmd.args(["--seeds", "127.0.0.1:1"]).args(&args);
        let out = common::run_to_exit(cmd, Duration::from_secs(10));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// Starts orthrus with a TLS listener for `server`, and `extra` flags.
fn tls_proxy(
    cluster: &Cluster,
    ca: &Path,
    server: &tls::Cert,
    extra: &[&str],
) -> (Proxy, SocketAddr) {
    let tls_at = tls_addr();
    let (at, cert, key, ca) = (
        tls_at.to_string(),
        arg(&server.cert),
        arg(&server.key),
        arg(ca),
    );
    let mut args = vec![
        "--tls-listen",
        &at,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--backend-tls",
        "--backend-tls-ca-cert-file",
        &ca,
    ];
    args.extend_from_slice(extra);
    (Proxy::start(&cluster.seeds(), &args), tls_at)
}

#[test]
fn client_certificates_required_or_optional() {
    if !tls::nodes_have_tls("client_certificates_required_or_optional") {
        return;
    }
    let pki = Pki::new();
    let ca = pki.ca("ca");
    pki.ca("other-ca");
    let cluster = tls_cluster(&pki, "ca", 1, &[]);
    let server = pki.cert("ca", "orthrus");
    let good = pki.cert("ca", "client");
    let stranger = pki.cert("other-ca", "stranger");
    let ca_flag = arg(&ca);

    // yes (the default with a CA): no certificate, or one from another CA, is refused.
    let (required, at) = tls_proxy(&cluster, &ca, &server, &["--tls-ca-cert-file", &ca_flag]);
    let mut with_cert = tls::connect(at, &ca, Some(&good)).expect("handshake");
    assert_eq!(
        try_send(&mut with_cert, &["PING"]).expect("PING"),
        "+PONG\r\n"
    );
    for client in [None, Some(&stranger)] {
        let refused = tls::connect(at, &ca, client).and_then(|mut c| try_send(&mut c, &["PING"]));
        assert!(refused.is_err(), "{client:?} was served: {refused:?}");
    }
    wait_log(&required, "TLS handshake with a client failed");
    let cli = Command::new("redis-cli")
        .args([
            "--tls",
            "--cacert",
            &ca_flag,
            "--cert",
            &arg(&good.cert),
            "--key",
        ])
        .args([
            &arg(&good.key),
            "-h",
            "127.0.0.1",
            "-p",
            &at.port().to_string(),
            "PING",
        ])
        .output()
        .expect("redis-cli");
    assert_eq!(
        String::from_utf8_lossy(&cli.stdout).trim(),
        "PONG",
        "{cli:?}"
    );
    drop(required);

    // optional: no certificate is fine, a bad one is not.
    let (_optional, at) = tls_proxy(
        &cluster,
        &ca,
        &server,
        &[
            "--tls-ca-cert-file",
            &ca_flag,
            "--tls-auth-clients",
            "optional",
        ],
    );
    for client in [None, Some(&good)] {
        let mut c = tls::connect(at, &ca, client).expect("handshake");
        assert_eq!(
            try_send(&mut c, &["PING"]).expect("PING"),
            "+PONG\r\n",
            "{client:?}"
        );
    }
    let refused =
        tls::connect(at, &ca, Some(&stranger)).and_then(|mut c| try_send(&mut c, &["PING"]));
    assert!(
        refused.is_err(),
        "a certificate from another CA was accepted"
    );
}

#[test]
fn nodes_that_require_a_client_certificate_get_orthrus_own() {
    if !tls::nodes_have_tls("nodes_that_require_a_client_certificate_get_orthrus_own") {
        return;
    }
    let pki = Pki::new();
    let ca = pki.ca("ca");
    let cluster = tls_cluster(&pki, "ca", 1, &[("tls-auth-clients", "yes")]);
    let without = Proxy::spawn(
        &cluster.seeds(),
        &["--backend-tls", "--backend-tls-ca-cert-file", &arg(&ca)],
        &[],
    );
    wait_log(&without, "cluster not reachable yet");
    let log = without.log_text();
    assert!(
        log.contains("TLS handshake failed") && log.contains("backend.tls.cert_file"),
        "{log}"
    );
    drop(without);
    let mine = pki.cert("ca", "orthrus-client");
    let dir = pki.path("orthrus.toml");
    std::fs::write(
        &dir,
        format!(
            "[backend.tls]\nenabled = true\nca_cert_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
            arg(&ca),
            arg(&mine.cert),
            arg(&mine.key)
        ),
    )
    .unwrap();
    let with = Proxy::start(&cluster.seeds(), &["--config", &arg(&dir)]);
    assert_eq!(send(&mut with.stream(), &["SET", "k", "v"]), "+OK\r\n");
}

#[test]
fn sighup_reads_the_certificate_again_and_keeps_the_old_on_a_bad_file() {
    if !tls::nodes_have_tls("sighup_reads_the_certificate_again_and_keeps_the_old_on_a_bad_file") {
        return;
    }
    let pki = Pki::new();
    let ca = pki.ca("ca");
    let new_ca = pki.ca("new-ca");
    let cluster = tls_cluster(&pki, "ca", 1, &[]);
    let first = pki.cert("ca", "orthrus");
    let served = tls::Cert {
        cert: pki.path("served.crt"),
        key: pki.path("served.key"),
    };
    let install = |from: &tls::Cert| {
        std::fs::copy(&from.cert, &served.cert).unwrap();
        std::fs::copy(&from.key, &served.key).unwrap();
    };
    install(&first);
    let (proxy, at) = tls_proxy(&cluster, &ca, &served, &[]);
    let mut kept = tls::connect(at, &ca, None).expect("first certificate");
    assert_eq!(try_send(&mut kept, &["SET", "k", "1"]).unwrap(), "+OK\r\n");

    install(&pki.cert("new-ca", "orthrus-renewed"));
    proxy.signal("HUP");
    wait_log(&proxy, "TLS certificates and keys read again");
    let mut renewed = tls::connect(at, &new_ca, None).expect("renewed certificate");
    assert_eq!(
        try_send(&mut renewed, &["GET", "k"]).unwrap(),
        "$1\r\n1\r\n"
    );
    assert!(
        tls::connect(at, &ca, None).is_err(),
        "the old certificate is still served"
    );
    // The connection made before the reload goes on.
    assert_eq!(try_send(&mut kept, &["GET", "k"]).unwrap(), "$1\r\n1\r\n");

    // A broken key at reload: refused, named, and the renewed certificate stays.
    std::fs::write(&served.key, "garbage\n").unwrap();
    proxy.signal("HUP");
    wait_log(&proxy, "configuration refused");
    let log = proxy.log_text();
    assert!(
        log.contains(&format!("tls.key_file: {}", arg(&served.key))),
        "{log}"
    );
    let mut still = tls::connect(at, &new_ca, None).expect("renewed certificate kept");
    assert_eq!(try_send(&mut still, &["PING"]).unwrap(), "+PONG\r\n");
}

/// A TLS client counts against `client.max_clients` from accept, while its
/// handshake runs: connections that never start one fill the room, a plain
/// client past it is told so, and once they close there is room again.
#[test]
fn clients_in_their_tls_handshake_count_against_max_clients() {
    let pki = Pki::new();
    pki.ca("ca");
    let server = pki.cert("ca", "orthrus");
    let cluster = common::cluster(1, 0);
    let tls_at = tls_addr();
    let (at, cert, key) = (tls_at.to_string(), arg(&server.cert), arg(&server.key));
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[
            "--threads",
            "1",
            "--tls-listen",
            &at,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
        ],
        &[("ORTHRUS_CLIENT__MAX_CLIENTS", "3")],
    );
    let mut bystander = proxy.stream();
    let clients = |bystander: &mut std::net::TcpStream, n: usize| {
        let want = format!("connected_clients:{n}\r\n");
        wait_until(Duration::from_secs(10), &want.clone(), || {
            let info = send(bystander, &["INFO", "clients"]);
            if info.contains(&want) {
                Ok(())
            } else {
                Err(info)
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    };
    // The harness's own probe may still be counted for a moment.
    clients(&mut bystander, 1);
    let silent: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(tls_at).expect("connect to the TLS port"))
        .collect();
    clients(&mut bystander, 3);
    // A probe that sends nothing reads the refusal at once.
    let mut probe = proxy.stream();
    probe
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut probe, &mut got);
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-ERR max number of clients reached\r\n"
    );
    drop(silent);
    clients(&mut bystander, 1);
    assert_eq!(send(&mut proxy.stream(), &["PING"]), "+PONG\r\n");
}
