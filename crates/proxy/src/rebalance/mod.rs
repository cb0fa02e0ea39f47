//! `orthrus rebalance`: moves the hottest slots from the busiest masters to
//! the idlest, by the load a running orthrus measures or by the engine's
//! own per-slot figures, online.
//!
//! - [`plan`] — which slots to move. Pure.
//! - `cluster` — reading the load from orthrus and the topology, the
//!   slot owners and open migrations from the nodes.
//! - `stats` — the engine's per-slot figures (`CLUSTER SLOT-STATS`).
//! - `apply` — carrying the plan out, by the method chosen, and stopping
//!   on an interrupt.
//! - `atomic` — moving one slot with `CLUSTER MIGRATESLOTS`.
//! - `migrate` — moving one slot with MIGRATE, or finishing such a move
//!   left half-done.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead as _, Write as _};
use std::time::Duration;

use anyhow::bail;
use orthrus_cluster::{NodeAddr, Slot};

use self::apply::Mover;
use self::cluster::{Links, Topology};
use self::plan::{Bounds, Plan, SlotLoad};
use self::stats::Metric;
use crate::config::{BackendConfig, BackendTls};

/// Prints a line of the run's report. A closed stdout (`| head`) is no
/// error: the run goes on, so that a move under way finishes or is cancelled
/// as it would be.
macro_rules! say {
    () => {{
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod apply;
mod atomic;
mod cluster;
mod migrate;
pub mod plan;
mod stats;

pub use self::apply::Interrupts;

/// Keyed requests orthrus must have seen in its window before a plan is
/// made from them: fewer say more about chance than about the load.
const MIN_REQUESTS: f64 = 1000.0;

/// What the plan evens out.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Measure {
    /// Keyed requests per second, as the orthrus of `--proxy` counts them.
    Requests,
    /// Request and reply bytes per second, as that orthrus counts them.
    Bytes,
    /// CPU time per second per slot, from CLUSTER SLOT-STATS.
    Cpu,
    /// Network bytes in and out per second per slot, from SLOT-STATS.
    NetBytes,
    /// Keys per slot, from SLOT-STATS.
    Keys,
}

/// How to move slots.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Method {
    /// Atomic when every master offers CLUSTER MIGRATESLOTS, else legacy.
    Auto,
    /// CLUSTER MIGRATESLOTS; refused where a master lacks it.
    Atomic,
    /// SETSLOT and MIGRATE.
    Legacy,
}

/// The flags of `orthrus rebalance`.
#[derive(Clone, Debug)]
pub struct Options {
    /// The orthrus whose measured load the plan follows.
    pub proxy: NodeAddr,
    /// orthrus's client password, if it wants one.
    pub password: Option<String>,
    /// How to reach the nodes: orthrus's `[backend]` username and
    /// password (MIGRATE passes them on).
    pub node_auth: BackendConfig,
    /// TLS to the nodes, as orthrus's `[backend.tls]`.
    pub node_tls: Option<BackendTls>,
    /// Refuse a cluster with a master that has no usable replica.
    pub require_replicas: bool,
    pub by: Measure,
    /// How long the engine's running totals (CPU, network) are watched.
    pub sample: Duration,
    pub method: Method,
    pub threshold_pct: f64,
    pub max_moves: usize,
    pub apply: bool,
    pub yes: bool,
    /// SIGINT and SIGTERM, as the binary hands them on.
    pub interrupts: Interrupts,
}

// === impl Measure ===

impl Measure {
    /// The engine's figure it is read from, if it is not orthrus's own.
    fn engine(self) -> Option<Metric> {
        match self {
            Measure::Requests | Measure::Bytes => None,
            Measure::Cpu => Some(Metric::Cpu),
            Measure::NetBytes => Some(Metric::NetBytes),
            Measure::Keys => Some(Metric::Keys),
        }
    }

    fn unit(self) -> &'static str {
        match (self, self.engine()) {
            (_, Some(metric)) => metric.unit(),
            (Measure::Bytes, None) => "bytes/s",
            _ => "requests/s",
        }
    }
}

/// Reads the load and the topology, prints the plan and, with `apply`,
/// carries it out; a move left half-done by an earlier run is finished
/// first, and an atomic migration still under way is waited for.
pub async fn run(opts: &Options) -> anyhow::Result<()> {
    let proxy_auth = BackendConfig {
        password: opts.password.clone(),
        ..BackendConfig::default()
    };
    let mut proxy = Links::new(proxy_auth, None);
    let (seeds, uptime) = cluster::proxy_nodes(&mut proxy, &opts.proxy).await?;
    let mut nodes = Links::new(opts.node_auth.clone(), opts.node_tls.clone());
    let mut topo = cluster::topology(&mut nodes, &seeds, opts.require_replicas).await?;
    let mover = choose(&mut nodes, &topo, opts.method).await?;
    let busy = under_way(&mut nodes, &topo, mover, opts).await?;
    if !busy.is_empty() && opts.apply {
        topo = cluster::topology(&mut nodes, &seeds, opts.require_replicas).await?;
    }
    if !topo.migrations.is_empty() {
        finish_half_done(&mut nodes, &topo, opts).await?;
        topo = cluster::topology(&mut nodes, &seeds, opts.require_replicas).await?;
    }
    let (loads, source) = match opts.by.engine() {
        Some(metric) => {
            let loads = stats::slot_loads(&mut nodes, &topo.masters, metric, opts.sample).await?;
            let over = if metric.is_total() {
                format!(" over {} s", opts.sample.as_secs_f64())
            } else {
                String::new()
            };
            (
                loads,
                format!("CLUSTER SLOT-STATS of every master (all clients){over}"),
            )
        }
        None => (
            proxy_loads(&mut proxy, opts, uptime).await?,
            format!(
                "orthrus {} (its own clients only) over the last 10 s",
                opts.proxy
            ),
        ),
    };
    let slots = slot_loads(&topo, &loads, &busy);
    let bounds = Bounds {
        threshold_pct: opts.threshold_pct,
        max_moves: opts.max_moves,
    };
    let plan = plan::plan(&slots, topo.masters.len(), bounds);
    print_plan(&topo, &plan, opts, &source);
    let mut keys = Vec::with_capacity(plan.moves.len());
    for m in &plan.moves {
        keys.push(count_keys(&mut nodes, &topo, m.from, m.slot).await?);
    }
    print_moves(&topo, &plan, &keys);
    if plan.moves.is_empty() || !opts.apply {
        if !plan.moves.is_empty() {
            say!("plan only: nothing changed; --apply carries it out");
        }
        return Ok(());
    }
    if !confirm(opts, &format!("Move {} slots?", plan.moves.len()))? {
        say!("nothing changed");
        return Ok(());
    }
    apply::apply(&mut nodes, &topo, &plan, &keys, mover, &opts.interrupts).await
}

/// The method for `method` on this cluster, said on the output; refuses
/// `atomic` where a master lacks CLUSTER MIGRATESLOTS, before anything
/// moves.
async fn choose(nodes: &mut Links, topo: &Topology, method: Method) -> anyhow::Result<Mover> {
    if method == Method::Legacy {
        say!("method: {}: --method legacy", Mover::Legacy.name());
        return Ok(Mover::Legacy);
    }
    let lacking = atomic::lacking(nodes, &topo.masters).await?;
    let names = || {
        let list: Vec<String> = lacking.iter().map(ToString::to_string).collect();
        let verb = if list.len() == 1 { "does" } else { "do" };
        format!("{} {verb}", list.join(", "))
    };
    if lacking.is_empty() {
        say!("method: {}: every master offers it", Mover::Atomic.name());
        return Ok(Mover::Atomic);
    }
    if method == Method::Atomic {
        bail!(
            "--method atomic: {} not offer CLUSTER MIGRATESLOTS (atomic slot migration is Valkey 9's; Redis 7 has none); nothing changed: use --method legacy or auto",
            names()
        );
    }
    say!(
        "method: {}: {} not offer CLUSTER MIGRATESLOTS",
        Mover::Legacy.name(),
        names()
    );
    Ok(Mover::Legacy)
}

/// Atomic migrations still under way on the masters (an earlier run cut
/// off without its cancel, another tool, an operator): reported; with
/// `--apply` waited for, as the slots they move are about to change
/// owner; without, their slots are left out of the plan, which they
/// return.
async fn under_way(
    nodes: &mut Links,
    topo: &Topology,
    mover: Mover,
    opts: &Options,
) -> anyhow::Result<HashSet<Slot>> {
    if mover != Mover::Atomic {
        return Ok(HashSet::new());
    }
    let running = atomic::running(nodes, &topo.masters).await?;
    let mut busy = HashSet::new();
    for (i, job) in &running {
        say!(
            "an atomic migration is under way on {}: slots {} to node {} ({})",
            addr(topo, *i),
            job.slot_ranges,
            job.target_node,
            job.state
        );
        busy.extend(job.slots());
    }
    if running.is_empty() || !opts.apply {
        if !running.is_empty() {
            say!("--apply waits for these to end first; the plan leaves these slots alone");
        }
        return Ok(busy);
    }
    for (i, job) in running {
        let Some(src) = topo.masters.get(i) else {
            continue;
        };
        let job = atomic::follow(nodes, src, &job.name, &mut |_| {}).await?;
        say!("slots {} ended {}", job.slot_ranges, job.outcome());
    }
    Ok(busy)
}

/// Finishes the legacy moves left half-done (MIGRATING/IMPORTING), by
/// MIGRATE as they were begun, or refuses to go on without them.
async fn finish_half_done(
    nodes: &mut Links,
    topo: &Topology,
    opts: &Options,
) -> anyhow::Result<()> {
    for m in &topo.migrations {
        say!(
            "slot {} is half-moved from {} to {}",
            m.slot.get(),
            addr(topo, m.from),
            addr(topo, m.to)
        );
    }
    if !opts.apply {
        say!("--apply finishes these moves first; the plan leaves these slots alone");
        return Ok(());
    }
    if !confirm(opts, "Finish these moves now?")? {
        bail!("the cluster has moves left half-done; nothing changed");
    }
    for m in topo.migrations.clone() {
        let keys = migrate::move_slot(nodes, &topo.masters, m, &mut |_| {}).await?;
        say!("slot {} finished: {keys} keys moved", m.slot.get());
    }
    Ok(())
}

/// Every slot's load by orthrus's own measure, refused when it has seen
/// too little to plan from.
async fn proxy_loads(
    proxy: &mut Links,
    opts: &Options,
    uptime: u64,
) -> anyhow::Result<HashMap<Slot, f64>> {
    let rates = cluster::slot_rates(proxy, &opts.proxy).await?;
    // The rates are over the last 10 s, or since orthrus started.
    let window = uptime.clamp(1, crate::observe::load::WINDOW.as_secs());
    let seen = rates.rates.values().map(|r| r.0).sum::<f64>() * window as f64;
    if seen < MIN_REQUESTS {
        bail!(
            "{} has measured {seen:.0} keyed requests in the last {window} s (up {uptime} s), too few to plan from (at least {MIN_REQUESTS}): send the usual traffic through it, then run again",
            opts.proxy
        );
    }
    Ok(rates
        .rates
        .into_iter()
        .map(|(slot, (requests, bytes))| {
            (
                slot,
                if opts.by == Measure::Bytes {
                    bytes
                } else {
                    requests
                },
            )
        })
        .collect())
}

/// Every owned slot with its load; a slot half-moved, or under an atomic
/// migration (`busy`), counts as migrating.
fn slot_loads(topo: &Topology, loads: &HashMap<Slot, f64>, busy: &HashSet<Slot>) -> Vec<SlotLoad> {
    Slot::all()
        .zip(&topo.owners)
        .filter_map(|(slot, owner)| {
            Some(SlotLoad {
                slot,
                owner: (*owner)?,
                load: loads.get(&slot).copied().unwrap_or_default(),
                migrating: busy.contains(&slot) || topo.migrations.iter().any(|m| m.slot == slot),
            })
        })
        .collect()
}

fn print_plan(topo: &Topology, plan: &Plan, opts: &Options, source: &str) {
    let unit = opts.by.unit();
    let total: f64 = plan.before.iter().sum();
    say!(
        "load by {unit}, from {source}: {total:.0} in all; goal: every master within {}% of the mean",
        opts.threshold_pct
    );
    say!(
        "{:<22} {:>10} {:>8} {:>12} {:>8}",
        "master",
        "slots now",
        "share",
        "slots after",
        "share"
    );
    let (now, after) = (Plan::shares(&plan.before), Plan::shares(&plan.after));
    for (i, master) in topo.masters.iter().enumerate() {
        let owned = topo.owners.iter().filter(|o| **o == Some(i)).count();
        let gained = plan.moves.iter().filter(|m| m.to == i).count();
        let lost = plan.moves.iter().filter(|m| m.from == i).count();
        say!(
            "{:<22} {:>10} {:>7.1}% {:>12} {:>7.1}%",
            master.addr.to_string(),
            owned,
            now.get(i).copied().unwrap_or_default(),
            owned.saturating_add(gained).saturating_sub(lost),
            after.get(i).copied().unwrap_or_default(),
        );
    }
    if !plan.balanced {
        say!(
            "the plan cannot bring every master within {}%: --max-moves, or too few slots carry the load (one too hot for any master, or too little to move)",
            opts.threshold_pct
        );
    }
}

fn print_moves(topo: &Topology, plan: &Plan, keys: &[u64]) {
    if plan.moves.is_empty() {
        if plan.balanced {
            say!("no move needed");
        } else {
            say!("no move would narrow the gap");
        }
        return;
    }
    say!("{} moves:", plan.moves.len());
    say!(
        "{:>6} {:<22} {:<22} {:>12} {:>8}",
        "slot",
        "from",
        "to",
        "load",
        "keys"
    );
    for (m, k) in plan.moves.iter().zip(keys) {
        say!(
            "{:>6} {:<22} {:<22} {:>12.0} {:>8}",
            m.slot.get(),
            addr(topo, m.from),
            addr(topo, m.to),
            m.load,
            k
        );
    }
}

async fn count_keys(
    links: &mut Links,
    topo: &Topology,
    master: usize,
    slot: Slot,
) -> anyhow::Result<u64> {
    let Some(m) = topo.masters.get(master) else {
        bail!("no master {master}");
    };
    let n = slot.get().to_string();
    let reply = links
        .call(&m.addr, &[b"CLUSTER", b"COUNTKEYSINSLOT", n.as_bytes()])
        .await?;
    Ok(reply
        .as_int()
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0))
}

fn addr(topo: &Topology, master: usize) -> String {
    topo.masters
        .get(master)
        .map_or_else(|| "?".to_owned(), |m| m.addr.to_string())
}

/// `--yes`, or the operator's `y` on standard input.
fn confirm(opts: &Options, question: &str) -> anyhow::Result<bool> {
    if opts.yes {
        return Ok(true);
    }
    write!(std::io::stdout(), "{question} [y/N] ")?;
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rebalance::cluster::Master;

    #[test]
    fn slots_under_an_atomic_migration_are_not_planned() {
        let master = |port: u16| Master {
            id: format!("id{port}"),
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        };
        let topo = Topology {
            masters: vec![master(1), master(2)],
            owners: (0..16384_u32)
                .map(|s| Some(usize::from(s >= 8192)))
                .collect(),
            migrations: Vec::new(),
        };
        let loads: HashMap<Slot, f64> = (1..=3).map(|n| (Slot::new(n).unwrap(), 100.0)).collect();
        let bounds = Bounds {
            threshold_pct: 10.0,
            max_moves: 1,
        };
        let first = |busy: &HashSet<Slot>| {
            plan::plan(&slot_loads(&topo, &loads, busy), 2, bounds)
                .moves
                .first()
                .map(|m| m.slot.get())
        };
        assert_eq!(first(&HashSet::new()), Some(1));
        assert_eq!(first(&HashSet::from([Slot::new(1).unwrap()])), Some(2));
    }
}
