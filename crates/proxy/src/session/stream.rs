//! The kinds of client connection a session serves.

use std::net::SocketAddr;
use std::rc::Rc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use super::direct::{Direct, TcpClient};

/// A client's connection: TCP ([`super::TcpClient`]), the Unix socket, or
/// TLS over TCP. The session is generic over it, so the plain paths pay
/// nothing for TLS.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + 'static {
    /// Readies a new connection (Nagle off for TCP).
    fn prepare(&self);
    /// orthrus's own address on it, for TCP.
    fn local(&self) -> Option<SocketAddr>;
    /// Where node connections may write a reply to the client themselves.
    fn direct(&self) -> Option<&Rc<Direct>> {
        None
    }
}

impl Stream for TcpClient {
    fn prepare(&self) {
        self.no_delay();
    }

    fn local(&self) -> Option<SocketAddr> {
        self.local_addr()
    }

    fn direct(&self) -> Option<&Rc<Direct>> {
        Some(self.shared())
    }
}

impl Stream for tokio_rustls::server::TlsStream<TcpStream> {
    fn prepare(&self) {} // Nagle is off since before the handshake

    fn local(&self) -> Option<SocketAddr> {
        self.get_ref().0.local_addr().ok()
    }
}

impl Stream for UnixStream {
    fn prepare(&self) {}

    fn local(&self) -> Option<SocketAddr> {
        None
    }
}
