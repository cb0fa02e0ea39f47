//! The reply cache (`[cache]`, off by default): replies to reads of hot
//! keys kept in orthrus's memory and served without a round trip, exact by
//! construction — filled only on connections the nodes track, made stale
//! by their invalidations and by every write through orthrus before its
//! reply returns.
//!
//! The entries, one store for the process, and their generations, are
//! `process::cache`'s.
//!
//! - [`fill`] — each worker's tracking connections, and what the nodes
//!   say on them.
//! - [`serve`] — a request's way through the cache.
//! - `mget` — MGET through it, key by key.
//! - `take` — which clients' reads and which keys it takes.
//! - `admission` — which reads look and which misses fill.

mod admission;
pub mod fill;
mod mget;
pub mod serve;
mod take;
