//! A plain one-request-at-a-time client for the few conversations orthrus
//! has with a node outside the data path: topology discovery, `COMMAND`,
//! and the handshake of a backend connection; and [`connect`], which every
//! connection to a node goes through (TCP, TLS when configured, then the
//! handshake).

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use orthrus_cluster::NodeAddr;
use orthrus_resp::{Limits, Protocol, Request, Value, scan_reply};

use super::stream::{self, NodeStream};
use crate::config::{BackendConfig, BackendTls};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Replies of topology and `COMMAND` queries can be large, never unbounded.
const MAX_REPLY: usize = 64 * 1024 * 1024;

/// Sends one encoded request and reads its whole reply.
pub async fn call(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    frame: &[u8],
) -> io::Result<Value> {
    stream.write_all(frame).await?;
    stream.flush().await?;
    let limits = Limits::for_replies();
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        if let Some(len) = scan_reply(&buf, &limits).map_err(io::Error::other)? {
            let frame = buf.split_to(len).freeze();
            return match Value::parse(&frame, &limits).map_err(io::Error::other)? {
                Some((value, _)) => Ok(value),
                None => Err(io::Error::other("reply scanner and parser disagree")),
            };
        }
        if buf.len() > MAX_REPLY {
            return Err(io::Error::other("reply too large"));
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "node closed the connection",
            ));
        }
    }
}

/// Authenticates a new node connection (when a backend password is set)
/// and switches it to RESP3 when asked, in one round trip. With `confirm`,
/// a connection that needs neither gets a PING: over TLS 1.3 a node that
/// refuses orthrus's certificate says so only at the first read, and that
/// should fail the connect, not the first request sent on it.
pub async fn handshake(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    proto: Protocol,
    backend: &BackendConfig,
    confirm: bool,
) -> io::Result<()> {
    let user = backend.username.as_deref().unwrap_or("default");
    let req = match (&backend.password, proto) {
        (None, Protocol::Resp2) if !confirm => return Ok(()),
        (None, Protocol::Resp2) => Request::from_args(&["PING"]),
        (None, Protocol::Resp3) => Request::from_args(&["HELLO", "3"]),
        (Some(pass), Protocol::Resp3) => Request::from_args(&["HELLO", "3", "AUTH", user, pass]),
        (Some(pass), Protocol::Resp2) if backend.username.is_none() => {
            Request::from_args(&["AUTH", pass])
        }
        (Some(pass), Protocol::Resp2) => Request::from_args(&["AUTH", user, pass]),
    };
    match call(stream, req.frame()).await? {
        // Never echo the command: it holds the password.
        Value::Error(e) => Err(io::Error::other(format!(
            "node refused the handshake: {}",
            String::from_utf8_lossy(&e)
        ))),
        _ => Ok(()),
    }
}

/// Opens a connection to `addr`, over TLS when `tls` is given, and does the
/// [`handshake`], each step within `timeout`.
pub async fn connect(
    addr: &NodeAddr,
    proto: Protocol,
    timeout: Duration,
    backend: &BackendConfig,
    tls: Option<&BackendTls>,
) -> io::Result<NodeStream> {
    let tcp = tokio::time::timeout(timeout, TcpStream::connect((addr.host(), addr.port())))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    tcp.set_nodelay(true)?;
    let mut stream = tokio::time::timeout(timeout, NodeStream::start(tcp, addr, tls))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    let tls = matches!(stream, NodeStream::Tls(_));
    tokio::time::timeout(timeout, handshake(&mut stream, proto, backend, tls))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "handshake timed out"))?
        .map_err(stream::tls_error)?;
    Ok(stream)
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
        let stream = connect(addr, Protocol::Resp2, timeout, backend, tls).await?;
        Ok(NodeClient { stream, timeout })
    }

    /// Runs one command; error replies come back as `Value::Error`.
    pub async fn cmd(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        let req = Request::from_args(args);
        tokio::time::timeout(self.timeout, call(&mut self.stream, req.frame()))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no reply in time"))?
    }
}
