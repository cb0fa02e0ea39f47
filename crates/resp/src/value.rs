//! [`Value`]: a decoded reply, for the few the proxy must look into or
//! merge (`CLUSTER SHARDS`, `COMMAND`, `INFO`, the parts of a split `MGET`).

use bytes::{BufMut, Bytes, BytesMut};

use crate::encode;
use crate::{Limits, Protocol, ProtocolError};

/// A decoded reply element. Strings are zero-copy slices of the frame they
/// were parsed from.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `+text`
    Simple(Bytes),
    /// `-text` (without the `-`) or the body of a `!` blob error.
    Error(Bytes),
    /// `:n`
    Integer(i64),
    /// `$len` bulk string.
    Bulk(Bytes),
    /// `$-1` (RESP2) or `_` (RESP3).
    Null,
    /// `*-1` (RESP2 null array).
    NullArray,
    /// `*n`
    Array(Vec<Value>),
    /// `%n` (RESP3).
    Map(Vec<(Value, Value)>),
    /// `~n` (RESP3).
    Set(Vec<Value>),
    /// `>n` (RESP3 out-of-band push).
    Push(Vec<Value>),
    /// `,f` (RESP3).
    Double(f64),
    /// `#t` / `#f` (RESP3).
    Boolean(bool),
    /// `(digits` (RESP3), kept as its decimal text.
    BigNumber(Bytes),
    /// `=len` (RESP3): a three-byte format (`txt`, `mkd`) and the text.
    Verbatim { format: [u8; 3], text: Bytes },
    /// `|n` (RESP3): attributes and the element they annotate.
    Attribute {
        attrs: Vec<(Value, Value)>,
        value: Box<Value>,
    },
}

impl Value {
    /// Decodes the first complete frame of `buf`; returns the value and the
    /// frame's length, or `Ok(None)` if `buf` holds only part of it. Agrees
    /// with [`scan_reply`](crate::scan_reply) on every input. It starts from
    /// the beginning on each call: wait for [`ReplyScanner`](crate::ReplyScanner)
    /// to report a whole frame before decoding a big one.
    pub fn parse(buf: &Bytes, limits: &Limits) -> Result<Option<(Value, usize)>, ProtocolError> {
        crate::value_parse::parse(buf, limits)
    }

    /// The element itself, looking through any attributes around it.
    fn inner(&self) -> &Value {
        let mut v = self;
        while let Value::Attribute { value, .. } = v {
            v = value;
        }
        v
    }

    /// The bytes of a simple string, bulk string, verbatim text or big
    /// number.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self.inner() {
            Value::Simple(b) | Value::Bulk(b) | Value::BigNumber(b) => Some(b),
            Value::Verbatim { text, .. } => Some(text),
            _ => None,
        }
    }

    /// [`as_bytes`](Self::as_bytes), if it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(self.as_bytes()?).ok()
    }

    /// An integer, or a simple/bulk string holding one in Redis's strict
    /// decimal form (`CLUSTER SLOTS` ports are integers, `INFO` fields are
    /// text).
    pub fn as_int(&self) -> Option<i64> {
        match self.inner() {
            Value::Integer(n) => Some(*n),
            Value::Simple(b) | Value::Bulk(b) => crate::number::parse_i64(b),
            _ => None,
        }
    }

    /// The elements of an array, set or push.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self.inner() {
            Value::Array(items) | Value::Set(items) | Value::Push(items) => Some(items),
            _ => None,
        }
    }

    /// Whether this is an error (`-` or `!`).
    pub fn is_error(&self) -> bool {
        matches!(self.inner(), Value::Error(_))
    }

    /// Key/value pairs of a RESP3 map, or of a RESP2 flat array of
    /// alternating keys and values (how `CLUSTER SHARDS` and `HGETALL`
    /// answer in RESP2). `None` for anything else, odd arrays included.
    pub fn to_pairs(&self) -> Option<Vec<(&Value, &Value)>> {
        Some(self.pairs()?.collect())
    }

    /// The value under the ASCII key `name` (case-sensitive) in a map or
    /// flat key/value array.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.pairs()?
            .find(|(k, _)| k.as_bytes() == Some(name.as_bytes()))
            .map(|(_, v)| v)
    }

    fn pairs(&self) -> Option<Pairs<'_>> {
        match self.inner() {
            Value::Map(pairs) => Some(Pairs::Map(pairs.iter())),
            Value::Array(items) if items.len() % 2 == 0 => Some(Pairs::Flat(items.chunks_exact(2))),
            _ => None,
        }
    }

    /// Writes the value as RESP, RESP3 types as they are. The nulls are
    /// written `$-1` and `*-1`, which RESP3 clients read too; use
    /// [`encode_for`](Self::encode_for) to write for one protocol.
    pub fn encode(&self, out: &mut BytesMut) {
        self.write(out, None);
    }

    /// Writes the value for a client speaking `proto`. For RESP2, RESP3
    /// types are converted as Redis converts them: maps to flat arrays,
    /// sets and pushes to arrays, doubles, big numbers and verbatim text to
    /// bulk strings, booleans to `:1`/`:0`, blob errors to simple errors;
    /// attributes are dropped. For RESP3, nulls are written `_`.
    pub fn encode_for(&self, out: &mut BytesMut, proto: Protocol) {
        self.write(out, Some(proto));
    }

    /// `proto: None` writes everything as it is.
    fn write(&self, out: &mut BytesMut, proto: Option<Protocol>) {
        let resp2 = proto == Some(Protocol::Resp2);
        match self {
            Value::Simple(s) => encode::simple(out, s),
            Value::Error(e) => write_error(out, e, resp2),
            Value::Integer(n) => encode::integer(out, *n),
            Value::Bulk(b) => encode::bulk(out, b),
            Value::Null => encode::null(out, proto.unwrap_or(Protocol::Resp2)),
            Value::NullArray => encode::null_array(out, proto.unwrap_or(Protocol::Resp2)),
            Value::Array(items) => {
                encode::array_header(out, items.len());
                write_all(out, items, proto);
            }
            Value::Set(items) => {
                encode::set_header(out, items.len(), proto.unwrap_or(Protocol::Resp3));
                write_all(out, items, proto);
            }
            Value::Push(items) => {
                encode::push_header(out, items.len(), proto.unwrap_or(Protocol::Resp3));
                write_all(out, items, proto);
            }
            Value::Map(pairs) => {
                encode::map_header(out, pairs.len(), proto.unwrap_or(Protocol::Resp3));
                write_pairs(out, pairs, proto);
            }
            Value::Double(f) => encode::double(out, *f, proto.unwrap_or(Protocol::Resp3)),
            Value::Boolean(b) => encode::boolean(out, *b, proto.unwrap_or(Protocol::Resp3)),
            Value::BigNumber(digits) if resp2 => encode::bulk(out, digits),
            Value::BigNumber(digits) => {
                out.reserve(digits.len() + 3);
                out.put_u8(b'(');
                out.put_slice(digits);
                out.put_slice(b"\r\n");
            }
            Value::Verbatim { text, .. } if resp2 => encode::bulk(out, text),
            Value::Verbatim { format, text } => encode::verbatim_raw(out, *format, text),
            Value::Attribute { value, .. } if resp2 => value.write(out, proto),
            Value::Attribute { attrs, value } => {
                encode::attribute_header(out, attrs.len());
                write_pairs(out, attrs, proto);
                value.write(out, proto);
            }
        }
    }
}

/// Iterates the pairs of a map or of a flat key/value array.
enum Pairs<'a> {
    Map(std::slice::Iter<'a, (Value, Value)>),
    Flat(std::slice::ChunksExact<'a, Value>),
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a Value, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Pairs::Map(it) => it.next().map(|(k, v)| (k, v)),
            Pairs::Flat(it) => match it.next()? {
                [k, v] => Some((k, v)),
                _ => None,
            },
        }
    }
}

fn write_all(out: &mut BytesMut, items: &[Value], proto: Option<Protocol>) {
    for item in items {
        item.write(out, proto);
    }
}

fn write_pairs(out: &mut BytesMut, pairs: &[(Value, Value)], proto: Option<Protocol>) {
    for (k, v) in pairs {
        k.write(out, proto);
        v.write(out, proto);
    }
}

/// An error text that cannot go on one `-` line (it holds CR or LF) is a
/// blob error in RESP3, and is flattened onto one line for RESP2.
fn write_error(out: &mut BytesMut, text: &[u8], resp2: bool) {
    if resp2 || memchr::memchr2(b'\r', b'\n', text).is_none() {
        encode::error(out, text);
    } else {
        encode::blob_error(out, text);
    }
}

#[cfg(test)]
#[path = "value_tests.rs"]
mod tests;
