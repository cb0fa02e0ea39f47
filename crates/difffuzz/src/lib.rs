//! orthrus-difffuzz: differential fuzzing of whole command sequences.
//!
//! Random but valid command sequences, deterministic from a seed, run
//! against one redis-server and through orthrus in front of a 3-master
//! cluster (both flushed first); the replies are compared after a
//! normalisation (`compare`), and a difference is shrunk to a minimal
//! sequence and printed as a redis-cli script.
//!
//! # Layout
//!
//! - `rng`: [`Rng`], SplitMix64, the only source of randomness.
//! - `spec`: the command table, each command's arguments in a small
//!   grammar; `grammar` parses and expands it.
//! - `generate`: [`generate::sequence`], a sequence from a seed;
//!   `fill`: the placeholders (keys of the pool, values, scripts).
//! - `sequence`: [`Sequence`] and its text form.
//! - `run`: running a sequence on one target over raw TCP.
//! - `frame`: the elements of an aggregate frame, a bulk's payload.
//! - `compare`: the normalisation and the comparison of two frames.
//! - `diff`: a sequence on both targets, the first [`Difference`].
//! - `shrink`: delta debugging of a failing sequence.
//! - `script`: a sequence as a redis-cli script.
//! - `targets`: starting a redis-server, a cluster and orthrus.
//! - The users mode (`--users N`): `world`, the users and routes drawn
//!   from the seed; `routing`, which route prefixes a command's keys may
//!   take; `users`, its targets (the reference with the users, orthrus
//!   with routes to a standalone upstream and a mirror) and its check,
//!   replies then data; `keyspace`, a server's keys and values read
//!   directly.
//! - `main.rs`: the `orthrus-difffuzz` binary.

pub mod compare;
pub mod diff;
pub mod fill;
pub mod frame;
pub mod generate;
pub mod grammar;
pub mod keyspace;
pub mod rng;
pub mod routing;
pub mod run;
pub mod script;
pub mod sequence;
pub mod shrink;
pub mod spec;
pub mod targets;
pub mod users;
pub mod world;

pub use diff::{Difference, Targets, check};
pub use rng::Rng;
pub use sequence::{Action, Proto, Sequence, Step};
