//! RESP2/RESP3 framing for orthrus, with no I/O.
//!
//! The proxy reads client bytes into a `BytesMut` and hands them to a
//! per-connection [`RequestParser`], which returns one [`Request`] per
//! complete command: the exact multibulk frame that arrived (split off the
//! read buffer, never copied) plus the offsets of its arguments, so routing
//! can look at keys and forwarding can write the frame unchanged. Replies
//! from Redis go the other way as opaque frames: [`scan_reply`] (or the
//! resumable [`ReplyScanner`]) finds where a frame ends without building
//! anything, and [`classify`] spots `-MOVED`/`-ASK`/`-TRYAGAIN` on the
//! borrowed bytes. Only the few replies the proxy must inspect or merge are
//! decoded into a [`Value`] tree. The [`encode`] functions write replies the
//! proxy produces itself.
//!
//! Nothing here trusts a length from the wire: every count, size and nesting
//! depth is checked against [`Limits`] before it is used, and no input makes
//! any function panic (the crate denies `unwrap`, `expect`, `panic!` and
//! slice indexing outside tests, and is fuzzed; see `fuzz/` at the
//! repository root).
//!
//! # Layout
//!
//! - `protocol` — [`Protocol`], the RESP version a client speaks.
//! - `limits` — [`Limits`] and the Redis default for each of them.
//! - `error` — [`ProtocolError`], whose texts match Redis's own.
//! - `number` — strict decimal parsing shared by requests and replies.
//! - `line` — finding line ends, short lines without SIMD set-up.
//! - `request` — [`Request`]: a frame plus argument offsets.
//! - `parser` — [`RequestParser`]: resumable multibulk parsing.
//! - `inline` — inline requests (`SET a b\r\n`), split like Redis's
//!   `sdssplitargs` and re-encoded as multibulk.
//! - `token` — reads one reply element header or scalar; the single source
//!   of truth for what a well-formed reply element is.
//! - `reply` — [`scan_reply`], [`ReplyScanner`], [`ReplyClass`], [`classify`].
//! - `value` — [`Value`], its accessors and its encoder.
//! - `value_parse` — builds a [`Value`] from a frame without recursion.
//! - `encode` — free functions writing RESP2/RESP3 replies.
//! - `double` — formats a double exactly like Redis (`%.17g`).

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

#[cfg(test)]
mod damaged;
mod double;
pub mod encode;
mod error;
mod inline;
mod limits;
mod line;
mod number;
mod parser;
mod protocol;
mod reply;
mod request;
mod token;
mod value;
mod value_parse;

pub use error::ProtocolError;
pub use limits::{
    DEFAULT_MAX_ARRAY_LEN, DEFAULT_MAX_BULK_LEN, DEFAULT_MAX_DEPTH, DEFAULT_MAX_INLINE_LEN, Limits,
    PREAUTH_MAX_ARGS, PREAUTH_MAX_BULK_LEN,
};
pub use number::parse_i64;
pub use parser::RequestParser;
pub use protocol::Protocol;
pub use reply::{ReplyClass, ReplyScanner, array_header, classify, integer_reply, scan_reply};
pub use request::Request;
pub use value::Value;
