//! The one error type of this crate.

use std::fmt;

/// Malformed or over-limit input. The connection it came from cannot be
/// resynchronised, so the proxy answers `-ERR <Display text>` and closes it,
/// as Redis does. Texts of the request errors are Redis's own, word for word.
#[derive(thiserror::Error, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A `*N` count that is not a number or is above the limit.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// A `$N` length that is not a number, negative, or above the limit.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// A `*N` count above 10 (or an inline request of more than 10 words)
    /// from a client that has not authenticated yet.
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// A `$N` length above 16 KiB (or an inline line longer than that) from
    /// a client that has not authenticated yet.
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    /// A multibulk element that does not start with `$`.
    #[error("Protocol error: expected '$', got '{}'", Printable(*.0))]
    ExpectedDollar(u8),
    /// A bulk argument not followed by CRLF. Redis skips two bytes without
    /// looking; orthrus refuses, since the frame is forwarded as it is.
    #[error("Protocol error: expected CRLF after bulk data")]
    ExpectedCrlf,
    /// An inline request with an unterminated quote, or a closing quote not
    /// followed by a space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// An inline request line longer than `max_inline_len`.
    #[error("Protocol error: too big inline request")]
    TooBigInlineRequest,
    /// More than `max_inline_len` bytes after `*` without a CR.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMbulkCountString,
    /// More than `max_inline_len` bytes after `$` without a CR.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCountString,
    /// A request frame longer than `u32::MAX` bytes, which argument offsets
    /// cannot address.
    #[error("Protocol error: too big request")]
    TooBigRequest,
    /// A reply element starting with a byte that is no RESP2/RESP3 type.
    #[error("Protocol error: invalid reply type byte '{}'", Printable(*.0))]
    InvalidReplyType(u8),
    /// A streamed RESP3 aggregate or string (`*?`, `$?`); Redis never sends
    /// these to clients.
    #[error("Protocol error: streamed replies are not supported")]
    StreamedReply,
    /// A malformed reply: a bad length or number, a missing CRLF, a CR or
    /// LF inside a line.
    #[error("Protocol error: invalid reply")]
    InvalidReply,
    /// Reply aggregates nested deeper than `max_depth`.
    #[error("Protocol error: reply nesting too deep")]
    TooDeep,
}

/// Shows a byte the way Redis's `%c` would, except that CR and LF become
/// spaces: Redis strips them from error replies too, and a raw one would
/// break the `-ERR ...\r\n` line the proxy writes.
struct Printable(u8);

impl fmt::Display for Printable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b'\r' | b'\n' => f.write_str(" "),
            b => write!(f, "{}", char::from(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ProtocolError as E;

    #[test]
    fn texts_match_redis() {
        let cases = [
            (
                E::InvalidMultibulkLength,
                "Protocol error: invalid multibulk length",
            ),
            (E::InvalidBulkLength, "Protocol error: invalid bulk length"),
            (
                E::UnauthenticatedMultibulkLength,
                "Protocol error: unauthenticated multibulk length",
            ),
            (
                E::UnauthenticatedBulkLength,
                "Protocol error: unauthenticated bulk length",
            ),
            (
                E::ExpectedDollar(b'x'),
                "Protocol error: expected '$', got 'x'",
            ),
            (
                E::ExpectedDollar(b'\r'),
                "Protocol error: expected '$', got ' '",
            ),
            (
                E::UnbalancedQuotes,
                "Protocol error: unbalanced quotes in request",
            ),
            (
                E::TooBigInlineRequest,
                "Protocol error: too big inline request",
            ),
            (
                E::TooBigMbulkCountString,
                "Protocol error: too big mbulk count string",
            ),
            (
                E::TooBigBulkCountString,
                "Protocol error: too big bulk count string",
            ),
            (
                E::InvalidReplyType(b'?'),
                "Protocol error: invalid reply type byte '?'",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
        }
    }

    #[test]
    fn error_is_small_and_copy() {
        fn assert_copy<T: Copy + Send + Sync + 'static>() {}
        assert_copy::<E>();
        assert!(std::mem::size_of::<E>() <= 2);
    }
}
