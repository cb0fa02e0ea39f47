//! A plain one-request-at-a-time client for the few conversations orthrus
//! has with a node outside the data path: topology discovery, `COMMAND`,
//! and the handshake of a backend connection; and [`connect`], which every
//! connection to a node goes through (TCP, TLS when configured, then the
//! handshake).

use std::io;
use std::time::Duration;

use orthrus_cluster::NodeAddr;
use orthrus_resp::{Limits, Protocol, Request, Value};

use super::frames::FrameReader;
use super::stream::{self, NodeStream};
use crate::config::{BackendConfig, BackendTls};
use crate::process::databases::Served;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a connection to a node is set up beyond its address: the protocol
/// its `HELLO` chose and the database its `SELECT` chose. Part of a
/// connection's identity: requests of a client in database 1 go only on
/// connections set to database 1, and nothing is ever selected per request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dialect {
    pub proto: Protocol,
    pub db: u32,
}

/// The handshake's `SELECT` was refused: the node serves fewer databases
/// (a Redis 7 cluster serves one). The node is not at fault, and its
/// other connections are not affected.
#[derive(Debug, thiserror::Error)]
#[error("node refused SELECT {db}: {reply}")]
pub struct NoDatabase {
    pub db: u32,
    pub reply: String,
}

/// Replies of topology and `COMMAND` queries can be large, never unbounded.
const MAX_REPLY: usize = 64 * 1024 * 1024;
/// The `READONLY` command: a replica connection that sent it serves reads.
const READONLY: &[u8] = b"*1\r\n$8\r\nREADONLY\r\n";

/// Sends one encoded request and reads its whole reply.
pub async fn call(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    frame: &[u8],
) -> io::Result<Value> {
    let mut replies = exchange(stream, frame, 1).await?;
    replies
        .pop()
        .ok_or_else(|| io::Error::other("no reply read"))
}

/// Sends `frames` (one or more encoded requests) in one write and reads
/// `count` whole replies.
async fn exchange(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    frames: &[u8],
    count: usize,
) -> io::Result<Vec<Value>> {
    stream.write_all(frames).await?;
    stream.flush().await?;
    let limits = Limits::for_replies();
    let mut reader = FrameReader::new(stream, MAX_REPLY);
    let mut replies = Vec::with_capacity(count);
    while replies.len() < count {
        let frame = reader.reply(1).await?;
        match Value::parse(&frame, &limits).map_err(io::Error::other)? {
            Some((value, _)) => replies.push(value),
            None => return Err(io::Error::other("reply scanner and parser disagree")),
        }
    }
    Ok(replies)
}

/// Authenticates a new node connection (when a backend password is set),
/// switches it to RESP3 when asked, selects a database other than 0 and,
/// with `readonly`, sends `READONLY` (a replica then answers reads of its
/// master's slots), all in one round trip. With `confirm`, a connection that needs none of these gets a
/// PING: over TLS 1.3 a node that refuses orthrus's certificate says so
/// only at the first read, and that should fail the connect, not the first
/// request sent on it.
pub async fn handshake(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    dialect: Dialect,
    backend: &BackendConfig,
    readonly: bool,
    confirm: bool,
) -> io::Result<()> {
    let user = backend.username.as_deref().unwrap_or("default");
    let hello = match (&backend.password, dialect.proto) {
        (None, Protocol::Resp2) if confirm && !readonly => Some(Request::from_args(&["PING"])),
        (None, Protocol::Resp2) => None,
        (None, Protocol::Resp3) => Some(Request::from_args(&["HELLO", "3"])),
        (Some(pass), Protocol::Resp3) => {
            Some(Request::from_args(&["HELLO", "3", "AUTH", user, pass]))
        }
        (Some(pass), Protocol::Resp2) if backend.username.is_none() => {
            Some(Request::from_args(&["AUTH", pass]))
        }
        (Some(pass), Protocol::Resp2) => Some(Request::from_args(&["AUTH", user, pass])),
    };
    let mut frames = Vec::new();
    if let Some(req) = &hello {
        frames.extend_from_slice(req.frame());
    }
    let select = dialect.db != 0;
    if select {
        let db = dialect.db.to_string();
        frames.extend_from_slice(Request::from_args(&["SELECT", &db]).frame());
    }
    if readonly {
        frames.extend_from_slice(READONLY);
    }
    let count = usize::from(hello.is_some()) + usize::from(select) + usize::from(readonly);
    if count == 0 {
        return Ok(());
    }
    let mut replies = exchange(stream, &frames, count).await?.into_iter();
    if hello.is_some() {
        if let Some(Value::Error(e)) = replies.next() {
            // Never echo the command: it holds the password.
            return Err(io::Error::other(format!(
                "node refused the handshake: {}",
                String::from_utf8_lossy(&e)
            )));
        }
    }
    if select {
        if let Some(Value::Error(e)) = replies.next() {
            return Err(io::Error::other(NoDatabase {
                db: dialect.db,
                reply: String::from_utf8_lossy(&e).into_owned(),
            }));
        }
    }
    if let Some(Value::Error(e)) = replies.next() {
        // Not fatal: the node answers reads with MOVED, and they go to
        // the master.
        tracing::warn!(error = %String::from_utf8_lossy(&e), "node refused READONLY; its reads go to the master");
    }
    Ok(())
}

/// Opens a connection to `addr`, over TLS when `tls` is given, and does the
/// [`handshake`], each step within `timeout`.
pub async fn connect(
    addr: &NodeAddr,
    dialect: Dialect,
    timeout: Duration,
    backend: &BackendConfig,
    readonly: bool,
    tls: Option<&BackendTls>,
) -> io::Result<NodeStream> {
    let tcp = crate::time::timeout(timeout, TcpStream::connect((addr.host(), addr.port())))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    tcp.set_nodelay(true)?;
    socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive())?;
    let mut stream = crate::time::timeout(timeout, NodeStream::start(tcp, addr, tls))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    let tls = matches!(stream, NodeStream::Tls(..));
    crate::time::timeout(
        timeout,
        handshake(&mut stream, dialect, backend, readonly, tls),
    )
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "handshake timed out"))?
    .map_err(stream::tls_error)?;
    Ok(stream)
}

/// TCP keepalive on every node socket: a node that vanished without a
/// word (a pod deleted, a host powered off) is noticed after about a
/// minute and a half of silence (60 s idle, then 3 probes 10 s apart)
/// even by a connection with nothing in flight, which no reply timer
/// watches.
fn keepalive() -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(3)
}

/// A short-lived connection to `addr` for one or more calls.
pub struct NodeClient {
    stream: NodeStream,
    timeout: Duration,
}

impl NodeClient {
    pub async fn connect(
        addr: &NodeAddr,
        timeout: Duration,
        backend: &BackendConfig,
        tls: Option<&BackendTls>,
    ) -> io::Result<NodeClient> {
        let stream = connect(addr, Dialect::default(), timeout, backend, false, tls).await?;
        Ok(NodeClient { stream, timeout })
    }

    /// Runs one command; error replies come back as `Value::Error`.
    pub async fn cmd(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        let req = Request::from_args(args);
        crate::time::timeout(self.timeout, call(&mut self.stream, req.frame()))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no reply in time"))?
    }

    /// How many databases the node serves, by `SELECT` on this connection:
    /// doubling from 1 until one is refused, then halving the gap (about
    /// ten round trips for Valkey's 16; one for a Redis 7 cluster, which
    /// refuses `SELECT 1`). The connection is back in database 0 after.
    pub async fn databases(&mut self) -> io::Result<Served> {
        // Served: 0 ..= `served`; refused: `refused` (with the node's words).
        let (mut served, mut refused) = (0u32, None);
        let mut next = 1u32;
        while refused.is_none() {
            match self.select(next).await? {
                Some(error) => refused = Some((next, error)),
                None if next == MAX_DB => {
                    served = next;
                    break;
                }
                None => {
                    served = next;
                    next = next.saturating_mul(2).min(MAX_DB);
                }
            }
        }
        let counted = match refused {
            None => Served {
                count: served.saturating_add(1),
                refusal: "ERR DB index is out of range".to_owned(),
            },
            Some((mut above, refusal)) => {
                while above - served > 1 {
                    let middle = served + (above - served) / 2;
                    match self.select(middle).await? {
                        Some(_) => above = middle,
                        None => served = middle,
                    }
                }
                Served {
                    count: above,
                    refusal,
                }
            }
        };
        if served > 0 {
            self.select(0).await?;
        }
        Ok(counted)
    }

    /// `SELECT db`: the node's error, if it refused.
    pub async fn select(&mut self, db: u32) -> io::Result<Option<String>> {
        let db = db.to_string();
        Ok(match self.cmd(&[b"SELECT", db.as_bytes()]).await? {
            Value::Error(e) => Some(String::from_utf8_lossy(&e).into_owned()),
            _ => None,
        })
    }
}

/// The highest database number a node may serve (`databases` is an int).
const MAX_DB: u32 = i32::MAX as u32;
