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

impl Conn {
    /// Sends `cmds` in one write and reads their replies.
    pub fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> Result<Vec<Value>> {
        let addr = self.inner.addr();
        self.inner
            .pipeline(cmds)
            .map_err(plain)
            .with_context(|| format!("a pipeline of {} commands on {addr}", cmds.len()))
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
    use std::net::TcpListener;

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
