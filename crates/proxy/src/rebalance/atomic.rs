//! Moving a slot with the engine's atomic slot migration (Valkey 9's
//! `CLUSTER MIGRATESLOTS`): one command on the source master, which sends
//! the slot's keys and then its writes to the target and hands the slot
//! over itself; `CLUSTER GETSLOTMIGRATIONS` on the source says how far it
//! got, `CLUSTER CANCELSLOTMIGRATIONS` stops it (the slot stays where it
//! was). No MIGRATING/IMPORTING state is left on the nodes at any moment:
//! a migration cut short is rolled back by the nodes, not resumed.

use std::time::Duration;

use anyhow::{anyhow, bail};
use orthrus_cluster::{NodeAddr, Slot};
use orthrus_resp::Value;

use super::cluster::{Links, Master, Migration};

/// How often a running migration is looked at.
const POLL: Duration = Duration::from_millis(20);
/// How long a migration just asked for may take to appear in
/// GETSLOTMIGRATIONS.
const APPEAR: Duration = Duration::from_secs(5);

/// One migration as `CLUSTER GETSLOTMIGRATIONS` on its source reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Job {
    pub name: String,
    /// `EXPORT` on the source, `IMPORT` on the target.
    pub operation: String,
    /// `first-last` ranges, space-separated.
    pub slot_ranges: String,
    pub target_node: String,
    pub source_node: String,
    /// The node's word for its progress: `success`, `failed` and
    /// `cancelled` are final.
    pub state: String,
    /// Why it failed, in the node's words.
    pub message: String,
}

// === impl Job ===

impl Job {
    fn from_value(v: &Value) -> Job {
        let text = |name: &str| {
            v.field(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Job {
            name: text("name"),
            operation: text("operation"),
            slot_ranges: text("slot_ranges"),
            target_node: text("target_node"),
            source_node: text("source_node"),
            state: text("state"),
            message: text("message"),
        }
    }

    /// Whether the nodes are done with it, one way or the other.
    pub fn is_over(&self) -> bool {
        matches!(self.state.as_str(), "success" | "failed" | "cancelled")
    }

    pub fn succeeded(&self) -> bool {
        self.state == "success"
    }

    /// The slots it moves.
    pub fn slots(&self) -> Vec<Slot> {
        self.slot_ranges
            .split(' ')
            .filter_map(|range| {
                let (first, last) = range.split_once('-').unwrap_or((range, range));
                Some(first.parse::<u16>().ok()?..=last.parse::<u16>().ok()?)
            })
            .flatten()
            .filter_map(Slot::new)
            .collect()
    }

    /// `state`, with the node's message when it gave one.
    pub fn outcome(&self) -> String {
        if self.message.is_empty() {
            self.state.clone()
        } else {
            format!("{}: {}", self.state, self.message)
        }
    }
}

/// The masters that do not offer `CLUSTER MIGRATESLOTS`: `COMMAND INFO
/// CLUSTER|MIGRATESLOTS` answers nil for a subcommand the node lacks
/// (Redis 7, Valkey before 9), an error where COMMAND INFO itself is
/// refused.
pub async fn lacking(links: &mut Links, masters: &[Master]) -> anyhow::Result<Vec<NodeAddr>> {
    let mut lacking = Vec::new();
    for m in masters {
        let reply = links
            .call_raw(&m.addr, &[b"COMMAND", b"INFO", b"CLUSTER|MIGRATESLOTS"])
            .await?;
        let offered = reply
            .as_array()
            .and_then(<[Value]>::first)
            .is_some_and(|entry| entry.as_array().is_some());
        if !offered {
            lacking.push(m.addr.clone());
        }
    }
    Ok(lacking)
}

/// The migrations `master` reports sending (EXPORT), newest first.
async fn exports(links: &mut Links, master: &Master) -> anyhow::Result<Vec<Job>> {
    let reply = links
        .call(&master.addr, &[b"CLUSTER", b"GETSLOTMIGRATIONS"])
        .await?;
    let entries = reply.as_array().ok_or_else(|| {
        anyhow!(
            "{}: CLUSTER GETSLOTMIGRATIONS did not answer with an array",
            master.addr
        )
    })?;
    Ok(entries
        .iter()
        .map(Job::from_value)
        .filter(|j| j.operation == "EXPORT")
        .collect())
}

/// The newest migration `master` reports sending for `slot`.
pub async fn newest_for(
    links: &mut Links,
    master: &Master,
    slot: Slot,
) -> anyhow::Result<Option<Job>> {
    Ok(exports(links, master)
        .await?
        .into_iter()
        .find(|j| j.slots().contains(&slot)))
}

/// Every master's migrations still under way, with the index of their
/// source: started by an earlier run, by another tool or by hand.
pub async fn running(links: &mut Links, masters: &[Master]) -> anyhow::Result<Vec<(usize, Job)>> {
    let mut under_way = Vec::new();
    for (i, m) in masters.iter().enumerate() {
        for job in exports(links, m).await? {
            if !job.is_over() {
                under_way.push((i, job));
            }
        }
    }
    Ok(under_way)
}

/// Moves `step.slot` with `CLUSTER MIGRATESLOTS` on the source and follows
/// it to its end, telling `progress` each state the source reports. An
/// error names the node's state and message when the migration failed.
pub async fn move_slot(
    links: &mut Links,
    masters: &[Master],
    step: Migration,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let Migration { slot, from, to } = step;
    let (Some(src), Some(dst)) = (masters.get(from), masters.get(to)) else {
        bail!("slot {}: no such master", slot.get());
    };
    let known: Vec<String> = exports(links, src)
        .await?
        .into_iter()
        .map(|j| j.name)
        .collect();
    let n = slot.get().to_string();
    links
        .call(
            &src.addr,
            &[
                b"CLUSTER",
                b"MIGRATESLOTS",
                b"SLOTSRANGE",
                n.as_bytes(),
                n.as_bytes(),
                b"NODE",
                dst.id.as_bytes(),
            ],
        )
        .await?;
    let started = std::time::Instant::now();
    let name = loop {
        let new = exports(links, src)
            .await?
            .into_iter()
            .find(|j| !known.contains(&j.name) && j.slots().contains(&slot));
        if let Some(job) = new {
            break job.name;
        }
        if started.elapsed() > APPEAR {
            bail!(
                "{}: CLUSTER MIGRATESLOTS of slot {} was accepted but GETSLOTMIGRATIONS never listed it",
                src.addr,
                slot.get()
            );
        }
        crate::time::sleep(POLL).await;
    };
    let job = follow(links, src, &name, progress).await?;
    if !job.succeeded() {
        bail!(
            "slot {}: the migration from {} to {} ended {}; the slot stays on {}",
            slot.get(),
            src.addr,
            dst.addr,
            job.outcome(),
            src.addr
        );
    }
    Ok(())
}

/// Polls `master`'s migration `name` until it is over, telling `progress`
/// each new state; returns it as it ended.
pub async fn follow(
    links: &mut Links,
    master: &Master,
    name: &str,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Job> {
    let mut last = String::new();
    loop {
        let job = exports(links, master)
            .await?
            .into_iter()
            .find(|j| j.name == name)
            .ok_or_else(|| {
                anyhow!(
                    "{}: migration {name} vanished from CLUSTER GETSLOTMIGRATIONS",
                    master.addr
                )
            })?;
        if job.state != last {
            progress(&job.state);
            last.clone_from(&job.state);
        }
        if job.is_over() {
            return Ok(job);
        }
        crate::time::sleep(POLL).await;
    }
}

/// Cancels every migration `master` is sending (`CLUSTER
/// CANCELSLOTMIGRATIONS`: the node has no way to cancel one alone); the
/// slots stay where they were.
pub async fn cancel(links: &mut Links, master: &Master) -> anyhow::Result<()> {
    links
        .call(&master.addr, &[b"CLUSTER", b"CANCELSLOTMIGRATIONS"])
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn a_job_is_read_from_a_flat_reply() {
        let v = Value::Array(
            [
                ("name", "abc"),
                ("operation", "EXPORT"),
                ("slot_ranges", "5-7 100-100"),
                ("target_node", "t"),
                ("source_node", "s"),
                ("state", "failed"),
                ("message", "Target node disconnected"),
            ]
            .iter()
            .flat_map(|(k, v)| [bulk(k), bulk(v)])
            .collect(),
        );
        let job = Job::from_value(&v);
        assert_eq!(job.name, "abc");
        assert!(job.is_over() && !job.succeeded());
        assert_eq!(
            job.slots(),
            [5, 6, 7, 100].map(|n| Slot::new(n).unwrap()).to_vec()
        );
        assert_eq!(job.outcome(), "failed: Target node disconnected");
        let running = Job {
            state: "snapshotting".into(),
            ..Job::default()
        };
        assert!(!running.is_over());
        assert!(running.slots().is_empty());
    }
}
