//! A tiny synchronous RESP client over a blocking `TcpStream` (or the Unix
//! socket of a TLS-only node): enough to administer nodes and to drive
//! tests, with timeouts on every read and write so that a paused or wedged
//! server fails a test instead of hanging it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use orthrus_resp::{Limits, Value};

use crate::DevError;

/// Read, write and connect timeout of a new [`Conn`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much is read from the socket at a time at least.
const READ_CHUNK: usize = 16 * 1024;
/// How much of a command is kept in error messages.
/// How much of a command an error message quotes.
pub const COMMAND_TEXT_MAX: usize = 120;

/// A blocking connection to one server.
#[derive(Debug)]
pub struct Conn {
    stream: Stream,
    /// The server's TCP address (for a Unix socket, the node's TLS port).
    addr: SocketAddr,
    /// Bytes read but not yet returned as values. Replies are parsed straight
    /// out of it, so values share its allocation instead of copying.
    pending: Bytes,
    limits: Limits,
}

/// What a [`Conn`] talks over.
#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

// === impl Conn ===

impl Conn {
    /// Connects with [`DEFAULT_TIMEOUT`] for connecting, reading and writing.
    pub fn connect(addr: SocketAddr) -> Result<Conn, DevError> {
        Conn::connect_timeout(addr, DEFAULT_TIMEOUT)
    }

    /// Connects with `timeout` for connecting, reading and writing.
    pub fn connect_timeout(addr: SocketAddr, timeout: Duration) -> Result<Conn, DevError> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        let mut conn = Conn {
            stream: Stream::Tcp(stream),
            addr,
            pending: Bytes::new(),
            limits: Limits::default(),
        };
        conn.set_timeout(Some(timeout))?;
        Ok(conn)
    }

    /// Connects over the Unix socket at `path` (of the server that `addr`
    /// names in messages), with `timeout` for reading and writing.
    pub fn connect_unix(
        path: &Path,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Conn, DevError> {
        let stream = UnixStream::connect(path)?;
        let mut conn = Conn {
            stream: Stream::Unix(stream),
            addr,
            pending: Bytes::new(),
            limits: Limits::default(),
        };
        conn.set_timeout(Some(timeout))?;
        Ok(conn)
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes the read and write timeout (`None`: wait forever), e.g. around
    /// a `DEBUG SLEEP` or a blocking command.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), DevError> {
        match &self.stream {
            Stream::Tcp(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)?;
            }
            Stream::Unix(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)?;
            }
        }
        Ok(())
    }

    /// `AUTH password`, failing on an error reply.
    pub fn auth(&mut self, password: &str) -> Result<(), DevError> {
        self.cmd_ok(&["AUTH", password]).map(drop)
    }

    /// Sends one command and reads its reply. An error reply is
    /// `Ok(Value::Error)`: tests often expect one.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, DevError> {
        self.send_raw(&encode_command(args))?;
        self.read_value()
    }

    /// Like [`Conn::cmd`], but an error reply is `Err(DevError::Server)`.
    pub fn cmd_ok<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, DevError> {
        let reply = self.cmd(args)?;
        check_reply(args, reply)
    }

    /// Writes every command in one write, then reads one reply per command.
    /// Error replies are returned in place, as `Value::Error`.
    pub fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> Result<Vec<Value>, DevError> {
        let mut out = Vec::new();
        for args in cmds {
            encode_command_into(args, &mut out);
        }
        self.send_raw(&out)?;
        cmds.iter().map(|_| self.read_value()).collect()
    }

    /// Writes bytes as they are (inline commands, malformed input, halves of
    /// a frame).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), DevError> {
        let written = match &mut self.stream {
            Stream::Tcp(s) => s.write_all(bytes),
            Stream::Unix(s) => s.write_all(bytes),
        };
        written.map_err(|e| self.io_error(e, "writing"))
    }

    /// Reads the next reply (or push message).
    pub fn read_value(&mut self) -> Result<Value, DevError> {
        loop {
            if !self.pending.is_empty() {
                let parsed = Value::parse(&self.pending, &self.limits).map_err(|source| {
                    DevError::Protocol {
                        addr: self.addr,
                        source,
                    }
                })?;
                if let Some((value, used)) = parsed {
                    self.pending = self.pending.slice(used..);
                    return Ok(value);
                }
            }
            self.fill()?;
        }
    }

    /// Reads at least one more byte onto `pending`.
    fn fill(&mut self) -> Result<(), DevError> {
        // Reuse the allocation when no returned value still points into it;
        // otherwise copy only the incomplete tail.
        let mut buf = match std::mem::take(&mut self.pending).try_into_mut() {
            Ok(buf) => buf,
            Err(shared) => BytesMut::from(&shared[..]),
        };
        let filled = buf.len();
        buf.resize(filled + READ_CHUNK.max(filled), 0);
        let read = loop {
            let read = match &mut self.stream {
                Stream::Tcp(s) => s.read(&mut buf[filled..]),
                Stream::Unix(s) => s.read(&mut buf[filled..]),
            };
            match read {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e, "reading a reply")),
            }
        };
        buf.truncate(filled + read);
        self.pending = buf.freeze();
        if read == 0 {
            return Err(DevError::Closed { addr: self.addr });
        }
        Ok(())
    }

    fn io_error(&self, e: io::Error, doing: &str) -> DevError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => DevError::Timeout {
                what: format!("{doing} from/to {}", self.addr),
            },
            _ => DevError::Io(e),
        }
    }
}

/// The RESP multibulk encoding of a command.
pub(crate) fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command_into(args, &mut out);
    out
}

fn encode_command_into<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    out.extend_from_slice(orthrus_resp::Request::from_args(args).frame());
}

/// `Err(DevError::Server)` for an error reply, else the reply.
pub(crate) fn check_reply<A: AsRef<[u8]>>(args: &[A], reply: Value) -> Result<Value, DevError> {
    match reply {
        Value::Error(text) => Err(DevError::Server {
            cmd: command_text(args),
            reply: String::from_utf8_lossy(&text).into_owned(),
        }),
        other => Ok(other),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    #[test]
    fn encodes_multibulk() {
        assert_eq!(
            encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn command_text_is_shortened_on_a_char_boundary() {
        let long = "é".repeat(200);
        let text = command_text(&["SET", long.as_str()]);
        assert!(text.ends_with("..."));
        assert!(text.len() <= COMMAND_TEXT_MAX + 3);
        assert_eq!(command_text(&["GET", "k"]), "GET k");
    }

    /// A fake server that dribbles replies a few bytes at a time and then
    /// pipelines several in one write: every split point must be handled.
    #[test]
    fn reads_split_and_batched_replies() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let mut req = [0u8; 64];
            let _ = sock.read(&mut req).unwrap();
            for piece in [&b"$5\r"[..], b"\nhel", b"lo\r", b"\n"] {
                sock.write_all(piece).unwrap();
                sock.flush().unwrap();
                thread::sleep(Duration::from_millis(5));
            }
            sock.write_all(b"+OK\r\n:42\r\n-ERR nope\r\n").unwrap();
        });
        let mut conn = Conn::connect(addr).unwrap();
        assert_eq!(
            conn.cmd(&["GET", "k"]).unwrap(),
            Value::Bulk(Bytes::from_static(b"hello"))
        );
        assert_eq!(
            conn.read_value().unwrap(),
            Value::Simple(Bytes::from_static(b"OK"))
        );
        assert_eq!(conn.read_value().unwrap(), Value::Integer(42));
        assert!(matches!(conn.read_value().unwrap(), Value::Error(_)));
        server.join().unwrap();
        assert!(matches!(conn.read_value(), Err(DevError::Closed { .. })));
    }

    #[test]
    fn read_timeout_is_a_timeout_error() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conn = Conn::connect_timeout(addr, Duration::from_millis(50)).unwrap();
        let err = conn.read_value().unwrap_err();
        assert!(matches!(err, DevError::Timeout { .. }), "{err}");
        drop(listener);
    }
}
