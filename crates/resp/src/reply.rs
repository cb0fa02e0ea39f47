//! Reply frames as opaque bytes: where one ends, and whether it is a
//! redirection.
//!
//! The proxy forwards replies without decoding them, so all it needs is the
//! length of each frame. Scanning walks the elements with an explicit stack
//! of per-level remaining counts (no recursion, bounded by `max_depth`), so
//! a hostile nesting cannot overflow the thread's stack.

use crate::token::{Aggregate, Cursor, Token, flat_reply_len, read_token};
use crate::{Limits, ProtocolError};

/// Levels kept inline before spilling to the heap. Redis replies nest a
/// handful of levels at most, so scanning allocates nothing in practice.
const INLINE_LEVELS: usize = 32;

/// What a complete reply frame is, from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyClass {
    /// Not an error.
    Normal,
    /// An error the proxy passes on (`-ERR`, `-WRONGTYPE`, ...).
    Error,
    /// `-MOVED <slot> <addr>`: the slot lives elsewhere now.
    Moved,
    /// `-ASK <slot> <addr>`: retry once at addr, after `ASKING`.
    Ask,
    /// `-TRYAGAIN`: a multi-key command during resharding; retry later.
    TryAgain,
    /// `-CLUSTERDOWN`: the cluster cannot serve this slot now.
    ClusterDown,
}

/// Finds reply frames one after another in a connection's read buffer,
/// resuming where it stopped: a reply that arrives in many reads (a big
/// `LRANGE`) is walked once, not from its start on every read.
///
/// Pass the same buffer each time, with bytes only appended, until
/// [`scan`](Self::scan) returns `Some(n)`; then remove those `n` bytes and
/// go on (the scanner starts afresh at offset 0). Call
/// [`reset`](Self::reset) if the buffer changes otherwise.
#[derive(Debug)]
pub struct ReplyScanner {
    limits: Limits,
    cur: Cursor,
    levels: Levels,
}

/// An open aggregate: how many elements it still waits for, and whether it
/// is an attribute (which, once complete, still waits for the element it
/// annotates).
#[derive(Clone, Copy, Debug, Default)]
struct Level {
    remaining: usize,
    attribute: bool,
}

/// A stack of [`Level`]s, inline up to [`INLINE_LEVELS`].
#[derive(Debug)]
struct Levels {
    inline: [Level; INLINE_LEVELS],
    len: usize,
    spill: Vec<Level>,
}

/// Length in bytes of the first complete reply frame in `buf`, or
/// `Ok(None)` if `buf` holds only part of one.
///
/// Every RESP2 and RESP3 type is understood. An attribute (`|`) is returned
/// together with the element it annotates, as one frame. Streamed RESP3
/// aggregates are refused ([`ProtocolError::StreamedReply`]): Redis never
/// sends them to clients. Counts, lengths and nesting are checked against
/// `limits` (see [`Limits::for_replies`]).
///
/// This walks the frame from its start on each call; to follow a
/// connection, use a [`ReplyScanner`].
pub fn scan_reply(buf: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
    match flat_reply_len(buf, limits) {
        Some(len) => Ok(Some(len)),
        None => scan_stepwise(buf, limits),
    }
}

/// [`scan_reply`] one token at a time, for every frame the one-pass
/// reading of a flat reply leaves.
fn scan_stepwise(buf: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
    let mut cur = Cursor::default();
    match buf.first() {
        Some(b'*' | b'%' | b'~' | b'>' | b'|') => scan(buf, &mut cur, &mut Levels::new(), limits),
        // A scalar: one token is the whole frame, no stack needed.
        _ => Ok(read_token(buf, &mut cur, limits)?.map(|_| cur.pos)),
    }
}

/// The element count of an array (`*n`) or set (`~n`) reply at the start
/// of `frame` and the offset of its first element; `None` for any other
/// reply (a null array too) or a header that is not whole and well-formed
/// (its count read as the token reader reads it).
pub fn array_header(frame: &[u8]) -> Option<(usize, usize)> {
    if !matches!(frame.first(), Some(b'*' | b'~')) {
        return None;
    }
    let cr = crate::line::find_cr(frame)?;
    let next = cr.checked_add(2)?;
    if frame.get(cr..next) != Some(b"\r\n".as_slice()) {
        return None;
    }
    let count = crate::number::parse_i64(frame.get(1..cr)?)?;
    Some((usize::try_from(count).ok()?, next))
}

/// The number of an integer reply (`:n`) that is the whole of `frame`,
/// read as the token reader reads it; `None` for anything else.
pub fn integer_reply(frame: &[u8]) -> Option<i64> {
    crate::number::parse_i64(frame.strip_prefix(b":")?.strip_suffix(b"\r\n")?)
}

/// Classifies a complete frame by its first bytes, without decoding it.
/// `-` and `!` (blob) errors are errors; `MOVED`, `ASK`, `TRYAGAIN` and
/// `CLUSTERDOWN` ones are told apart.
pub fn classify(frame: &[u8]) -> ReplyClass {
    match frame.split_first() {
        Some((b'-', text)) => classify_error(text),
        Some((b'!', rest)) => {
            let body = memchr::memchr(b'\n', rest).and_then(|lf| rest.get(lf + 1..));
            classify_error(body.unwrap_or(&[]))
        }
        _ => ReplyClass::Normal,
    }
}

fn classify_error(text: &[u8]) -> ReplyClass {
    if text.starts_with(b"MOVED ") {
        ReplyClass::Moved
    } else if text.starts_with(b"ASK ") {
        ReplyClass::Ask
    } else if starts_with_word(text, b"TRYAGAIN") {
        ReplyClass::TryAgain
    } else if starts_with_word(text, b"CLUSTERDOWN") {
        ReplyClass::ClusterDown
    } else {
        ReplyClass::Error
    }
}

/// `word` followed by a space, the line end, or nothing.
fn starts_with_word(text: &[u8], word: &[u8]) -> bool {
    text.starts_with(word) && matches!(text.get(word.len()), None | Some(b' ' | b'\r'))
}

/// Walks elements from `cur` until the stack empties (a frame is complete)
/// or the bytes run out.
fn scan(
    buf: &[u8],
    cur: &mut Cursor,
    levels: &mut Levels,
    limits: &Limits,
) -> Result<Option<usize>, ProtocolError> {
    loop {
        let Some(token) = read_token(buf, cur, limits)? else {
            return Ok(None);
        };
        if let Token::Aggregate { kind, len } = token {
            if levels.len() >= limits.max_depth {
                return Err(ProtocolError::TooDeep);
            }
            let elements = kind
                .elements(len)
                .ok_or(ProtocolError::InvalidMultibulkLength)?;
            let attribute = kind == Aggregate::Attribute;
            if elements > 0 {
                levels.push(Level {
                    remaining: elements,
                    attribute,
                });
                continue;
            }
            if attribute {
                // An empty attribute annotates the element that follows.
                continue;
            }
        }
        // One element is complete; close every level it completes.
        loop {
            let Some(top) = levels.top_mut() else {
                return Ok(Some(cur.pos));
            };
            top.remaining = top.remaining.saturating_sub(1);
            if top.remaining > 0 {
                break;
            }
            if levels.pop().is_some_and(|closed| closed.attribute) {
                break;
            }
        }
    }
}

// === impl ReplyScanner ===

impl ReplyScanner {
    /// A scanner enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            cur: Cursor::default(),
            levels: Levels::new(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Changes the limits for what is read from now on.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Forgets a partly scanned frame.
    pub fn reset(&mut self) {
        self.cur = Cursor::default();
        self.levels.clear();
    }

    /// Length of the first complete frame in `buf` (see [`scan_reply`]), or
    /// `Ok(None)` to wait for more bytes, resuming the walk where the last
    /// call stopped.
    pub fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        if self.cur.pos == 0 && self.levels.len() == 0 {
            if let Some(len) = flat_reply_len(buf, &self.limits) {
                self.reset();
                return Ok(Some(len));
            }
        } else if self.cur.pos > buf.len() {
            self.reset();
        }
        let result = scan(buf, &mut self.cur, &mut self.levels, &self.limits);
        if !matches!(result, Ok(None)) {
            self.reset();
        }
        result
    }
}

impl Default for ReplyScanner {
    fn default() -> Self {
        Self::new(Limits::for_replies())
    }
}

// === impl Levels ===

impl Levels {
    fn new() -> Self {
        Self {
            inline: [Level::default(); INLINE_LEVELS],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn clear(&mut self) {
        self.len = 0;
        self.spill.clear();
    }

    fn push(&mut self, level: Level) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = level,
            None => self.spill.push(level),
        }
        self.len += 1;
    }

    fn top_mut(&mut self) -> Option<&mut Level> {
        let top = self.len.checked_sub(1)?;
        if top < INLINE_LEVELS {
            self.inline.get_mut(top)
        } else {
            self.spill.last_mut()
        }
    }

    fn pop(&mut self) -> Option<Level> {
        let top = self.len.checked_sub(1)?;
        self.len = top;
        if top < INLINE_LEVELS {
            self.inline.get(top).copied()
        } else {
            self.spill.pop()
        }
    }
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;
