//! Carrying a plan out, slot by slot, by the method chosen for the
//! cluster; and what an interrupt (SIGINT, SIGTERM) does meanwhile: an
//! atomic migration under way is cancelled on its source (the slot stays
//! where it was), a legacy move is left half-done for the next run to
//! finish; either way the run stops there and says so.

use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::bail;
use tokio::sync::watch;

use super::cluster::{Links, Migration, Topology};
use super::plan::Plan;
use super::{addr, atomic, migrate};

/// How slots are moved.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Mover {
    /// `CLUSTER MIGRATESLOTS` on the source, followed with
    /// `CLUSTER GETSLOTMIGRATIONS`.
    Atomic,
    /// SETSLOT IMPORTING/MIGRATING, MIGRATE in batches, SETSLOT NODE.
    Legacy,
}

/// SIGINT and SIGTERM, handed from the thread that takes them to the move
/// under way. Before the moves start (and after they end) there is
/// nothing to stop, and the taker ends the process.
#[derive(Clone, Debug)]
pub struct Interrupts {
    inner: Arc<InterruptsInner>,
}

#[derive(Debug)]
struct InterruptsInner {
    moving: AtomicBool,
    count: watch::Sender<u32>,
}

// === impl Mover ===

impl Mover {
    /// How the output names it.
    pub fn name(self) -> &'static str {
        match self {
            Mover::Atomic => "atomic slot migration (CLUSTER MIGRATESLOTS)",
            Mover::Legacy => "legacy migration (SETSLOT and MIGRATE, key by key)",
        }
    }
}

// === impl Interrupts ===

impl Default for Interrupts {
    fn default() -> Self {
        Interrupts::new()
    }
}

impl Interrupts {
    pub fn new() -> Interrupts {
        Interrupts {
            inner: Arc::new(InterruptsInner {
                moving: AtomicBool::new(false),
                count: watch::channel(0).0,
            }),
        }
    }

    /// Hands a signal to the move under way and returns true; returns
    /// false when no move is under way: nothing is changing, and the
    /// caller may end the process at once.
    pub fn raise(&self) -> bool {
        if !self.inner.moving.load(Ordering::SeqCst) {
            return false;
        }
        self.inner.count.send_modify(|n| *n = n.saturating_add(1));
        true
    }

    fn moving(&self, on: bool) {
        self.inner.moving.store(on, Ordering::SeqCst);
    }
}

/// Carries out `plan.moves` by `mover` (`keys`: each slot's key count, as
/// counted for the plan), one after the other, printing each; the keys
/// moved and the rate at the end.
pub async fn apply(
    nodes: &mut Links,
    topo: &Topology,
    plan: &Plan,
    keys: &[u64],
    mover: Mover,
    interrupts: &Interrupts,
) -> anyhow::Result<()> {
    let total = plan.moves.len();
    // On a terminal, the progress of the slot being moved shows in place.
    let terminal = std::io::stdout().is_terminal();
    let mut signals = interrupts.inner.count.subscribe();
    signals.mark_unchanged();
    interrupts.moving(true);
    let started = Instant::now();
    let mut all_keys = 0_u64;
    for (i, m) in plan.moves.iter().enumerate() {
        let head = format!(
            "[{}/{total}] slot {} {} -> {}",
            i.saturating_add(1),
            m.slot.get(),
            addr(topo, m.from),
            addr(topo, m.to)
        );
        let step = Migration {
            slot: m.slot,
            from: m.from,
            to: m.to,
        };
        let mut show = |what: &str| {
            if terminal {
                let _ = write!(std::io::stdout(), "\r{head}: {what}   ");
                let _ = std::io::stdout().flush();
            }
        };
        if signals.has_changed().unwrap_or(false) {
            interrupts.moving(false);
            bail!(
                "interrupted between moves: {i} of {total} slots moved ({all_keys} keys), slot {} not begun",
                m.slot.get()
            );
        }
        let one = Instant::now();
        let moved = tokio::select! {
            moved = move_one(nodes, topo, step, mover, &mut show) => Some(moved),
            _ = signals.changed() => None,
        };
        let Some(moved) = moved else {
            interrupts.moving(false);
            return interrupted(nodes, topo, step, mover).await;
        };
        let moved = match moved {
            Ok(legacy_count) => legacy_count.unwrap_or(keys.get(i).copied().unwrap_or(0)),
            Err(e) => {
                interrupts.moving(false);
                return Err(e);
            }
        };
        all_keys = all_keys.saturating_add(moved);
        let back = if terminal { "\r" } else { "" };
        say!(
            "{back}{head}: {moved} keys in {:.2} s ({all_keys} in all)",
            one.elapsed().as_secs_f64()
        );
    }
    interrupts.moving(false);
    let secs = started.elapsed().as_secs_f64();
    say!(
        "done: {total} slots, {all_keys} keys moved by {} in {secs:.2} s ({:.0} keys/s)",
        mover.name(),
        all_keys as f64 / secs.max(0.001)
    );
    Ok(())
}

/// One move; the keys MIGRATE moved (legacy) or `None` (atomic: the
/// nodes do not say, the plan's count stands).
async fn move_one(
    nodes: &mut Links,
    topo: &Topology,
    step: Migration,
    mover: Mover,
    show: &mut dyn FnMut(&str),
) -> anyhow::Result<Option<u64>> {
    match mover {
        Mover::Atomic => {
            atomic::move_slot(nodes, &topo.masters, step, show).await?;
            Ok(None)
        }
        Mover::Legacy => {
            let mut bar = |keys: u64| show(&format!("{keys} keys"));
            Ok(Some(
                migrate::move_slot(nodes, &topo.masters, step, &mut bar).await?,
            ))
        }
    }
}

/// After an interrupt during `step`: cancels an atomic migration on its
/// source (on a connection of its own: the one of the move was cut off
/// mid-reply) and says where the slot is; a legacy move is left for the
/// next run.
async fn interrupted(
    nodes: &Links,
    topo: &Topology,
    step: Migration,
    mover: Mover,
) -> anyhow::Result<()> {
    let (slot, from, to) = (step.slot.get(), addr(topo, step.from), addr(topo, step.to));
    say!();
    match mover {
        Mover::Legacy => bail!(
            "interrupted while moving slot {slot} from {from} to {to}: it may be left half-moved (MIGRATING/IMPORTING); the next `orthrus rebalance --apply` finishes it first"
        ),
        Mover::Atomic => {
            let Some(src) = topo.masters.get(step.from) else {
                bail!("interrupted while moving slot {slot}");
            };
            let mut links = nodes.fresh();
            atomic::cancel(&mut links, src).await?;
            let where_now = match atomic::newest_for(&mut links, src, step.slot).await? {
                Some(job) => {
                    let job = atomic::follow(&mut links, src, &job.name, &mut |_| {}).await?;
                    let now = if job.succeeded() { &to } else { &from };
                    format!(
                        "the migration ended {}; slot {slot} is on {now}",
                        job.outcome()
                    )
                }
                None => format!("slot {slot} stays on {from}"),
            };
            bail!(
                "interrupted while moving slot {slot} from {from} to {to}: CLUSTER CANCELSLOTMIGRATIONS sent to {from}; {where_now}"
            )
        }
    }
}
