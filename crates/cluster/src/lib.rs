//! Redis Cluster logic for orthrus, with no I/O: which slot a key hashes to,
//! which node owns each slot, how to read the cluster's topology replies, and
//! what to do when a node answers MOVED, ASK, TRYAGAIN or CLUSTERDOWN.
//!
//! Everything here is a pure function of its input, so the proxy's routing
//! and redirect behaviour is unit-tested without sockets. Nothing panics on
//! any input: bad replies are typed errors or `None`.
//!
//! # Layout
//!
//! - `slot`: `Slot`, `SLOT_COUNT`, `hash_tag` and CRC16 key hashing.
//! - `addr`: `NodeAddr` (host and port, IPv6-aware) and its parser.
//! - `node`: `Node`, `Role`, `Health`.
//! - `slot_map`: `SlotMap`, the slot -> node table with replicas, patched in
//!   place on MOVED.
//! - `topology`: `SlotMap::from_shards` / `SlotMap::from_slots` and
//!   `TopologyError`.
//! - `redirect`: `Redirect`, MOVED/ASK parsed from raw reply bytes.
//! - `decision`: `decide`, `Action`, `RedirectPolicy`, `FailReason`: the
//!   redirect decision; `replica_declined`, which replica replies send a
//!   read on to the master.

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

mod addr;
mod decision;
mod node;
mod redirect;
mod slot;
mod slot_map;
mod topology;

pub use addr::{AddrParseError, NodeAddr};
pub use decision::{Action, FailReason, RedirectPolicy, decide, replica_declined};
pub use node::{Health, Node, Role};
pub use redirect::Redirect;
pub use slot::{SLOT_COUNT, Slot, SlotOutOfRange, hash_tag};
pub use slot_map::{MAX_NODES, SlotMap};
pub use topology::TopologyError;
