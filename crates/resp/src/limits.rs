//! Size, count and depth limits applied to everything read from the wire.

/// Redis's `proto-max-bulk-len` default: 512 MiB.
pub const DEFAULT_MAX_BULK_LEN: usize = 512 * 1024 * 1024;

/// Default cap on a multibulk/aggregate element count: 1,048,576.
///
/// Redis itself accepts up to `INT_MAX` arguments per command; orthrus
/// refuses more than a million by default because a proxy holds a whole
/// request in memory before forwarding it, and no real command needs more.
/// The proxy configures it. Replies from Redis can legitimately be larger
/// (`HGETALL` on a big hash), so give the backend side its own [`Limits`]
/// (see [`Limits::for_replies`]).
pub const DEFAULT_MAX_ARRAY_LEN: usize = 1_048_576;

/// Redis's `PROTO_INLINE_MAX_SIZE`: 64 KiB. Also caps a `*N`/`$N` header
/// line that has no CRLF yet, as in Redis.
pub const DEFAULT_MAX_INLINE_LEN: usize = 64 * 1024;

/// Most arguments a client may send before it has authenticated: 10, as
/// Redis since the CVE-2021-32675 fix. A larger `*N` is refused from its
/// header line, so an unauthenticated client cannot make the proxy buffer
/// more than a few small arguments.
pub const PREAUTH_MAX_ARGS: usize = 10;

/// Longest argument a client may send before it has authenticated: 16 KiB,
/// as Redis. Also caps an inline line before authentication.
pub const PREAUTH_MAX_BULK_LEN: usize = 16 * 1024;

/// Default cap on aggregate nesting: 128 levels.
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// What the parsers accept. A header claiming more than a limit is refused
/// as soon as the header line is complete, before any byte of the body is
/// waited for or any memory is reserved for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string, in bytes. Default 512 MiB (`proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most elements in one multibulk request or reply aggregate (pairs,
    /// for maps and attributes). Default 1,048,576 (see
    /// [`DEFAULT_MAX_ARRAY_LEN`] for why it is lower than Redis's).
    pub max_array_len: usize,
    /// Longest inline request line, and longest `*N`/`$N` header line still
    /// waiting for its CRLF, in bytes. Default 64 KiB.
    pub max_inline_len: usize,
    /// Deepest nesting of reply aggregates: with `max_depth = n`, at most
    /// `n` aggregates (attributes included) may be open at once. Default
    /// 128.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bulk_len: DEFAULT_MAX_BULK_LEN,
            max_array_len: DEFAULT_MAX_ARRAY_LEN,
            max_inline_len: DEFAULT_MAX_INLINE_LEN,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

impl Limits {
    /// Limits for reading replies from a Redis node, whose framing is
    /// trusted: a reply's size and shape are set by the data (`LRANGE key 0
    /// -1`, a Lua script returning a deeply nested table, a server with a
    /// larger `proto-max-bulk-len`) rather than by a client. Aggregates up
    /// to `u32::MAX` elements, bulks up to `i64::MAX` bytes, any depth: the
    /// scanner walks nesting with its own stack (16 bytes a level, so its
    /// memory stays proportional to the reply's bytes) and never reserves
    /// memory for a declared length.
    pub fn for_replies() -> Self {
        Self {
            max_bulk_len: i64::MAX as usize,
            max_array_len: u32::MAX as usize,
            max_inline_len: DEFAULT_MAX_INLINE_LEN,
            max_depth: usize::MAX,
        }
    }
}
