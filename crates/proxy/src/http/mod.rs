//! The admin HTTP endpoint: Prometheus `/metrics`, `/healthz` (the process
//! runs) and `/readyz` (every slot has an owner), on its own thread with a
//! current-thread runtime, away from the workers.
//!
//! It is hand-written HTTP/1.1 rather than hyper or axum: three GET routes,
//! one request per connection (`Connection: close`), no body, no
//! keep-alive. A scraper or a probe needs nothing more, and what it may
//! cost is bounded: a request head of at most [`MAX_REQUEST`] bytes, read
//! within [`HEAD_DEADLINE`], and at most [`MAX_CONNECTIONS`] connections
//! at a time. A probe sends its head at once; connections slow to send
//! theirs cannot keep it out: at the bound, a new connection takes the
//! place of the oldest one that is only waiting (for its head, or draining
//! after its response), which is closed ([`held`]). Only connections writing a response keep their
//! place, and of those at most [`MAX_SCRAPES`] may be rendering or
//! writing `/metrics` at once, so slow scrapers cannot take the room
//! either. With every place writing, a new connection gets an immediate
//! 503 rather than a place in a queue.

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use orthrus_cluster::SLOT_COUNT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::process::Shared;

mod held;
mod metrics;

use held::{Held, Phase, Room};

/// Pending connections the kernel queues for the admin listener.
const BACKLOG: i32 = 1024;
/// Largest request head (request line and headers) accepted.
const MAX_REQUEST: usize = 8 * 1024;
/// Time a client has to send its request head: a probe or a scraper sends
/// it at once.
const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// Time a client has to take the reply.
const DEADLINE: Duration = Duration::from_secs(5);
/// Admin connections held at once, whatever they are doing.
pub const MAX_CONNECTIONS: usize = 256;
/// `/metrics` responses being rendered or written at once; probes
/// (`/healthz`, `/readyz`) are not counted.
const MAX_SCRAPES: usize = 8;
/// After a response, input still arriving is read and dropped, up to this
/// much and for this long, so that the close does not reset the connection
/// before the client has read the response (see [`finish`]).
const DRAIN_LIMIT: usize = 64 * 1024;
const DRAIN_DEADLINE: Duration = Duration::from_secs(1);

/// The Prometheus text exposition format this endpoint writes.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

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

/// Binds the admin listener (non-blocking, for tokio), with room in the
/// kernel's queue for a burst of connections: a probe whose SYN finds the
/// queue full waits a second for the retry.
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// Serves the admin endpoint on `listener` from a thread of its own. It
/// keeps serving once `Shared::shutdown` is cancelled, so that `/readyz` can report the
/// shutdown while the workers drain.
pub fn spawn(
    listener: std::net::TcpListener,
    max_connections: usize,
    shared: Arc<Shared>,
) -> io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin endpoint listening (/metrics, /healthz, /readyz)");
    }
    std::thread::Builder::new()
        .name("orthrus-admin".into())
        .spawn(move || runtime.block_on(serve(listener, max_connections, shared)))
}

async fn serve(listener: std::net::TcpListener, max_connections: usize, shared: Arc<Shared>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "admin endpoint cannot start");
            return;
        }
    };
    let mut held = Held::new(max_connections);
    let scrapes = Arc::new(Semaphore::new(MAX_SCRAPES));
    // Turning a client away politely (a 503 it can read) takes a task too;
    // those are bounded separately, and beyond them a connection is just
    // closed.
    let refusing = Arc::new(Semaphore::new(MAX_SCRAPES));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                tracing::warn!(error = %e, "admin accept failed");
                crate::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match held.make_room() {
            Room::Free | Room::Evicted => {
                let (shared, scrapes) = (shared.clone(), scrapes.clone());
                let phase = Phase::new();
                let in_task = phase.clone();
                let task = tokio::spawn(async move {
                    if let Err(e) = connection(stream, &shared, &scrapes, &in_task).await {
                        tracing::debug!(%peer, error = %e, "admin connection failed");
                    }
                });
                held.push(task.abort_handle(), phase);
                // Let it read its head before the next accept: with a
                // burst queued, a probe would otherwise wait behind the
                // accepts that follow it and be the oldest by then.
                tokio::task::yield_now().await;
            }
            Room::Full => {
                let Ok(permit) = refusing.clone().try_acquire_owned() else {
                    continue;
                };
                tracing::debug!(%peer, "too many admin connections writing responses");
                let busy = Response::text(503, "too many admin connections").encode(false);
                tokio::spawn(async move {
                    let _ = crate::time::timeout(DRAIN_DEADLINE, finish(stream, &busy, None)).await;
                    drop(permit);
                });
            }
        }
    }
}

/// One request, one response, then close.
async fn connection(
    mut stream: TcpStream,
    shared: &Shared,
    scrapes: &Semaphore,
    phase: &Phase,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head = crate::time::timeout(HEAD_DEADLINE, read_head(&mut stream, &mut buf)).await;
    let mut scrape = None;
    let (response, head_only) = match head {
        Err(_) => (Response::text(408, "request not received in time"), false),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(Head::Closed)) => return Ok(()),
        Ok(Ok(Head::Incomplete)) => (Response::text(400, "incomplete request"), false),
        Ok(Ok(Head::TooLarge)) => (Response::text(431, "request head larger than 8 KiB"), false),
        Ok(Ok(Head::Complete)) => match parse_request(&buf) {
            Some(req) if req.path == "/metrics" => match scrapes.try_acquire() {
                Ok(permit) => {
                    scrape = Some(permit);
                    let stopping = shared.shutdown.is_cancelled();
                    (route(&req, shared, stopping), req.method == "HEAD")
                }
                Err(_) => (
                    Response::text(503, "too many /metrics requests at once"),
                    false,
                ),
            },
            Some(req) => (
                route(&req, shared, shared.shutdown.is_cancelled()),
                req.method == "HEAD",
            ),
            None => (Response::text(400, "malformed request"), false),
        },
    };
    let bytes = response.encode(head_only);
    let written = crate::time::timeout(DEADLINE, finish(stream, &bytes, Some(phase))).await;
    drop(scrape);
    written.map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// Writes the response and closes. Closing a socket with unread input
/// makes the kernel send a reset, which can destroy the response before
/// the client reads it; so the write side is shut first and whatever the
/// client still sends (a refused oversized head, a body) is read and
/// dropped until it closes too, within [`DRAIN_LIMIT`] and
/// [`DRAIN_DEADLINE`]. While it writes, its connection keeps its place
/// (`phase`).
async fn finish(mut stream: TcpStream, response: &[u8], phase: Option<&Phase>) -> io::Result<()> {
    if let Some(phase) = phase {
        phase.writing();
    }
    stream.write_all(response).await?;
    stream.shutdown().await?;
    if let Some(phase) = phase {
        phase.done_writing();
    }
    let _ = crate::time::timeout(DRAIN_DEADLINE, discard(&mut stream)).await;
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
        let n = stream
            .read(chunk.get_mut(..room).unwrap_or_default())
            .await?;
        if n == 0 {
            return Ok(if buf.is_empty() {
                Head::Closed
            } else {
                Head::Incomplete
            });
        }
        // Look again only where the terminator can newly appear.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if head_end(buf.get(from..).unwrap_or_default()).is_some() {
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
            body: metrics::exposition(shared),
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
    if !map.is_complete() {
        return Some(if map.covered_slots() == 0 {
            "cluster topology not known yet".to_owned()
        } else {
            format!(
                "only {} of {SLOT_COUNT} slots have an owner",
                map.covered_slots()
            )
        });
    }
    shared.upstreams.iter().find_map(|u| {
        let covered = u.slots.load().covered_slots();
        (covered < usize::from(SLOT_COUNT)).then(|| {
            format!(
                "upstream {}: {covered} of {SLOT_COUNT} slots have an owner",
                u.settings.name
            )
        })
    })
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let shared = Shared::for_tests(2);
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
}
