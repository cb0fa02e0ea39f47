//! One blocking RESP connection over `std::net::TcpStream`: write a command,
//! read its reply, nothing in flight in between — the request/response
//! pattern the original benchmark measured, with no pipelining to flatter
//! either side.
//!
//! Every read and write has a timeout, so a target that stops answering
//! fails the run with a message instead of hanging it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::{Bytes, BytesMut};
use orthrus_resp::{Limits, Request, Value};

/// The least that is read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;
/// How much of a command an error message quotes.
const COMMAND_TEXT_MAX: usize = 160;

/// A connection to one target.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    /// Read but not yet parsed; replies are zero-copy slices of it.
    pending: Bytes,
    limits: Limits,
}

// === impl Conn ===

impl Conn {
    /// Connects with `timeout` for the connect and for every later read and
    /// write, and turns Nagle off as any Redis client does.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream,
            addr,
            pending: Bytes::new(),
            limits: Limits::default(),
        })
    }

    /// The target's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends one command and returns its reply. An error reply is
    /// `Ok(Value::Error)`: the caller decides whether it was expected.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value> {
        let request = Request::from_args(args);
        self.stream
            .write_all(request.frame())
            .with_context(|| format!("sending `{}` to {}", command_text(args), self.addr))?;
        self.read_reply().with_context(|| {
            format!(
                "reading the reply to `{}` from {}",
                command_text(args),
                self.addr
            )
        })
    }

    fn read_reply(&mut self) -> Result<Value> {
        loop {
            if !self.pending.is_empty() {
                let parsed = Value::parse(&self.pending, &self.limits)
                    .map_err(|e| anyhow!("the target sent something that is not RESP: {e}"))?;
                if let Some((value, used)) = parsed {
                    self.pending = self.pending.slice(used..);
                    return Ok(value);
                }
            }
            self.fill()?;
        }
    }

    /// Reads at least one more byte onto `pending`.
    fn fill(&mut self) -> Result<()> {
        // Reuse the buffer when no returned reply still points into it.
        let mut buf = match std::mem::take(&mut self.pending).try_into_mut() {
            Ok(buf) => buf,
            Err(shared) => BytesMut::from(&shared[..]),
        };
        let filled = buf.len();
        buf.resize(filled + READ_CHUNK.max(filled), 0);
        let read = loop {
            match self.stream.read(&mut buf[filled..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    bail!("no reply within the I/O timeout")
                }
                Err(e) => return Err(e.into()),
            }
        };
        buf.truncate(filled + read);
        self.pending = buf.freeze();
        if read == 0 {
            bail!("the target closed the connection");
        }
        Ok(())
    }
}

/// A command for messages: arguments joined by spaces, shortened.
pub fn command_text<A: AsRef<[u8]>>(args: &[A]) -> String {
    let mut text = String::new();
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(&String::from_utf8_lossy(arg.as_ref()));
        if text.len() > COMMAND_TEXT_MAX {
            let mut cut = COMMAND_TEXT_MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("...");
            break;
        }
    }
    text
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
