//! What a client can do to orthrus before and without the right
//! credentials, tried against the real binary in front of a real cluster
//! whose nodes require a password.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Proxy, read_reply, status_kib};
use orthrus_devcluster::{Cluster, ClusterSpec, NodeOptions};

const NODE_PASSWORD: &str = "node-secret-30";
const CLIENT_PASSWORD: &str = "client-secret-30";

/// Three masters with `requirepass`, and orthrus with a client password.
fn protected_cluster() -> (Cluster, Proxy) {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &["--requirepass", CLIENT_PASSWORD],
        &[("ORTHRUS_BACKEND__PASSWORD", NODE_PASSWORD)],
    );
    (cluster, proxy)
}

/// Sends `bytes`, then expects `reply` and the connection closed.
fn refused_and_closed(proxy: &Proxy, bytes: &[u8], reply: &str) {
    let mut s = proxy.stream();
    s.write_all(bytes).expect("send");
    let got = read_reply(&mut s).expect("reply");
    assert_eq!(String::from_utf8_lossy(&got), reply);
    let mut rest = [0u8; 64];
    assert_eq!(
        s.read(&mut rest).expect("read after the error"),
        0,
        "not closed"
    );
}

#[test]
fn before_auth_big_headers_are_refused_and_the_connection_closed() {
    let (_cluster, proxy) = protected_cluster();
    let bulk = "-ERR Protocol error: unauthenticated bulk length\r\n";
    let multibulk = "-ERR Protocol error: unauthenticated multibulk length\r\n";
    refused_and_closed(&proxy, b"*2\r\n$3\r\nGET\r\n$209715210\r\n", bulk);
    refused_and_closed(&proxy, b"*11\r\n", multibulk);
    refused_and_closed(&proxy, &[b'a'; 16 * 1024 + 1], bulk);
    let mut eleven = "GET k ".repeat(5).into_bytes();
    eleven.extend_from_slice(b"x\r\n");
    refused_and_closed(&proxy, &eleven, multibulk);

    // Within the limits a client still hears NOAUTH, and after AUTH the
    // usual limits apply on the same connection.
    let mut s = proxy.stream();
    let ten = common::encode(&["GET"; 10]);
    s.write_all(&ten).expect("send");
    let noauth = read_reply(&mut s).expect("reply");
    assert_eq!(&noauth[..], b"-NOAUTH Authentication required.\r\n");
    assert_eq!(common::send(&mut s, &["AUTH", CLIENT_PASSWORD]), "+OK\r\n");
    let big = "v".repeat(64 * 1024);
    let echo = common::send(&mut s, &["ECHO", &big]);
    assert_eq!(echo, format!("$65536\r\n{big}\r\n"));
}

/// The probe from the outside: 100 connections that never AUTH each try to
/// send a 200 MiB argument. Redis's rule refuses each at its header, so
/// orthrus's resident memory hardly moves (at most 8 MiB, allocator slack
/// and the connections' own state included).
#[test]
fn before_auth_100_connections_sending_200_mib_each_leave_rss_flat() {
    let (_cluster, proxy) = protected_cluster();
    let pid = proxy.pid();
    let before = status_kib(pid, "VmRSS:");
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..10)
            .map(|_| scope.spawn(|| (0..10).filter(|_| flood(&proxy, deadline)).count()))
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    let peak = status_kib(pid, "VmHWM:");
    assert_eq!(refused, 100, "some connections were never refused");
    let grown = peak.saturating_sub(before);
    assert!(
        grown <= 8 * 1024,
        "RSS {before} KiB before, peak {peak} KiB after: grew {grown} KiB"
    );
}

/// One connection that sends `GET` with a 200 MiB argument, in 1 MiB
/// writes, until orthrus ends it. True if it ended before all was sent.
fn flood(proxy: &Proxy, deadline: Instant) -> bool {
    const TOTAL: usize = 200 * 1024 * 1024;
    let mut s = TcpStream::connect(proxy.addr).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let header = format!("*2\r\n$3\r\nGET\r\n${TOTAL}\r\n");
    let chunk = vec![b'x'; 1024 * 1024];
    let mut sent = 0;
    if s.write_all(header.as_bytes()).is_err() {
        return true;
    }
    while sent < TOTAL && Instant::now() < deadline {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    false
}

/// An orthrus listening on every address (`0.0.0.0`), as the container
/// images do; killed on drop.
struct OpenProxy {
    child: std::process::Child,
    port: u16,
    log: std::path::PathBuf,
}

impl OpenProxy {
    fn spawn(cluster: &Cluster, env: &[(&str, &str)]) -> OpenProxy {
        OpenProxy::spawn_under(&[], "0.0.0.0", cluster, env)
    }

    /// Starts orthrus on `ip`, through `wrapper` (a command that execs
    /// its arguments, such as prlimit) if one is given.
    fn spawn_under(
        wrapper: &[&str],
        ip: &str,
        cluster: &Cluster,
        env: &[(&str, &str)],
    ) -> OpenProxy {
        let port = orthrus_devcluster::free_port().expect("free port");
        let log = std::env::temp_dir().join(format!("orthrus-open-{port}.log"));
        let seeds: Vec<String> = cluster.seeds().iter().map(ToString::to_string).collect();
        let orthrus = env!("CARGO_BIN_EXE_orthrus");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut cmd = std::process::Command::new(first);
                cmd.args(rest).arg(orthrus);
                cmd
            }
            None => std::process::Command::new(orthrus),
        };
        let child = cmd
            .args([
                "--listen",
                &format!("{ip}:{port}"),
                "--seeds",
                &seeds.join(","),
            ])
            .args(["--backend-password", NODE_PASSWORD])
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start orthrus");
        let proxy = OpenProxy { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "not listening: {}",
                proxy.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Connects from `source` (port chosen by the kernel) to `to`.
    fn connect(&self, source: std::net::IpAddr, to: std::net::IpAddr) -> TcpStream {
        let domain = socket2::Domain::for_address(std::net::SocketAddr::new(to, 0));
        let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None).expect("socket");
        socket
            .bind(&std::net::SocketAddr::new(source, 0).into())
            .expect("bind the source address");
        socket
            .connect(&std::net::SocketAddr::new(to, self.port).into())
            .expect("connect");
        let s: TcpStream = socket.into();
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s
    }
}

impl Drop for OpenProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One of this host's own addresses that is not loopback (the one it would
/// send from towards a documentation address; no packet is sent). A
/// connection to it never leaves the host, but its peer address is not
/// loopback: what a client on another host looks like to orthrus.
fn host_address() -> Option<std::net::IpAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    probe.connect("203.0.113.1:9").ok()?;
    let ip = probe.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

fn ping(s: &mut TcpStream) -> String {
    common::send(s, &["PING"])
}

#[test]
fn protected_mode_serves_only_loopback_clients_without_a_password() {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let lo = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let open = OpenProxy::spawn(&cluster, &[]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !open
        .log_text()
        .contains("protected mode: no client password")
    {
        assert!(Instant::now() < deadline, "no warning: {}", open.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // 127.0.0.0/8 is loopback, whichever address of it a client uses.
    for source in ["127.0.0.1", "127.0.0.2", "127.45.6.7"] {
        let mut s = open.connect(lo(source), lo("127.0.0.1"));
        assert_eq!(ping(&mut s), "+PONG\r\n", "from {source}");
    }
    let Some(host) = host_address() else {
        // Without an address of its own besides loopback, this host has
        // no way to show orthrus a client that is not local.
        eprintln!("SKIPPED the non-loopback half: this host has no non-loopback address");
        return;
    };
    let mut s = open.connect(host, host);
    let reply = read_reply(&mut s).map(|r| String::from_utf8_lossy(&r).into_owned());
    let reply = reply.expect("a reply before the close");
    assert!(
        reply.starts_with("-DENIED orthrus is running in protected mode"),
        "{reply}"
    );
    let mut rest = [0u8; 16];
    assert_eq!(s.read(&mut rest).unwrap_or(0), 0, "not closed");
    drop(open);

    // A client password, or protected mode off: the same client is served.
    let with_password = OpenProxy::spawn(&cluster, &[("ORTHRUS_CLIENT__PASSWORD", "pw-30")]);
    let mut s = with_password.connect(host, host);
    assert_eq!(ping(&mut s), "-NOAUTH Authentication required.\r\n");
    assert_eq!(common::send(&mut s, &["AUTH", "pw-30"]), "+OK\r\n");
    assert_eq!(ping(&mut s), "+PONG\r\n");
    assert!(!with_password.log_text().contains("protected mode"));
    drop(with_password);
    let off = OpenProxy::spawn(&cluster, &[("ORTHRUS_PROTECTED_MODE", "false")]);
    let mut s = off.connect(host, host);
    assert_eq!(ping(&mut s), "+PONG\r\n");
}

/// The client and backend passwords read from files: AUTH works with the
/// file's password, and it is in neither the command line nor the
/// environment of the process.
#[test]
fn passwords_come_from_files_and_stay_out_of_proc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let client_file = dir.path().join("client-password");
    let backend_file = dir.path().join("backend-password");
    std::fs::write(&client_file, "from-a-file-30\n").expect("write");
    std::fs::write(&backend_file, format!("{NODE_PASSWORD}\n")).expect("write");
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let proxy = Proxy::spawn(
        &cluster.seeds(),
        &[],
        &[
            (
                "ORTHRUS_CLIENT__PASSWORD_FILE",
                client_file.to_str().unwrap(),
            ),
            (
                "ORTHRUS_BACKEND__PASSWORD_FILE",
                backend_file.to_str().unwrap(),
            ),
        ],
    );
    let mut s = proxy.stream();
    assert_eq!(
        common::send(&mut s, &["AUTH", "from-a-file-30\n"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    proxy.log_in(&mut s, &["from-a-file-30"], &["SET", "k", "v"]);
    for what in ["cmdline", "environ"] {
        let bytes = std::fs::read(format!("/proc/{}/{what}", proxy.pid())).expect("proc");
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("from-a-file-30"), "{what}: {text}");
        assert!(!text.contains(NODE_PASSWORD), "{what}: {text}");
    }
    // A wrong password is logged, once a second at most, without itself.
    assert!(
        proxy.log_text().contains("AUTH failed"),
        "{}",
        proxy.log_text()
    );
    assert!(!proxy.log_text().contains("from-a-file-30"));

    // Both a password and a file: refused at start-up (exit 64).
    let mut both = std::process::Command::new(env!("CARGO_BIN_EXE_orthrus"));
    both.args([
        "--seeds",
        "127.0.0.1:1",
        "--requirepass",
        "x",
        "--check-config",
    ])
    .env("ORTHRUS_CLIENT__PASSWORD_FILE", &client_file);
    let out = common::run_to_exit(both, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("client.password_file"), "{err}");
}

/// Under a low open files limit (soft 64, hard 300), orthrus raises the
/// soft limit to the hard one, lowers max_clients to what fits (300 - 64
/// spare - 2 for the topology refresher - 2 workers x 6 nodes x 2 shared
/// node connections = 210, a third of it: each client with room for its 2
/// dedicated node connections, 70) and says so;
/// past that a new client is told `-ERR max number of clients reached`
/// instead of hanging, and the refusals are logged once a second at most.
#[test]
fn under_a_low_open_files_limit_clients_past_what_fits_are_told_so() {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let proxy = OpenProxy::spawn_under(
        &["prlimit", "--nofile=64:300", "--"],
        "127.0.0.1",
        &cluster,
        &[("ORTHRUS_THREADS", "2")],
    );
    // The limit is raised just after the listener is bound: wait for the
    // line that says what came of it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !proxy.log_text().contains("client.max_clients lowered") {
        assert!(Instant::now() < deadline, "no line: {}", proxy.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", proxy.child.id())).expect("limits");
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("open files line");
    assert_eq!(
        open_files.split_whitespace().nth(3),
        Some("300"),
        "soft limit not raised: {open_files}"
    );
    let log = proxy.log_text();
    assert!(log.contains("client.max_clients lowered"), "{log}");
    assert!(log.contains("lowered_to=70"), "{log}");
    let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..70 {
        let mut s = proxy.connect(lo, lo);
        assert_eq!(ping(&mut s), "+PONG\r\n");
        idle.push(s);
    }
    for _ in 0..10 {
        let mut s = proxy.connect(lo, lo);
        let reply = read_reply(&mut s).expect("an error, not a hang");
        assert_eq!(&reply[..], b"-ERR max number of clients reached\r\n");
        let mut rest = [0u8; 8];
        assert_eq!(s.read(&mut rest).unwrap_or(0), 0, "not closed");
    }
    let lines = proxy
        .log_text()
        .matches("max number of clients reached")
        .count();
    assert!(
        (1..10).contains(&lines),
        "{lines} log lines for 10 refusals"
    );
    // One leaves, one more is served.
    drop(idle.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = proxy.connect(lo, lo);
        if read_reply_or_ping(&mut s) == "+PONG\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "no room after a client left");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// PING on a fresh connection, or the refusal it got instead.
fn read_reply_or_ping(s: &mut TcpStream) -> String {
    if s.write_all(&common::encode(&["PING"])).is_err() {
        return String::new();
    }
    read_reply(s).map_or_else(
        |_| String::new(),
        |r| String::from_utf8_lossy(&r).into_owned(),
    )
}

/// 50 connections trickle one byte a second into the admin port (the
/// probe of a slow-loris client) for 6 s; meanwhile every `/healthz` and
/// `/metrics`, asked twice a second, answers 200: the median `/healthz`
/// within 100 ms and the slowest within 500 ms. A server held by a
/// trickling connection would take its byte interval (1 s) or its head
/// deadline (2 s); a loaded machine can stall any one request by some
/// tens of milliseconds.
#[test]
fn admin_healthz_answers_while_50_connections_trickle() {
    let spec =
        ClusterSpec::new(3, 0).with_node(NodeOptions::cluster().with_password(NODE_PASSWORD));
    let cluster = Cluster::start(spec).expect("start cluster");
    let (_proxy, admin) = common::admin::spawn_with_admin(
        &cluster.seeds(),
        &["--requirepass", CLIENT_PASSWORD],
        &[("ORTHRUS_BACKEND__PASSWORD", NODE_PASSWORD)],
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut times = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut slow: Vec<TcpStream> = (0..50)
                .map(|_| TcpStream::connect(admin).expect("connect"))
                .collect();
            let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
            for &byte in request.iter().take(6) {
                for s in &mut slow {
                    // Answered 408 and closed after the head deadline:
                    // reconnect and trickle again.
                    if s.write_all(&[byte]).is_err() {
                        *s = TcpStream::connect(admin).expect("reconnect");
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut times = Vec::new();
        std::thread::sleep(Duration::from_millis(300));
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for path in ["/healthz", "/metrics"] {
                let started = Instant::now();
                let (status, body) = common::admin::get(admin, path);
                let took = started.elapsed();
                assert_eq!(status, 200, "{path}: {body}");
                if path == "/healthz" {
                    times.push(took);
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        times
    });
    times.sort();
    let median = times[times.len() / 2];
    let slowest = times[times.len() - 1];
    assert!(
        median <= Duration::from_millis(100) && slowest < Duration::from_millis(500),
        "/healthz took {times:?}"
    );
}
