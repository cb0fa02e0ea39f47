//! One blocking RESP connection over `std::net::TcpStream`: write a command,
//! read its reply, nothing in flight in between — the request/response
//! pattern the original benchmark measured, with no pipelining to flatter
//! either side.
//!
//! Every read and write has a timeout, so a target that stops answering
//! fails the run with a message instead of hanging it. The reading itself
//! is devcluster's client; this module words the errors for a run.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use orthrus_devcluster::DevError;
pub use orthrus_devcluster::command_text;
use orthrus_resp::Value;

/// A connection to one target: devcluster's blocking RESP client, with
/// error messages that name the command and the target.
#[derive(Debug)]
pub struct Conn {
    inner: orthrus_devcluster::Conn,
}

// === impl Conn ===

impl Conn {
    /// Connects with `timeout` for the connect and for every later read and
    /// write, and turns Nagle off as any Redis client does.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Conn> {
        let inner = orthrus_devcluster::Conn::connect_timeout(addr, timeout)
            .map_err(plain)
            .with_context(|| format!("connecting to {addr}"))?;
        Ok(Conn { inner })
    }

    /// The target's address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr()
    }

    /// Sends one command and returns its reply. An error reply is
    /// `Ok(Value::Error)`: the caller decides whether it was expected.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value> {
        let addr = self.inner.addr();
        self.inner
            .cmd(args)
            .map_err(plain)
            .with_context(|| format!("`{}` on {addr}", command_text(args)))
    }
}

/// The load driver's wording of a connection failure.
fn plain(e: DevError) -> anyhow::Error {
    match e {
        DevError::Timeout { .. } => anyhow!("no reply within the I/O timeout"),
        DevError::Closed { .. } => anyhow!("the target closed the connection"),
        DevError::Protocol { source, .. } => {
            anyhow!("the target sent something that is not RESP: {source}")
        }
        other => anyhow::Error::new(other),
    }
}

/// A reply for messages: `"OK"`, `integer 5`, `error "WRONGTYPE ..."`,
/// `nil`, `["a", "b"]`.
pub fn reply_text(value: &Value) -> String {
    let quoted = |b: &[u8]| format!("{:?}", String::from_utf8_lossy(b));
    match value {
        Value::Simple(b) => format!("status {}", quoted(b)),
        Value::Error(b) => format!("error {}", quoted(b)),
        Value::Integer(n) => format!("integer {n}"),
        Value::Bulk(b) => quoted(b),
        Value::Null | Value::NullArray => "nil".to_owned(),
        Value::Array(items) | Value::Set(items) | Value::Push(items) => {
            let shown: Vec<String> = items.iter().take(12).map(reply_text).collect();
            let more = if items.len() > 12 { ", ..." } else { "" };
            format!("[{}{more}]", shown.join(", "))
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use orthrus_devcluster::COMMAND_TEXT_MAX;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::thread;

    #[test]
    fn command_text_is_shortened_on_a_char_boundary() {
        assert_eq!(command_text(&["GET", "k"]), "GET k");
        let long = "é".repeat(200);
        let text = command_text(&["SET", long.as_str()]);
        assert!(text.ends_with("..."));
        assert!(text.len() <= COMMAND_TEXT_MAX + 3);
    }

    #[test]
    fn reply_text_names_the_type() {
        assert_eq!(reply_text(&Value::Integer(3)), "integer 3");
        assert_eq!(
            reply_text(&Value::Error(Bytes::from_static(b"ERR x"))),
            "error \"ERR x\""
        );
        assert_eq!(reply_text(&Value::Null), "nil");
        let arr = Value::Array(vec![Value::Bulk(Bytes::from_static(b"a")), Value::Null]);
        assert_eq!(reply_text(&arr), "[\"a\", nil]");
    }

    /// A fake server that dribbles one reply in pieces and then sends two in
    /// one write: the reader must handle both.
    #[test]
    fn reads_split_and_batched_replies() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut req = [0u8; 64];
            let n = sock.read(&mut req).unwrap();
            assert_eq!(&req[..n], b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
            for piece in [&b"$5\r"[..], b"\nhel", b"lo\r", b"\n"] {
                sock.write_all(piece).unwrap();
                thread::sleep(Duration::from_millis(5));
            }
            let _ = sock.read(&mut req).unwrap();
            sock.write_all(b"+OK\r\n").unwrap();
            let _ = sock.read(&mut req).unwrap();
            sock.write_all(b":42\r\n").unwrap();
        });
        let mut conn = Conn::connect(addr, Duration::from_secs(5)).unwrap();
        assert_eq!(
            conn.call(&["GET", "k"]).unwrap(),
            Value::Bulk(Bytes::from_static(b"hello"))
        );
        assert_eq!(
            conn.call(&["SET", "k", "v"]).unwrap(),
            Value::Simple(Bytes::from_static(b"OK"))
        );
        assert_eq!(conn.call(&["INCR", "n"]).unwrap(), Value::Integer(42));
        server.join().unwrap();
        let err = conn.call(&["PING"]).unwrap_err();
        assert!(format!("{err:#}").contains("PING"), "{err:#}");
    }

    #[test]
    fn silence_is_a_timeout_naming_the_command() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conn = Conn::connect(addr, Duration::from_millis(50)).unwrap();
        let err = conn.call(&["GET", "k"]).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("GET k") && text.contains("timeout"), "{text}");
        drop(listener);
    }
}
