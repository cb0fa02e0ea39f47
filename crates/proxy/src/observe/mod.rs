//! What orthrus counts and records about itself: per-worker counters,
//! latency histograms, the SLOWLOG and the registry of connected clients.
//! Written on the request path without locks (each worker its own entry),
//! read by INFO, CLIENT LIST and the Prometheus endpoint.
//!
//! - [`stats`] — per-worker counters and instantaneous ops/sec.
//! - [`latency`] — per-family and per-node latency histograms.
//! - [`slowlog`] — the SLOWLOG.
//! - [`acl_log`] — ACL LOG: failed logins and refusals by users' rules.
//! - [`clients`] — every connected client, for CLIENT LIST/INFO/KILL.
//! - [`commands`] — calls and errors per command name (INFO commandstats,
//!   errorstats); per-worker tables behind uncontended locks.
//! - [`load`] — requests, bytes and node time per slot (per-worker
//!   tables summed when read), with a ring of recent intervals.
//! - [`hotkeys`] — the HOTKEYS session, fed by sampled requests into
//!   per-worker [`topk`] summaries (a count-min sketch and a heap),
//!   merged when read.
//! - [`throttle`] — at most one log line a second for events an outsider
//!   can repeat (clients over the limit, wrong passwords).

pub mod acl_log;
pub mod clients;
pub mod commands;
pub mod hotkeys;
pub mod latency;
pub mod load;
pub mod slowlog;
pub mod stats;
pub mod throttle;
pub mod topk;
