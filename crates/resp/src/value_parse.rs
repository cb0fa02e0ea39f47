//! Builds a [`Value`] from a frame with an explicit stack instead of
//! recursion, mirroring the scanner step for step (same tokens, same depth
//! rule), so that `Value::parse` and `scan_reply` agree on every input.

use std::ops::Range;

use bytes::Bytes;

use crate::token::{Aggregate, Cursor, Token, read_token};
use crate::{Limits, ProtocolError, Value};

/// The smallest element (`_\r\n`) takes three bytes, so a count can never
/// reserve more than a third of what is buffered.
const MIN_ELEMENT_LEN: usize = 3;

/// The aggregates being filled, innermost last, and the attributes waiting
/// for the element they annotate.
struct Builder {
    open: Vec<Open>,
    /// Attributes read at nesting level `.0` that annotate the next element
    /// completed at that level.
    attrs: Vec<(usize, Vec<(Value, Value)>)>,
}

/// An aggregate whose elements are still being read. Map and attribute
/// elements are stored flat (key, value, key, value, ...).
struct Open {
    kind: Aggregate,
    remaining: usize,
    items: Vec<Value>,
}

pub(crate) fn parse(buf: &Bytes, limits: &Limits) -> Result<Option<(Value, usize)>, ProtocolError> {
    let mut cur = Cursor::default();
    let mut builder = Builder {
        open: Vec::new(),
        attrs: Vec::new(),
    };
    loop {
        let Some(token) = read_token(buf, &mut cur, limits)? else {
            return Ok(None);
        };
        let value = match token {
            Token::Aggregate { kind, len } => {
                if builder.open.len() >= limits.max_depth {
                    return Err(ProtocolError::TooDeep);
                }
                let elements = kind
                    .elements(len)
                    .ok_or(ProtocolError::InvalidMultibulkLength)?;
                if elements > 0 {
                    let room = buf.len().saturating_sub(cur.pos) / MIN_ELEMENT_LEN;
                    builder.open.push(Open {
                        kind,
                        remaining: elements,
                        items: Vec::with_capacity(elements.min(room)),
                    });
                    continue;
                }
                if kind == Aggregate::Attribute {
                    builder.attrs.push((builder.open.len(), Vec::new()));
                    continue;
                }
                Open {
                    kind,
                    remaining: 0,
                    items: Vec::new(),
                }
                .into_value()
            }
            scalar => scalar_value(buf, scalar),
        };
        if let Some(root) = builder.complete(value) {
            return Ok(Some((root, cur.pos)));
        }
    }
}

fn scalar_value(buf: &Bytes, token: Token) -> Value {
    match token {
        Token::Simple(r) => Value::Simple(slice(buf, r)),
        Token::Error(r) | Token::BlobError(r) => Value::Error(slice(buf, r)),
        Token::Integer(n) => Value::Integer(n),
        Token::Bulk(r) => Value::Bulk(slice(buf, r)),
        Token::Verbatim { format, text } => Value::Verbatim {
            format,
            text: slice(buf, text),
        },
        Token::BigNumber(r) => Value::BigNumber(slice(buf, r)),
        Token::Double(f) => Value::Double(f),
        Token::Boolean(b) => Value::Boolean(b),
        Token::Null => Value::Null,
        Token::NullArray => Value::NullArray,
        // Aggregates are handled by the caller; an empty array is harmless.
        Token::Aggregate { .. } => Value::Array(Vec::new()),
    }
}

/// A zero-copy slice; the token reader only yields in-bounds ranges, and
/// this keeps `Bytes::slice` from ever being asked for another.
fn slice(buf: &Bytes, r: Range<usize>) -> Bytes {
    if r.start <= r.end && r.end <= buf.len() {
        buf.slice(r)
    } else {
        Bytes::new()
    }
}

// === impl Builder ===

impl Builder {
    /// Hands a finished element to the aggregate it belongs to, closing
    /// every aggregate it completes. Returns the root once it is complete.
    fn complete(&mut self, mut value: Value) -> Option<Value> {
        loop {
            let level = self.open.len();
            while self.attrs.last().is_some_and(|(at, _)| *at == level) {
                let Some((_, attrs)) = self.attrs.pop() else {
                    break;
                };
                value = Value::Attribute {
                    attrs,
                    value: Box::new(value),
                };
            }
            let Some(top) = self.open.last_mut() else {
                return Some(value);
            };
            top.items.push(value);
            top.remaining = top.remaining.saturating_sub(1);
            if top.remaining > 0 {
                return None;
            }
            let closed = self.open.pop()?;
            if closed.kind == Aggregate::Attribute {
                self.attrs.push((self.open.len(), pairs(closed.items)));
                return None;
            }
            value = closed.into_value();
        }
    }
}

// === impl Open ===

impl Open {
    fn into_value(self) -> Value {
        match self.kind {
            Aggregate::Array => Value::Array(self.items),
            Aggregate::Set => Value::Set(self.items),
            Aggregate::Push => Value::Push(self.items),
            Aggregate::Map => Value::Map(pairs(self.items)),
            // Attributes are closed by the builder; this keeps the match
            // total without a panic.
            Aggregate::Attribute => Value::Attribute {
                attrs: pairs(self.items),
                value: Box::new(Value::Null),
            },
        }
    }
}

/// Pairs up a flat key, value, key, value list (its length is even by
/// construction: twice the pair count).
fn pairs(items: Vec<Value>) -> Vec<(Value, Value)> {
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}
