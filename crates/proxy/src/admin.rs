//! The admin HTTP endpoint: Prometheus `/metrics`, `/healthz` (the process
//! runs) and `/readyz` (every slot has an owner), on its own thread with a
//! current-thread runtime, away from the workers.
//!
//! It is hand-written HTTP/1.1 rather than hyper or axum: three GET routes,
//! one request per connection (`Connection: close`), no body, no
//! keep-alive. A scraper or a probe needs nothing more, and what it may
//! cost is bounded: a request head of at most [`MAX_REQUEST`] bytes, read
//! within [`DEADLINE`], and at most [`MAX_CONNECTIONS`] at a time; excess
//! connections get an immediate 503 rather than a place in a queue.

use std::fmt::{Display, Write as _};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use orthrus_cluster::{Health, Role, SLOT_COUNT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::command_kind::Family;
use crate::latency::{self, Part, Summary};
use crate::shared::Shared;
use crate::stats;

/// Largest request head (request line and headers) accepted.
const MAX_REQUEST: usize = 8 * 1024;
/// Time a client has to send its request head, and then to take the reply.
const DEADLINE: Duration = Duration::from_secs(5);
/// Admin connections served at once.
const MAX_CONNECTIONS: usize = 8;
/// After a response, input still arriving is read and dropped, up to this
/// much and for this long, so that the close does not reset the connection
/// before the client has read the response (see [`finish`]).
const DRAIN_LIMIT: usize = 64 * 1024;
const DRAIN_DEADLINE: Duration = Duration::from_secs(1);

/// The Prometheus text exposition format this endpoint writes.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

const ROLES: [(Role, &str); 2] = [(Role::Master, "master"), (Role::Replica, "replica")];
const HEALTHS: [(Health, &str); 4] = [
    (Health::Online, "online"),
    (Health::Failed, "failed"),
    (Health::Loading, "loading"),
    (Health::Unknown, "unknown"),
];

/// What a request asks for, once its head has been parsed.
#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    method: &'a str,
    /// The path without its query string.
    path: &'a str,
}

/// A complete response; written whole, then the connection closes.
#[derive(Debug)]
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    /// `Allow` header, for 405.
    allow: Option<&'static str>,
}

/// How reading a request head ended.
enum Head {
    /// The head (up to and including its blank line) is in the buffer.
    Complete,
    /// [`MAX_REQUEST`] bytes arrived without the end of the head.
    TooLarge,
    /// The peer closed without sending anything.
    Closed,
    /// The peer closed in the middle of the head.
    Incomplete,
}

/// Binds the admin listener (non-blocking, for tokio).
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves the admin endpoint on `listener` from a thread of its own. It
/// keeps serving after `stop` turns true, so that `/readyz` can report the
/// shutdown while the workers drain.
pub fn spawn(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin endpoint listening (/metrics, /healthz, /readyz)");
    }
    std::thread::Builder::new()
        .name("orthrus-admin".into())
        .spawn(move || runtime.block_on(serve(listener, shared, stop)))
}

async fn serve(listener: std::net::TcpListener, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "admin endpoint cannot start");
            return;
        }
    };
    let serving = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Turning a client away politely (a 503 it can read) takes a task too;
    // those are bounded separately, and beyond them a connection is just
    // closed.
    let refusing = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Ok(permit) = serving.clone().try_acquire_owned() {
            let shared = shared.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                if let Err(e) = connection(stream, &shared, &stop).await {
                    tracing::debug!(%peer, error = %e, "admin connection failed");
                }
                drop(permit);
            });
        } else if let Ok(permit) = refusing.clone().try_acquire_owned() {
            tracing::debug!(%peer, "too many admin connections");
            let busy = Response::text(503, "too many admin connections").encode(false);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(DRAIN_DEADLINE, finish(stream, &busy)).await;
                drop(permit);
            });
        }
    }
}

/// One request, one response, then close.
async fn connection(
    mut stream: TcpStream,
    shared: &Shared,
    stop: &watch::Receiver<bool>,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head = tokio::time::timeout(DEADLINE, read_head(&mut stream, &mut buf)).await;
    let (response, head_only) = match head {
        Err(_) => (Response::text(408, "request not received in time"), false),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(Head::Closed)) => return Ok(()),
        Ok(Ok(Head::Incomplete)) => (Response::text(400, "incomplete request"), false),
        Ok(Ok(Head::TooLarge)) => (Response::text(431, "request head larger than 8 KiB"), false),
        Ok(Ok(Head::Complete)) => match parse_request(&buf) {
            Some(req) => (route(&req, shared, *stop.borrow()), req.method == "HEAD"),
            None => (Response::text(400, "malformed request"), false),
        },
    };
    let bytes = response.encode(head_only);
    tokio::time::timeout(DEADLINE, finish(stream, &bytes))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// Writes the response and closes. Closing a socket with unread input
/// makes the kernel send a reset, which can destroy the response before
/// the client reads it; so the write side is shut first and whatever the
/// client still sends (a refused oversized head, a body) is read and
/// dropped until it closes too, within [`DRAIN_LIMIT`] and
/// [`DRAIN_DEADLINE`].
async fn finish(mut stream: TcpStream, response: &[u8]) -> io::Result<()> {
    stream.write_all(response).await?;
    stream.shutdown().await?;
    let _ = tokio::time::timeout(DRAIN_DEADLINE, discard(&mut stream)).await;
    Ok(())
}

/// Reads until the blank line that ends the head, never holding more than
/// [`MAX_REQUEST`] bytes.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Head> {
    let mut chunk = [0u8; 1024];
    loop {
        let room = MAX_REQUEST.saturating_sub(buf.len()).min(chunk.len());
        if room == 0 {
            return Ok(Head::TooLarge);
        }
        // `room` is at most the chunk's length, and `n` at most `room`.
        let n = stream.read(&mut chunk[..room]).await?;
        if n == 0 {
            return Ok(if buf.is_empty() {
                Head::Closed
            } else {
                Head::Incomplete
            });
        }
        // Look again only where the terminator can newly appear.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if head_end(&buf[from..]).is_some() {
            return Ok(Head::Complete);
        }
    }
}

async fn discard(stream: &mut TcpStream) {
    let mut chunk = [0u8; 4096];
    let mut total = 0;
    while total < DRAIN_LIMIT {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => total += n,
        }
    }
}

/// Where the blank line ending a head starts, accepting bare `\n` line
/// ends as RFC 9112 allows.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses the request line (`METHOD SP target SP HTTP/1.x`); the headers
/// are not needed and are ignored.
fn parse_request(head: &[u8]) -> Option<Request<'_>> {
    let line_end = head.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(head.get(..line_end)?).ok()?;
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !version.starts_with("HTTP/1.")
    {
        return None;
    }
    // Origin form, or the absolute form a proxy would send.
    let target = match target.find("://") {
        Some(i) => {
            let rest = target.get(i + 3..)?;
            rest.find('/').and_then(|j| rest.get(j..)).unwrap_or("/")
        }
        None => target,
    };
    if !target.starts_with('/') {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Some(Request { method, path })
}

fn route(req: &Request<'_>, shared: &Shared, stopping: bool) -> Response {
    let known = matches!(req.path, "/metrics" | "/healthz" | "/readyz");
    if !known {
        return Response::text(404, "not found; try /metrics, /healthz or /readyz");
    }
    if req.method != "GET" && req.method != "HEAD" {
        let mut r = Response::text(405, "only GET is supported");
        r.allow = Some("GET, HEAD");
        return r;
    }
    match req.path {
        "/metrics" => Response {
            status: 200,
            content_type: METRICS_CONTENT_TYPE,
            body: metrics(shared),
            allow: None,
        },
        "/readyz" => match not_ready(shared, stopping) {
            None => Response::text(200, "ready"),
            Some(reason) => Response::text(503, &reason),
        },
        _ => Response::text(200, "ok"),
    }
}

/// Why orthrus cannot serve every key yet, if it cannot.
fn not_ready(shared: &Shared, stopping: bool) -> Option<String> {
    if stopping {
        return Some("shutting down".to_owned());
    }
    let map = shared.slots.load();
    if map.is_complete() {
        None
    } else if map.covered_slots() == 0 {
        Some("cluster topology not known yet".to_owned())
    } else {
        Some(format!(
            "only {} of {SLOT_COUNT} slots have an owner",
            map.covered_slots()
        ))
    }
}

/// The Prometheus text exposition (format 0.0.4).
fn metrics(shared: &Shared) -> String {
    let mut m = Exposition::default();
    process_metrics(&mut m, shared);
    traffic_metrics(&mut m, &stats::totals(&shared.stats), shared.refreshes());
    cluster_metrics(&mut m, shared);
    latency_metrics(&mut m, shared);
    m.out
}

fn process_metrics(m: &mut Exposition, shared: &Shared) {
    m.gauge("orthrus_up", "Always 1 while orthrus runs.", 1);
    m.family("orthrus_build_info", "gauge", "The version, as a label.");
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    m.sample("orthrus_build_info", &version, 1);
    let uptime = shared.started.elapsed().as_secs_f64();
    m.gauge("orthrus_uptime_seconds", "Seconds since start.", uptime);
    let threads = shared.settings.threads;
    m.gauge("orthrus_worker_threads", "Worker threads.", threads);
}

fn traffic_metrics(m: &mut Exposition, t: &stats::Totals, refreshes: u64) {
    let clients = t.connected_clients.max(0);
    m.gauge(
        "orthrus_connected_clients",
        "Client connections open now.",
        clients,
    );
    let accepted = t.connections_received;
    m.counter(
        "orthrus_connections_received_total",
        "Client connections accepted.",
        accepted,
    );
    m.counter(
        "orthrus_commands_total",
        "Commands received from clients.",
        t.commands,
    );

    let name = "orthrus_redirects_total";
    m.family(name, "counter", "MOVED and ASK redirections followed.");
    m.sample(name, &[("kind", "moved")], t.moved);
    m.sample(name, &[("kind", "ask")], t.ask);
    let name = "orthrus_retries_total";
    m.family(
        name,
        "counter",
        "Commands retried after TRYAGAIN or CLUSTERDOWN.",
    );
    m.sample(name, &[("kind", "tryagain")], t.tryagain);
    m.sample(name, &[("kind", "clusterdown")], t.clusterdown);

    let help = "Failures talking to cluster nodes.";
    m.counter("orthrus_backend_errors_total", help, t.backend_errors);
    let help = "Client connections closed for a protocol error.";
    m.counter("orthrus_protocol_errors_total", help, t.protocol_errors);
    let help = "Commands refused with an error by orthrus itself.";
    m.counter("orthrus_rejected_commands_total", help, t.rejected_commands);
    let help = "Client connections refused over client.max_clients.";
    m.counter(
        "orthrus_rejected_connections_total",
        help,
        t.rejected_connections,
    );
    let help = "Topology refreshes attempted.";
    m.counter("orthrus_topology_refreshes_total", help, refreshes);
}

fn cluster_metrics(m: &mut Exposition, shared: &Shared) {
    let map = shared.slots.load();
    let help = "Slots with a known owner (16384 when the cluster is whole).";
    m.gauge("orthrus_cluster_slots_covered", help, map.covered_slots());
    let help = "Masters owning at least one slot.";
    m.gauge("orthrus_cluster_masters", help, map.masters().len());

    let name = "orthrus_cluster_nodes";
    m.family(name, "gauge", "Known cluster nodes by role and health.");
    // Every combination, zeros included, so that a series does not vanish
    // when its last node changes state.
    for (role, role_name) in ROLES {
        for (health, health_name) in HEALTHS {
            let count = map
                .nodes()
                .iter()
                .filter(|n| n.role == role && n.health == health)
                .count();
            m.sample(name, &[("role", role_name), ("health", health_name)], count);
        }
    }
    let help = "1 if the command table was learnt from the cluster's COMMAND reply.";
    let learnt = u8::from(shared.commands_learnt());
    m.gauge("orthrus_commands_from_cluster", help, learnt);
}

// === impl Response ===

impl Response {
    fn text(status: u16, message: &str) -> Response {
        Response {
            status,
            content_type: TEXT_CONTENT_TYPE,
            body: format!("{message}\n"),
            allow: None,
        }
    }

    /// The bytes on the wire; `head_only` for HEAD, which gets the
    /// headers GET would get.
    fn encode(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len(),
        );
        if let Some(allow) = self.allow {
            let _ = write!(out, "Allow: {allow}\r\n");
        }
        out.push_str("\r\n");
        if !head_only {
            out.push_str(&self.body);
        }
        out.into_bytes()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Latency histograms per command family (the total, the backend part and
/// orthrus's part) and per node; families never used are left out.
fn latency_metrics(m: &mut Exposition, shared: &Shared) {
    const PARTS: [(Part, &str, &str); 3] = [
        (
            Part::Total,
            "orthrus_command_duration_seconds",
            "Time from reading a request to its reply being ready to write, by command family.",
        ),
        (
            Part::Backend,
            "orthrus_command_backend_duration_seconds",
            "Part of a request's time spent waiting for cluster nodes (the longest round trip among its parts), by command family.",
        ),
        (
            Part::Proxy,
            "orthrus_command_proxy_duration_seconds",
            "orthrus's own part of a request's time (the total minus the backend part), by command family.",
        ),
    ];
    for (part, name, help) in PARTS {
        let used: Vec<(Family, Summary)> = Family::ALL
            .into_iter()
            .map(|family| (family, latency::summary(&shared.latency, family, part)))
            .filter(|(_, summary)| summary.count() > 0)
            .collect();
        if !used.is_empty() {
            m.family(name, "histogram", help);
        }
        for (family, summary) in used {
            m.histogram(name, &[("family", family.name())], &summary);
        }
    }
    let nodes = shared.node_latency.summaries();
    let name = "orthrus_backend_duration_seconds";
    if !nodes.is_empty() {
        let help = "Round trip of requests to each cluster node on the shared connections.";
        m.family(name, "histogram", help);
    }
    for (addr, summary) in nodes {
        m.histogram(name, &[("node", &addr.to_string())], &summary);
    }
}

/// Builds the text format. Label values here are fixed strings without
/// quotes, backslashes or newlines, so they need no escaping.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = write!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, "counter", help);
        self.sample(name, &[], value);
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// The `_bucket`, `_sum` and `_count` samples of one histogram.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], summary: &Summary) {
        let bucket = format!("{name}_bucket");
        let count = summary.count();
        let bounds = latency::PROMETHEUS_EXPONENTS
            .map(|exp| {
                let le = ((1u64 << exp) as f64 / 1e6).to_string();
                (le, summary.below_power_of_two(exp))
            })
            .chain([("+Inf".to_owned(), count)]);
        for (le, below) in bounds {
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, below);
        }
        self.sample(&format!("{name}_sum"), labels, summary.sum_seconds());
        self.sample(&format!("{name}_count"), labels, count);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::stats::WorkerStats;

    fn shared() -> Arc<Shared> {
        let config = Config {
            seeds: vec!["127.0.0.1:1".to_owned()],
            threads: 2,
            ..Config::default()
        };
        Shared::new(config.validate().expect("valid config"))
    }

    #[test]
    fn parses_request_lines() {
        let get = |head: &'static [u8]| parse_request(head);
        assert_eq!(
            get(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Request {
                method: "GET",
                path: "/metrics"
            })
        );
        assert_eq!(
            get(b"GET /readyz?verbose=1 HTTP/1.0\n\n").map(|r| r.path),
            Some("/readyz")
        );
        assert_eq!(
            get(b"GET http://h:9/healthz HTTP/1.1\r\n\r\n").map(|r| r.path),
            Some("/healthz")
        );
        assert_eq!(
            get(b"POST / HTTP/1.1\r\n\r\n").map(|r| r.method),
            Some("POST")
        );
        for bad in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET /metrics HTTP/2\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1 x\r\n\r\n",
            b"\xff /metrics HTTP/1.1\r\n\r\n",
            b"\r\n\r\n",
            b"",
        ] {
            assert_eq!(
                parse_request(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn finds_the_end_of_a_head() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\n"), Some(20));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    #[test]
    fn routes() {
        let shared = shared();
        let req = |method, path| Request { method, path };
        let status = |r: Request<'_>| route(&r, &shared, false).status;
        assert_eq!(status(req("GET", "/healthz")), 200);
        assert_eq!(status(req("HEAD", "/healthz")), 200);
        assert_eq!(status(req("GET", "/metrics")), 200);
        assert_eq!(status(req("GET", "/readyz")), 503);
        assert_eq!(status(req("GET", "/")), 404);
        assert_eq!(status(req("POST", "/metrics")), 405);
        assert_eq!(status(req("DELETE", "/nope")), 404);
        let r = route(&req("GET", "/readyz"), &shared, true);
        assert_eq!((r.status, r.body.as_str()), (503, "shutting down\n"));
    }

    #[test]
    fn head_gets_headers_only() {
        let r = Response::text(200, "ok");
        let full = String::from_utf8(r.encode(false)).unwrap_or_default();
        let head = String::from_utf8(r.encode(true)).unwrap_or_default();
        assert!(full.starts_with("HTTP/1.1 200 OK\r\n"), "{full}");
        assert!(full.contains("Content-Length: 3\r\n"), "{full}");
        assert!(full.contains("Connection: close\r\n"), "{full}");
        assert!(full.ends_with("\r\n\r\nok\n"), "{full}");
        assert_eq!(head, full.trim_end_matches("ok\n"));
    }

    #[test]
    fn metrics_are_well_formed() {
        let shared = shared();
        WorkerStats::bump(&shared.stats[1].commands);
        WorkerStats::bump(&shared.stats[0].commands);
        let took = Duration::from_micros(100);
        shared.latency[0].record(Family::Hash, took, Some(took / 2));
        shared.latency[1].record(Family::Hash, took * 2, None);
        let text = metrics(&shared);
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap_or_default();
                assert!(matches!(kind, "counter" | "gauge" | "histogram"), "{line}");
                assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
                assert!(typed.insert(name.to_owned()), "two TYPE lines: {line}");
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_default();
            let name = series.split('{').next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|family| typed.contains(*family));
            assert!(
                typed.contains(name) || family.is_some(),
                "no TYPE before {line}"
            );
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
        assert!(text.contains("\northrus_commands_total 2\n"), "{text}");
        assert!(text.contains("\northrus_worker_threads 2\n"), "{text}");
        assert!(
            text.contains("\northrus_cluster_slots_covered 0\n"),
            "{text}"
        );
        assert!(
            text.contains("\northrus_cluster_nodes{role=\"replica\",health=\"failed\"} 0\n"),
            "{text}"
        );
        let hash = "orthrus_command_duration_seconds_bucket{family=\"hash\"";
        assert!(
            text.contains(&format!("\n{hash},le=\"0.000064\"}} 0\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("\n{hash},le=\"0.000128\"}} 1\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("\n{hash},le=\"+Inf\"}} 2\n")),
            "{text}"
        );
        let backend = "orthrus_command_backend_duration_seconds_count{family=\"hash\"} 1";
        assert!(text.contains(backend), "{text}");
        assert!(!text.contains("family=\"string\""), "{text}");
    }
}
