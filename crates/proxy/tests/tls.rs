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
