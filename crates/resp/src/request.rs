//! A parsed request: its multibulk frame and where each argument lies in it.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

/// How many argument ranges live inside the [`Request`] itself. Almost every
/// command (`GET k`, `SET k v EX 10`, `HSET h f v`) fits, so parsing one
/// allocates nothing besides the frame it shares with the read buffer.
pub(crate) const INLINE_ARGS: usize = 8;

/// One client command.
///
/// [`frame`](Self::frame) is always a RESP multibulk frame the proxy can
/// forward unchanged: for a multibulk request, the very bytes received (a
/// slice of the client's read buffer, never copied); for an inline request
/// (`SET a b\r\n`), a multibulk encoding of its arguments made once.
/// Arguments are offsets into that frame, so [`arg_bytes`](Self::arg_bytes)
/// is a zero-copy slice too.
#[derive(Clone)]
pub struct Request {
    frame: Bytes,
    args: ArgRanges,
    inline: bool,
}

/// Where one argument lies in the frame. `start > end` marks an argument
/// that could not be addressed with 32-bit offsets (only possible through
/// [`Request::from_args`] with more than 4 GiB of arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ArgRange {
    start: u32,
    end: u32,
}

/// A small vector of [`ArgRange`]s that stays inline up to [`INLINE_ARGS`].
#[derive(Clone, Debug)]
pub(crate) enum ArgRanges {
    Inline {
        len: u8,
        ranges: [ArgRange; INLINE_ARGS],
    },
    Heap(Vec<ArgRange>),
}

// === impl Request ===

impl Request {
    pub(crate) fn new(frame: Bytes, args: ArgRanges, inline: bool) -> Self {
        Self {
            frame,
            args,
            inline,
        }
    }

    /// The multibulk frame to forward.
    pub fn frame(&self) -> &Bytes {
        &self.frame
    }

    /// The frame, giving up the argument offsets.
    pub fn into_frame(self) -> Bytes {
        self.frame
    }

    /// How many arguments, the command name included.
    pub fn arg_count(&self) -> usize {
        self.args.as_slice().len()
    }

    /// Argument `i` (0 is the command name).
    pub fn arg(&self, i: usize) -> Option<&[u8]> {
        let r = self.args.as_slice().get(i)?;
        self.frame.get(r.start as usize..r.end as usize)
    }

    /// Where argument `i` lies in the frame, `start..end` (`start > end`
    /// for one beyond 32-bit offsets): its place without slicing.
    #[inline]
    pub fn arg_place(&self, i: usize) -> Option<(u32, u32)> {
        let r = self.args.as_slice().get(i)?;
        Some((r.start, r.end))
    }

    /// Argument `i` as a zero-copy slice of the frame.
    pub fn arg_bytes(&self, i: usize) -> Option<Bytes> {
        let r = self.args.as_slice().get(i)?;
        let (start, end) = (r.start as usize, r.end as usize);
        // `Bytes::slice` panics on a bad range; check it first.
        (start <= end && end <= self.frame.len()).then(|| self.frame.slice(start..end))
    }

    /// All arguments in order, the command name first.
    pub fn args(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.args.as_slice().iter().map(|r| {
            self.frame
                .get(r.start as usize..r.end as usize)
                .unwrap_or(&[])
        })
    }

    /// Encodes `args` as a new multibulk frame with its argument offsets,
    /// for a command the proxy builds and then reads as a request (only
    /// the frame: [`crate::encode::command`]).
    ///
    /// An empty `args` gives `*0\r\n`, which Redis skips without a reply:
    /// never send one to a node whose replies are matched in order.
    pub fn from_args<A: AsRef<[u8]>>(args: &[A]) -> Request {
        let (_, size) = command_len(args);
        let mut frame = BytesMut::with_capacity(size);
        let mut ranges = ArgRanges::with_capacity(args.len());
        write_header(&mut frame, b'*', args.len());
        for a in args {
            let a = a.as_ref();
            write_header(&mut frame, b'$', a.len());
            let start = frame.len();
            frame.put_slice(a);
            ranges.push(ArgRange::new(start, frame.len()));
            frame.put_slice(b"\r\n");
        }
        Request::new(frame.freeze(), ranges, false)
    }

    /// Whether the argument offsets outgrew the inline room.
    #[cfg(test)]
    pub(crate) fn args_spilled(&self) -> bool {
        matches!(self.args, ArgRanges::Heap(_))
    }

    /// Whether this came in as an inline request (and `frame` was made by
    /// re-encoding it).
    pub fn is_inline(&self) -> bool {
        self.inline
    }
}

impl PartialEq for Request {
    fn eq(&self, other: &Self) -> bool {
        self.frame == other.frame
            && self.inline == other.inline
            && self.args.as_slice() == other.args.as_slice()
    }
}

impl Eq for Request {}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Args<'a>(&'a Request);
        impl fmt::Debug for Args<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list()
                    .entries(self.0.args().map(|a| a.escape_ascii().to_string()))
                    .finish()
            }
        }
        f.debug_struct("Request")
            .field("args", &Args(self))
            .field("inline", &self.inline)
            .finish()
    }
}

/// Writes `*n\r\n` or `$n\r\n`.
#[inline]
pub(crate) fn write_header(out: &mut BytesMut, kind: u8, n: usize) {
    // Most counts and lengths have one or two digits: one copy of the
    // whole header, no formatting.
    if let Ok(small) = u8::try_from(n)
        && small < 100
    {
        let (tens, ones) = (b'0' + small / 10, b'0' + small % 10);
        if small < 10 {
            out.put_slice(&[kind, ones, b'\r', b'\n']);
        } else {
            out.put_slice(&[kind, tens, ones, b'\r', b'\n']);
        }
        return;
    }
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n).as_bytes();
    out.reserve(digits.len() + 3);
    out.put_u8(kind);
    out.put_slice(digits);
    out.put_slice(b"\r\n");
}

/// How many arguments a command has, and the size of its frame (`*n`,
/// then each argument as a bulk string).
pub(crate) fn command_len<A: AsRef<[u8]>>(args: impl IntoIterator<Item = A>) -> (usize, usize) {
    let (n, size) = args.into_iter().fold((0usize, 0usize), |(n, size), a| {
        let a = a.as_ref().len();
        let bulk = header_len(a).saturating_add(a).saturating_add(2);
        (n.saturating_add(1), size.saturating_add(bulk))
    });
    (n, size.saturating_add(header_len(n)))
}

/// Length of a `$n\r\n` / `*n\r\n` header.
pub(crate) fn header_len(n: usize) -> usize {
    if n < 10 {
        return 4;
    }
    if n < 100 {
        return 5;
    }
    let mut digits = itoa::Buffer::new();
    digits.format(n).len() + 3
}

// === impl ArgRange ===

impl ArgRange {
    /// A range, or the unaddressable marker if it does not fit in `u32`.
    pub(crate) fn new(start: usize, end: usize) -> Self {
        match (u32::try_from(start), u32::try_from(end)) {
            (Ok(start), Ok(end)) => Self { start, end },
            _ => Self { start: 1, end: 0 },
        }
    }
}

// === impl ArgRanges ===

impl ArgRanges {
    pub(crate) fn new() -> Self {
        Self::Inline {
            len: 0,
            ranges: [ArgRange::default(); INLINE_ARGS],
        }
    }

    /// The first `len` of `ranges` (at most [`INLINE_ARGS`]).
    pub(crate) fn inline(len: usize, ranges: [ArgRange; INLINE_ARGS]) -> Self {
        Self::Inline {
            len: u8::try_from(len.min(INLINE_ARGS)).unwrap_or(0),
            ranges,
        }
    }

    /// Room for `n` ranges. Callers pass a count already capped by what is
    /// buffered; the inline form is used whenever it is enough.
    pub(crate) fn with_capacity(n: usize) -> Self {
        if n <= INLINE_ARGS {
            Self::new()
        } else {
            Self::Heap(Vec::with_capacity(n))
        }
    }

    pub(crate) fn push(&mut self, range: ArgRange) {
        match self {
            Self::Inline { len, ranges } => {
                if let Some(slot) = ranges.get_mut(usize::from(*len)) {
                    *slot = range;
                    *len += 1;
                } else {
                    let mut heap = Vec::with_capacity(INLINE_ARGS * 2);
                    heap.extend_from_slice(ranges);
                    heap.push(range);
                    *self = Self::Heap(heap);
                }
            }
            Self::Heap(v) => v.push(range),
        }
    }

    pub(crate) fn as_slice(&self) -> &[ArgRange] {
        match self {
            Self::Inline { len, ranges } => ranges.get(..usize::from(*len)).unwrap_or(&[]),
            Self::Heap(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_args_encodes_multibulk() {
        let r = Request::from_args(&["SET", "key", ""]);
        assert_eq!(
            &r.frame()[..],
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$0\r\n\r\n"
        );
        assert_eq!(r.arg_count(), 3);
        assert_eq!(r.arg(0), Some(&b"SET"[..]));
        assert_eq!(r.arg(1), Some(&b"key"[..]));
        assert_eq!(r.arg(2), Some(&b""[..]));
        assert_eq!(r.arg(3), None);
        assert_eq!(r.arg_bytes(1).as_deref(), Some(&b"key"[..]));
        assert_eq!(r.args().len(), 3);
        assert!(!r.is_inline());
    }

    #[test]
    fn from_no_args_is_an_empty_multibulk() {
        let r = Request::from_args::<&[u8]>(&[]);
        assert_eq!(&r.frame()[..], b"*0\r\n");
        assert_eq!(r.arg_count(), 0);
    }

    #[test]
    fn many_args_spill_to_the_heap() {
        let args: Vec<String> = (0..20).map(|i| format!("arg{i}")).collect();
        let r = Request::from_args(&args);
        assert_eq!(r.arg_count(), 20);
        for (i, a) in r.args().enumerate() {
            assert_eq!(a, args[i].as_bytes());
        }
        assert!(matches!(r.args, ArgRanges::Heap(_)));
    }

    #[test]
    fn unaddressable_range_reads_as_none() {
        let mut ranges = ArgRanges::new();
        ranges.push(ArgRange::new(0, usize::MAX));
        let r = Request::new(Bytes::from_static(b"abc"), ranges, false);
        assert_eq!(r.arg(0), None);
        assert_eq!(r.arg_bytes(0), None);
        assert_eq!(r.args().next(), Some(&b""[..]));
    }

    #[test]
    fn debug_shows_args() {
        let r = Request::from_args(&["GET", "a\r\n"]);
        assert_eq!(
            format!("{r:?}"),
            r#"Request { args: ["GET", "a\\r\\n"], inline: false }"#
        );
    }

    #[test]
    fn a_command_encodes_as_its_request_does() {
        for args in [
            &[][..],
            &["GET", "k"][..],
            &["MSET", "a", "", "b", "0123456789"][..],
        ] {
            let frame = crate::encode::command(args);
            assert_eq!(frame, Request::from_args(args).into_frame());
        }
    }

    #[test]
    fn header_len_counts_digits() {
        for n in [0, 1, 9, 10, 42, 99, 100, 255, 256, 123_456, usize::MAX] {
            let mut out = BytesMut::new();
            write_header(&mut out, b'$', n);
            assert_eq!(header_len(n), out.len());
            assert_eq!(out, format!("${n}\r\n").as_bytes(), "{n}");
        }
    }
}
