//! Writing replies the proxy produces itself. Integers are formatted with
//! `itoa` on the stack; nothing here allocates beyond growing `out`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::Protocol;
use crate::double::format_double;

/// `+s\r\n`. A CR or LF in `s` would end the line early and desynchronise
/// the client, so each becomes a space.
pub fn simple(out: &mut BytesMut, s: &[u8]) {
    line(out, b'+', s);
}

/// `-msg\r\n`, with `msg` like `b"ERR unknown command"`. CR and LF inside
/// `msg` become spaces, as Redis does for its own error replies.
pub fn error(out: &mut BytesMut, msg: &[u8]) {
    line(out, b'-', msg);
}

/// `!len\r\nmsg\r\n`: a RESP3 blob error, which may hold any bytes.
pub fn blob_error(out: &mut BytesMut, msg: &[u8]) {
    blob(out, b'!', msg);
}

/// `:n\r\n`
pub fn integer(out: &mut BytesMut, n: i64) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n).as_bytes();
    out.reserve(digits.len() + 3);
    out.put_u8(b':');
    out.put_slice(digits);
    out.put_slice(b"\r\n");
}

/// A command as a client sends it (`*n`, then each argument as a bulk
/// string), in a buffer of exactly its size: a frame to send to a node.
pub fn command<I>(args: I) -> Bytes
where
    I: IntoIterator + Clone,
    I::Item: AsRef<[u8]>,
{
    let (n, size) = crate::request::command_len(args.clone());
    let mut out = BytesMut::with_capacity(size);
    header(&mut out, b'*', n);
    for a in args {
        bulk(&mut out, a.as_ref());
    }
    out.freeze()
}

/// `$len\r\nb\r\n`
pub fn bulk(out: &mut BytesMut, b: &[u8]) {
    blob(out, b'$', b);
}

/// The null bulk string: `$-1\r\n` in RESP2, `_\r\n` in RESP3.
pub fn null(out: &mut BytesMut, proto: Protocol) {
    out.put_slice(match proto {
        Protocol::Resp2 => b"$-1\r\n",
        Protocol::Resp3 => b"_\r\n",
    });
}

/// The null array: `*-1\r\n` in RESP2, `_\r\n` in RESP3.
pub fn null_array(out: &mut BytesMut, proto: Protocol) {
    out.put_slice(match proto {
        Protocol::Resp2 => b"*-1\r\n",
        Protocol::Resp3 => b"_\r\n",
    });
}

/// `*n\r\n`; the `n` elements follow.
pub fn array_header(out: &mut BytesMut, n: usize) {
    header(out, b'*', n);
}

/// How many bytes [`array_header`] writes for `n`.
pub fn array_header_len(n: usize) -> usize {
    crate::request::header_len(n)
}

/// `%n\r\n` in RESP3; in RESP2 a flat array of keys and values, `*2n\r\n`.
/// The `n` key/value pairs follow.
pub fn map_header(out: &mut BytesMut, n_pairs: usize, proto: Protocol) {
    match proto {
        Protocol::Resp2 => header(out, b'*', n_pairs.saturating_mul(2)),
        Protocol::Resp3 => header(out, b'%', n_pairs),
    }
}

/// `~n\r\n` in RESP3, `*n\r\n` in RESP2.
pub fn set_header(out: &mut BytesMut, n: usize, proto: Protocol) {
    match proto {
        Protocol::Resp2 => header(out, b'*', n),
        Protocol::Resp3 => header(out, b'~', n),
    }
}

/// `>n\r\n` in RESP3, `*n\r\n` in RESP2 (how pub/sub messages look there).
pub fn push_header(out: &mut BytesMut, n: usize, proto: Protocol) {
    match proto {
        Protocol::Resp2 => header(out, b'*', n),
        Protocol::Resp3 => header(out, b'>', n),
    }
}

/// `|n\r\n`: RESP3 attributes; `n` key/value pairs and then the annotated
/// element follow. RESP2 has no equivalent: leave attributes out there.
pub fn attribute_header(out: &mut BytesMut, n_pairs: usize) {
    header(out, b'|', n_pairs);
}

/// A double as Redis 7.0 writes it: `%.17g`, with `inf`, `-inf` and `nan`
/// spelled out; `,f\r\n` in RESP3, a bulk string in RESP2.
pub fn double(out: &mut BytesMut, f: f64, proto: Protocol) {
    let text = format_double(f);
    let text = text.as_bytes();
    match proto {
        Protocol::Resp2 => bulk(out, text),
        Protocol::Resp3 => {
            out.reserve(text.len() + 3);
            out.put_u8(b',');
            out.put_slice(text);
            out.put_slice(b"\r\n");
        }
    }
}

/// `#t\r\n`/`#f\r\n` in RESP3, `:1\r\n`/`:0\r\n` in RESP2.
pub fn boolean(out: &mut BytesMut, b: bool, proto: Protocol) {
    out.put_slice(match (proto, b) {
        (Protocol::Resp2, true) => b":1\r\n",
        (Protocol::Resp2, false) => b":0\r\n",
        (Protocol::Resp3, true) => b"#t\r\n",
        (Protocol::Resp3, false) => b"#f\r\n",
    });
}

/// `=len\r\nfmt:text\r\n` in RESP3 (`format` is `txt` or `mkd`; it is cut
/// or space-padded to three bytes), a bulk string of `text` in RESP2.
pub fn verbatim(out: &mut BytesMut, format: &str, text: &[u8], proto: Protocol) {
    match proto {
        Protocol::Resp2 => bulk(out, text),
        Protocol::Resp3 => {
            let mut fmt = [b' '; 3];
            for (slot, b) in fmt.iter_mut().zip(format.bytes()) {
                *slot = b;
            }
            verbatim_raw(out, fmt, text);
        }
    }
}

pub(crate) fn verbatim_raw(out: &mut BytesMut, format: [u8; 3], text: &[u8]) {
    header(out, b'=', text.len() + 4);
    out.reserve(text.len() + 6);
    out.put_slice(&format);
    out.put_u8(b':');
    out.put_slice(text);
    out.put_slice(b"\r\n");
}

fn header(out: &mut BytesMut, kind: u8, n: usize) {
    crate::request::write_header(out, kind, n);
}

fn blob(out: &mut BytesMut, kind: u8, b: &[u8]) {
    header(out, kind, b.len());
    out.reserve(b.len() + 2);
    out.put_slice(b);
    out.put_slice(b"\r\n");
}

fn line(out: &mut BytesMut, kind: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(kind);
    let mut rest = text;
    while let Some(i) = memchr::memchr2(b'\r', b'\n', rest) {
        let (clean, tail) = rest.split_at(i);
        out.put_slice(clean);
        out.put_u8(b' ');
        rest = tail.get(1..).unwrap_or(&[]);
    }
    out.put_slice(rest);
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(f: impl FnOnce(&mut BytesMut)) -> String {
        let mut out = BytesMut::new();
        f(&mut out);
        out.escape_ascii().to_string()
    }

    #[test]
    fn resp2_and_resp3_forms() {
        use Protocol::*;
        let cases: Vec<(String, &str)> = vec![
            (written(|o| simple(o, b"OK")), r"+OK\r\n"),
            (written(|o| simple(o, b"a\r\nb")), r"+a  b\r\n"),
            (
                written(|o| error(o, b"ERR bad\nthing")),
                r"-ERR bad thing\r\n",
            ),
            (written(|o| blob_error(o, b"a\r\nb")), r"!4\r\na\r\nb\r\n"),
            (written(|o| integer(o, -42)), r":-42\r\n"),
            (
                written(|o| integer(o, i64::MIN)),
                r":-9223372036854775808\r\n",
            ),
            (written(|o| bulk(o, b"")), r"$0\r\n\r\n"),
            (written(|o| bulk(o, b"a\r\n")), r"$3\r\na\r\n\r\n"),
            (written(|o| null(o, Resp2)), r"$-1\r\n"),
            (written(|o| null(o, Resp3)), r"_\r\n"),
            (written(|o| null_array(o, Resp2)), r"*-1\r\n"),
            (written(|o| null_array(o, Resp3)), r"_\r\n"),
            (written(|o| array_header(o, 3)), r"*3\r\n"),
            (written(|o| map_header(o, 2, Resp2)), r"*4\r\n"),
            (written(|o| map_header(o, 2, Resp3)), r"%2\r\n"),
            (written(|o| set_header(o, 2, Resp2)), r"*2\r\n"),
            (written(|o| set_header(o, 2, Resp3)), r"~2\r\n"),
            (written(|o| push_header(o, 3, Resp2)), r"*3\r\n"),
            (written(|o| push_header(o, 3, Resp3)), r">3\r\n"),
            (written(|o| attribute_header(o, 1)), r"|1\r\n"),
            (written(|o| double(o, 1.5, Resp3)), r",1.5\r\n"),
            (written(|o| double(o, 1.5, Resp2)), r"$3\r\n1.5\r\n"),
            (
                written(|o| double(o, 0.1, Resp3)),
                r",0.10000000000000001\r\n",
            ),
            (written(|o| double(o, f64::INFINITY, Resp3)), r",inf\r\n"),
            (
                written(|o| double(o, f64::NEG_INFINITY, Resp3)),
                r",-inf\r\n",
            ),
            (
                written(|o| double(o, f64::NEG_INFINITY, Resp2)),
                r"$4\r\n-inf\r\n",
            ),
            (written(|o| double(o, f64::NAN, Resp3)), r",nan\r\n"),
            (written(|o| boolean(o, true, Resp3)), r"#t\r\n"),
            (written(|o| boolean(o, false, Resp3)), r"#f\r\n"),
            (written(|o| boolean(o, true, Resp2)), r":1\r\n"),
            (written(|o| boolean(o, false, Resp2)), r":0\r\n"),
            (
                written(|o| verbatim(o, "txt", b"hi", Resp3)),
                r"=6\r\ntxt:hi\r\n",
            ),
            (
                written(|o| verbatim(o, "txt", b"hi", Resp2)),
                r"$2\r\nhi\r\n",
            ),
            (written(|o| verbatim(o, "x", b"", Resp3)), r"=4\r\nx  :\r\n"),
            (
                written(|o| verbatim(o, "markdown", b"", Resp3)),
                r"=4\r\nmar:\r\n",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
