//! MOVED and ASK redirections, parsed from the raw reply bytes.

use crate::{NodeAddr, Slot};

/// A cluster redirection.
///
/// Redis 7 may send an empty host (`MOVED 3999 :6381`), meaning "the host of
/// the node that sent this". [`Redirect::parse`] keeps it empty because it
/// does not know which node that was; the caller resolves it with
/// [`NodeAddr::or_host_of`] (or [`crate::Action::with_origin`]).
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Redirect {
    /// The slot has moved for good: update the slot map.
    Moved { slot: Slot, addr: NodeAddr },
    /// The slot is being migrated: ask `addr` once, with ASKING first.
    Ask { slot: Slot, addr: NodeAddr },
}

// === impl Redirect ===

impl Redirect {
    /// Parses a whole error reply frame as received: `-MOVED 3999
    /// 127.0.0.1:6381\r\n`, the same without CRLF, a RESP3 blob error
    /// (`!30\r\nMOVED ...\r\n`), or the bare error text `MOVED ...`.
    /// The address may be IPv4, a hostname, IPv6 bare (`::1:7000`, the last
    /// colon splits) or bracketed, or have an empty host (see the type doc).
    /// Anything else, including an out-of-range slot or port, is `None`.
    pub fn parse(frame: &[u8]) -> Option<Redirect> {
        let text = error_text(frame).unwrap_or_else(|| first_line(frame));
        let (moved, rest) = match text {
            [b'M', b'O', b'V', b'E', b'D', b' ', rest @ ..] => (true, rest),
            [b'A', b'S', b'K', b' ', rest @ ..] => (false, rest),
            _ => return None,
        };
        let space = rest.iter().position(|&b| b == b' ')?;
        let slot = parse_slot(rest.get(..space)?)?;
        let addr = NodeAddr::parse_bytes(rest.get(space + 1..)?, true).ok()?;
        Some(if moved {
            Redirect::Moved { slot, addr }
        } else {
            Redirect::Ask { slot, addr }
        })
    }
}

/// The text of an error frame (`-...` up to the line end, or the payload of a
/// RESP3 `!len` blob error); `None` if `frame` is not an error.
fn error_text(frame: &[u8]) -> Option<&[u8]> {
    match frame {
        [b'-', rest @ ..] => Some(first_line(rest)),
        [b'!', rest @ ..] => {
            let header = rest.iter().position(|&b| b == b'\r')?;
            let len: usize = std::str::from_utf8(rest.get(..header)?)
                .ok()?
                .parse()
                .ok()?;
            let payload = rest.get(header + 2..)?;
            // A frame cut short is still classified on what is there.
            Some(first_line(payload.get(..len).unwrap_or(payload)))
        }
        _ => None,
    }
}

fn first_line(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(bytes.len());
    bytes.get(..end).unwrap_or(bytes)
}

fn parse_slot(digits: &[u8]) -> Option<Slot> {
    if digits.is_empty() || digits.len() > 5 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    Slot::new(u16::try_from(n).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(slot: u16, host: &str, port: u16) -> Option<Redirect> {
        Some(Redirect::Moved {
            slot: Slot::new(slot)?,
            addr: NodeAddr::new(host, port),
        })
    }

    fn ask(slot: u16, host: &str, port: u16) -> Option<Redirect> {
        Some(Redirect::Ask {
            slot: Slot::new(slot)?,
            addr: NodeAddr::new(host, port),
        })
    }

    #[test]
    fn ipv4_and_hostnames() {
        assert_eq!(
            Redirect::parse(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            moved(3999, "127.0.0.1", 6381)
        );
        assert_eq!(
            Redirect::parse(b"-MOVED 3999 127.0.0.1:6381"),
            moved(3999, "127.0.0.1", 6381)
        );
        assert_eq!(
            Redirect::parse(b"MOVED 3999 127.0.0.1:6381"),
            moved(3999, "127.0.0.1", 6381)
        );
        assert_eq!(
            Redirect::parse(b"-ASK 0 redis-2.cache:7000\r\n"),
            ask(0, "redis-2.cache", 7000)
        );
        assert_eq!(Redirect::parse(b"-ASK 16383 h:1\r\n"), ask(16383, "h", 1));
    }

    #[test]
    fn ipv6() {
        assert_eq!(
            Redirect::parse(b"-MOVED 1 ::1:7000\r\n"),
            moved(1, "::1", 7000)
        );
        assert_eq!(
            Redirect::parse(b"-MOVED 1 [::1]:7000\r\n"),
            moved(1, "::1", 7000)
        );
        assert_eq!(
            Redirect::parse(b"-ASK 77 2001:db8::17:6379\r\n"),
            ask(77, "2001:db8::17", 6379)
        );
    }

    #[test]
    fn empty_host() {
        let parsed = Redirect::parse(b"-MOVED 3999 :6381\r\n");
        assert_eq!(parsed, moved(3999, "", 6381));
        let origin = NodeAddr::new("10.0.0.7", 7000);
        let Some(Redirect::Moved { addr, .. }) = parsed else {
            panic!("{parsed:?}");
        };
        assert_eq!(addr.or_host_of(&origin), NodeAddr::new("10.0.0.7", 6381));
        assert_eq!(Redirect::parse(b"-ASK 5 :7002"), ask(5, "", 7002));
    }

    #[test]
    fn resp3_blob_error() {
        let frame = b"!25\r\nMOVED 3999 127.0.0.1:6381\r\n";
        assert_eq!(Redirect::parse(frame), moved(3999, "127.0.0.1", 6381));
        // A length shorter than the text cuts it: the port is then "638".
        let frame = b"!24\r\nMOVED 3999 127.0.0.1:6381\r\n";
        assert_eq!(Redirect::parse(frame), moved(3999, "127.0.0.1", 638));
        assert_eq!(Redirect::parse(b"!x\r\nMOVED 1 h:1\r\n"), None);
        assert_eq!(Redirect::parse(b"!5"), None);
    }

    #[test]
    fn malformed() {
        let bad: &[&[u8]] = &[
            b"",
            b"-",
            b"-MOVED",
            b"-MOVED ",
            b"-MOVED 3999",
            b"-MOVED 3999 ",
            b"-MOVED 3999 127.0.0.1",
            b"-MOVED 3999 127.0.0.1:",
            b"-MOVED 3999 127.0.0.1:0",
            b"-MOVED 3999 127.0.0.1:65536",
            b"-MOVED 16384 127.0.0.1:6379",
            b"-MOVED 99999999999 127.0.0.1:6379",
            b"-MOVED -1 127.0.0.1:6379",
            b"-MOVED +1 127.0.0.1:6379",
            b"-MOVED  3999 127.0.0.1:6379",
            b"-MOVED 3999 127.0.0.1:6379 extra",
            b"-MOVED 3999 127.0.0.1:6379x",
            b"-MOVED 3999 [::1:6379",
            b"-MOVED x 127.0.0.1:6379",
            b"-moved 3999 127.0.0.1:6379",
            b"-MOVEDX 3999 127.0.0.1:6379",
            b"-ASKING 3999 127.0.0.1:6379",
            b"+MOVED 3999 127.0.0.1:6379",
            b"$5\r\nMOVED\r\n",
            b"-TRYAGAIN Multiple keys request during rehashing of slot",
            b"-ERR unknown command",
            b"-MOVED 3999 \xff\xfe:6379",
        ];
        for frame in bad {
            assert_eq!(
                Redirect::parse(frame),
                None,
                "{:?}",
                String::from_utf8_lossy(frame)
            );
        }
    }
}
