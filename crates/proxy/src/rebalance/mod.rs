//! `orthrus rebalance`: moves the hottest slots from the busiest masters to
//! the idlest, by the load a running orthrus measures, online.
//!
//! - [`plan`] — which slots to move. Pure.
//! - `cluster` — reading the load from orthrus and the topology, the
//!   slot owners and open migrations from the nodes.
//! - `migrate` — moving one slot, or finishing a move left half-done.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::bail;
use orthrus_cluster::{NodeAddr, Slot};

use self::cluster::{Links, Topology};
use self::plan::{Bounds, Plan, SlotLoad};
use crate::config::{BackendConfig, BackendTls};

mod cluster;
mod migrate;
pub mod plan;

/// Keyed requests orthrus must have seen in its window before a plan is
/// made from them: fewer say more about chance than about the load.
const MIN_REQUESTS: f64 = 1000.0;

/// What the plan evens out.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Measure {
    Requests,
    Bytes,
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
    pub threshold_pct: f64,
    pub max_moves: usize,
    pub apply: bool,
    pub yes: bool,
}

/// Reads the load and the topology, prints the plan and, with `apply`,
/// carries it out; a move left half-done by an earlier run is finished
/// first.
pub async fn run(opts: &Options) -> anyhow::Result<()> {
    let proxy_auth = BackendConfig {
        password: opts.password.clone(),
        ..BackendConfig::default()
    };
    let mut proxy = Links::new(proxy_auth, None);
    let (seeds, uptime) = cluster::proxy_nodes(&mut proxy, &opts.proxy).await?;
    let rates = cluster::slot_rates(&mut proxy, &opts.proxy).await?;
    let mut nodes = Links::new(opts.node_auth.clone(), opts.node_tls.clone());
    let mut topo = cluster::topology(&mut nodes, &seeds, opts.require_replicas).await?;
    if !topo.migrations.is_empty() {
        for m in &topo.migrations {
            println!(
                "slot {} is half-moved from {} to {}",
                m.slot.get(),
                addr(&topo, m.from),
                addr(&topo, m.to)
            );
        }
        if !opts.apply {
            println!("--apply finishes these moves first; the plan leaves these slots alone");
        } else if confirm(opts, "Finish these moves now?")? {
            for m in topo.migrations.clone() {
                let keys = migrate::move_slot(&mut nodes, &topo.masters, m, &mut |_| {}).await?;
                println!("slot {} finished: {keys} keys moved", m.slot.get());
            }
            topo = cluster::topology(&mut nodes, &seeds, opts.require_replicas).await?;
        } else {
            bail!("the cluster has moves left half-done; nothing changed");
        }
    }
    // The rates are over the last 10 s, or since orthrus started.
    let window = uptime.clamp(1, crate::observe::load::WINDOW.as_secs());
    let seen = rates.rates.values().map(|r| r.0).sum::<f64>() * window as f64;
    if seen < MIN_REQUESTS {
        bail!(
            "{} has measured {seen:.0} keyed requests in the last {window} s (up {uptime} s), too few to plan from (at least {MIN_REQUESTS}): send the usual traffic through it, then run again",
            opts.proxy
        );
    }
    let slots = slot_loads(&topo, &rates, opts.by);
    let bounds = Bounds {
        threshold_pct: opts.threshold_pct,
        max_moves: opts.max_moves,
    };
    let plan = plan::plan(&slots, topo.masters.len(), bounds);
    print_plan(&topo, &plan, opts);
    let mut keys = Vec::with_capacity(plan.moves.len());
    for m in &plan.moves {
        keys.push(count_keys(&mut nodes, &topo, m.from, m.slot).await?);
    }
    print_moves(&topo, &plan, &keys);
    if plan.moves.is_empty() || !opts.apply {
        if !plan.moves.is_empty() {
            println!("plan only: nothing changed; --apply carries it out");
        }
        return Ok(());
    }
    if !confirm(opts, &format!("Move {} slots?", plan.moves.len()))? {
        println!("nothing changed");
        return Ok(());
    }
    let total = plan.moves.len();
    // On a terminal, the keys of the slot being moved count up in place.
    let terminal = std::io::stdout().is_terminal();
    let mut all_keys = 0_u64;
    for (i, m) in plan.moves.iter().enumerate() {
        let head = format!(
            "[{}/{total}] slot {} {} -> {}",
            i.saturating_add(1),
            m.slot.get(),
            addr(&topo, m.from),
            addr(&topo, m.to)
        );
        let step = cluster::Migration {
            slot: m.slot,
            from: m.from,
            to: m.to,
        };
        let mut bar = |keys: u64| {
            if terminal {
                print!("\r{head}: {keys} keys");
                let _ = std::io::stdout().flush();
            }
        };
        let moved = migrate::move_slot(&mut nodes, &topo.masters, step, &mut bar).await?;
        all_keys = all_keys.saturating_add(moved);
        let back = if terminal { "\r" } else { "" };
        println!("{back}{head}: {moved} keys ({all_keys} in all)");
    }
    println!("done: {total} slots, {all_keys} keys moved");
    Ok(())
}

/// Every owned slot with its load by `by`; a slot half-moved counts as
/// migrating.
fn slot_loads(topo: &Topology, rates: &cluster::SlotRates, by: Measure) -> Vec<SlotLoad> {
    Slot::all()
        .zip(&topo.owners)
        .filter_map(|(slot, owner)| {
            let (requests, bytes) = rates.rates.get(&slot).copied().unwrap_or_default();
            Some(SlotLoad {
                slot,
                owner: (*owner)?,
                load: match by {
                    Measure::Requests => requests,
                    Measure::Bytes => bytes,
                },
                migrating: topo.migrations.iter().any(|m| m.slot == slot),
            })
        })
        .collect()
}

fn print_plan(topo: &Topology, plan: &Plan, opts: &Options) {
    let unit = match opts.by {
        Measure::Requests => "requests/s",
        Measure::Bytes => "bytes/s",
    };
    let total: f64 = plan.before.iter().sum();
    println!(
        "load by {unit} over the last 10 s: {total:.0} in all; goal: every master within {}% of the mean",
        opts.threshold_pct
    );
    println!(
        "{:<22} {:>10} {:>8} {:>12} {:>8}",
        "master", "slots now", "share", "slots after", "share"
    );
    let (now, after) = (Plan::shares(&plan.before), Plan::shares(&plan.after));
    for (i, master) in topo.masters.iter().enumerate() {
        let owned = topo.owners.iter().filter(|o| **o == Some(i)).count();
        let gained = plan.moves.iter().filter(|m| m.to == i).count();
        let lost = plan.moves.iter().filter(|m| m.from == i).count();
        println!(
            "{:<22} {:>10} {:>7.1}% {:>12} {:>7.1}%",
            master.addr.to_string(),
            owned,
            now.get(i).copied().unwrap_or_default(),
            owned.saturating_add(gained).saturating_sub(lost),
            after.get(i).copied().unwrap_or_default(),
        );
    }
    if !plan.balanced {
        println!(
            "the plan cannot bring every master within {}%: --max-moves, or too few slots carry the load (one too hot for any master, or too little to move)",
            opts.threshold_pct
        );
    }
}

fn print_moves(topo: &Topology, plan: &Plan, keys: &[u64]) {
    if plan.moves.is_empty() {
        if plan.balanced {
            println!("no move needed");
        } else {
            println!("no move would narrow the gap");
        }
        return;
    }
    println!("{} moves:", plan.moves.len());
    println!(
        "{:>6} {:<22} {:<22} {:>12} {:>8}",
        "slot", "from", "to", "load", "keys"
    );
    for (m, k) in plan.moves.iter().zip(keys) {
        println!(
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
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
