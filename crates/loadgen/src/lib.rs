//! `orthrus-bench`: the multi-process load driver that reproduces the
//! Cerberus comparison — a single redis-server against orthrus in front of a
//! Redis Cluster, at several concurrency levels, with every reply checked.
//!
//! The driver (`orthrus-bench compare`) starts the targets, then for each
//! concurrency level P spawns P copies of its own executable as hidden
//! `worker` processes. Each worker connects, says it is ready, waits for the
//! driver's go, runs the three timed sets (keys, hash, list) request/response
//! over its one connection, and prints one JSON line with its times. The
//! driver turns the times into the original's Min/Max/Avg table and writes
//! the same results as JSON, markdown and an SVG chart.
//!
//! Processes rather than threads, because that is what the original measured
//! and because a client process per connection keeps the driver's own
//! scheduling out of the figures.
//!
//! # Layout
//!
//! - [`cli`]: the subcommands, the flags of `worker`, and the entry point.
//! - [`plan`]: the flags of `compare`, and the plan they make once
//!   defaults are applied and checked.
//! - [`compare`]: the whole comparison: targets, levels, repeats, output.
//! - [`conn_memory`]: `conn-memory`, RSS per idle and per used client
//!   connection of running servers and proxies.
//! - [`zipf`]: `zipf`, GETs and SETs over Zipf-distributed keys from many
//!   threads against running targets (the reply cache's figures).
//! - [`cachecheck`]: `cache-check`, the reply cache's staleness,
//!   read-your-writes and memory checks against a cluster and an orthrus
//!   it starts itself.
//! - [`driver`]: one run: spawn P workers, release them together, collect.
//! - [`worker`]: the worker process and the JSON lines it speaks.
//! - [`workload`]: the keys/hash/list command sets and their reply checks.
//! - [`conn`]: one blocking RESP connection (`std::net::TcpStream`).
//! - [`targets`]: what is measured: a started redis-server, orthrus in front
//!   of a started cluster, or an address given on the command line.
//! - [`proxy`]: the started `orthrus` process and its readiness wait.
//! - [`results`]: the result types (per-set times, Min/Max/Avg, ratios).
//! - [`table`]: the original's fixed-width text table.
//! - [`report`]: the header, markdown and JSON files, and where they go.
//! - [`svg`]: the hand-written ratio chart.
//! - [`machine`]: cores, CPU model, kernel, versions and git commit.
//! - [`progress`]: the progress bar with its ETA.
//! - [`interrupt`]: Ctrl-C/SIGTERM handling that lets every process be
//!   stopped before exit.

pub mod cachecheck;
pub mod cli;
pub mod compare;
pub mod conn;
pub mod conn_memory;
pub mod driver;
pub mod interrupt;
pub mod machine;
pub mod plan;
pub mod progress;
pub mod proxy;
pub mod report;
pub mod results;
pub mod svg;
pub mod table;
pub mod targets;
pub mod worker;
pub mod workload;
pub mod zipf;
