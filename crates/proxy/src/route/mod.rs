//! Routing: where each command's keys are and how orthrus handles it. Pure
//! data, no I/O.
//!
//! - [`kind`] — the built-in rules, per command name: its kind (local,
//!   split, fan-out, blocking, refused, ...) and its family.
//! - [`table`] — the command table built from those rules and the cluster's
//!   own `COMMAND` reply, and the route of one request.
//! - [`counted`] — the numbers of the names INFO commandstats counts.
//! - [`prefix`] — routes by key prefix: which upstream a key goes to.

// Client-supplied counts, positions and cursors meet arithmetic here: every
// operation is checked (an overflow is a clear error, never a wrap or a panic).
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

pub mod counted;
pub mod kind;
pub mod prefix;
pub mod table;
