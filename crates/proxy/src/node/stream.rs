//! A connection to a node: plain TCP, or TLS over TCP when
//! `[backend.tls]` is on. An enum rather than a trait object, so that a
//! plain connection pays one branch per call and no allocation.
//!
//! Writers flush after writing: a TLS stream may take the bytes into its
//! records and keep some until the socket has room (for TCP the flush does
//! nothing).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use orthrus_cluster::NodeAddr;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_rustls::client::TlsStream;

use crate::config::BackendTls;
use crate::process::quota::Counted;

/// A connection to a node, with its place in the node's count of
/// connections (see [`crate::process::quota`]), if it was counted.
pub enum NodeStream {
    Plain(TcpStream, Option<Counted>),
    Tls(Box<TlsStream<TcpStream>>, Option<Counted>),
}

/// The reading half of a [`NodeStream`], for a task that reads and writes
/// at once; it keeps the connection's place in the count.
#[expect(dead_code, reason = "the place in the count is held, never read")]
pub enum NodeReadHalf {
    Plain(OwnedReadHalf, Option<Counted>),
    Tls(ReadHalf<TlsStream<TcpStream>>, Option<Counted>),
}

/// The writing half of a [`NodeStream`].
pub enum NodeWriteHalf {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

// === impl NodeStream ===

impl NodeStream {
    /// Does the TLS handshake on `tcp` when `tls` says so, verifying the
    /// node's certificate against `tls.server_name` or else the node's
    /// host (an IP address against the certificate's IP addresses).
    pub async fn start(
        tcp: TcpStream,
        addr: &NodeAddr,
        tls: Option<&BackendTls>,
    ) -> io::Result<NodeStream> {
        let Some(tls) = tls else {
            return Ok(NodeStream::Plain(tcp, None));
        };
        let name = match &tls.server_name {
            Some(name) => name.clone(),
            None => ServerName::try_from(addr.host().to_owned()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{:?} cannot be verified as a TLS server name ({e}); set backend.tls.server_name",
                        addr.host()
                    ),
                )
            })?,
        };
        let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
        match connector.connect(name, tcp).await {
            Ok(stream) => Ok(NodeStream::Tls(Box::new(stream), None)),
            Err(e) => Err(tls_error(e)),
        }
    }

    /// Splits into halves that can be used at once. A TLS stream's halves
    /// share it through tokio's split (a lock that is never contended when
    /// both are used by one task).
    pub fn into_split(self) -> (NodeReadHalf, NodeWriteHalf) {
        match self {
            NodeStream::Plain(s, counted) => {
                let (rd, wr) = s.into_split();
                (NodeReadHalf::Plain(rd, counted), NodeWriteHalf::Plain(wr))
            }
            NodeStream::Tls(s, counted) => {
                let (rd, wr) = tokio::io::split(*s);
                (NodeReadHalf::Tls(rd, counted), NodeWriteHalf::Tls(wr))
            }
        }
    }

    /// The same connection, holding `counted` until it is closed.
    pub fn counted(self, counted: Counted) -> NodeStream {
        match self {
            NodeStream::Plain(s, _) => NodeStream::Plain(s, Some(counted)),
            NodeStream::Tls(s, _) => NodeStream::Tls(s, Some(counted)),
        }
    }
}

/// For a TLS error (from the handshake or the first exchange after it),
/// says that the TLS handshake failed and which settings decide it: the
/// node's certificate against orthrus's CA and name, or orthrus's own
/// certificate refused by the node. Any other error is returned as it is.
pub fn tls_error(e: io::Error) -> io::Error {
    use rustls::AlertDescription as Alert;
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return e;
    };
    let hint = match tls {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
            " (the node's certificate is checked against backend.tls.ca_cert_file and backend.tls.server_name)"
        }
        rustls::Error::AlertReceived(
            Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::HandshakeFailure,
        ) => {
            " (the node refused orthrus's client certificate, or its lack of one: backend.tls.cert_file and backend.tls.key_file)"
        }
        _ => "",
    };
    io::Error::new(e.kind(), format!("TLS handshake failed: {e}{hint}"))
}

/// Forwards the I/O calls of an enum to the stream in its variant.
macro_rules! delegate {
    ($ty:ident, $($variant:ident),+) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(s, ..) => Pin::new(s).poll_read(cx, buf),)+
                }
            }
        }
    };
    (write $ty:ident, $($variant:ident),+) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $($ty::$variant(s, ..) => Pin::new(s).poll_write(cx, buf),)+
                }
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $($ty::$variant(s, ..) => Pin::new(s).poll_write_vectored(cx, bufs),)+
                }
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    $($ty::$variant(s, ..) => s.is_write_vectored(),)+
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(s, ..) => Pin::new(s).poll_flush(cx),)+
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $($ty::$variant(s, ..) => Pin::new(s).poll_shutdown(cx),)+
                }
            }
        }
    };
}

delegate!(NodeStream, Plain, Tls);
delegate!(write NodeStream, Plain, Tls);
delegate!(NodeReadHalf, Plain, Tls);
delegate!(write NodeWriteHalf, Plain, Tls);
