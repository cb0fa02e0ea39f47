//! The engine's own per-slot figures (`CLUSTER SLOT-STATS`, Valkey 8 and
//! later): key count, CPU time and network bytes per slot, for every
//! client of the node, not only those that come through one orthrus.
//! Nothing is switched on here: where CPU and network figures are off
//! (`cluster-slot-stats-enabled no`, the default) the operator is told how
//! to turn them on.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail};
use orthrus_cluster::{SLOT_COUNT, Slot};
use orthrus_resp::Value;

use super::cluster::{Links, Master};

/// A figure of `CLUSTER SLOT-STATS`.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Metric {
    /// `key-count`: a state, read once.
    Keys,
    /// `cpu-usec`: a running total, read twice.
    Cpu,
    /// `network-bytes-in` plus `network-bytes-out`: running totals.
    NetBytes,
}

// === impl Metric ===

impl Metric {
    /// The fields of SLOT-STATS summed into this metric.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Metric::Keys => &["key-count"],
            Metric::Cpu => &["cpu-usec"],
            Metric::NetBytes => &["network-bytes-in", "network-bytes-out"],
        }
    }

    /// Whether it is a running total, whose rate is measured between two
    /// readings.
    pub fn is_total(self) -> bool {
        !matches!(self, Metric::Keys)
    }

    /// The unit of a slot's load by this metric.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Keys => "keys",
            Metric::Cpu => "cpu-usec/s",
            Metric::NetBytes => "network bytes/s",
        }
    }
}

/// Each owned slot's load by `metric` from every master's SLOT-STATS: the
/// key count now, or the rate of a running total between two readings
/// `sample` apart.
pub async fn slot_loads(
    links: &mut Links,
    masters: &[Master],
    metric: Metric,
    sample: Duration,
) -> anyhow::Result<HashMap<Slot, f64>> {
    let first = read(links, masters, metric).await?;
    if !metric.is_total() {
        return Ok(first);
    }
    crate::time::sleep(sample).await;
    let second = read(links, masters, metric).await?;
    let secs = sample.as_secs_f64().max(0.001);
    // A slot that changed master between the readings starts again from
    // 0 on its new one: no rate for it this time.
    Ok(second
        .into_iter()
        .map(|(slot, now)| {
            let before = first.get(&slot).copied().unwrap_or(now);
            (slot, ((now - before) / secs).max(0.0))
        })
        .collect())
}

/// One reading of every master's SLOT-STATS for the slots it owns.
async fn read(
    links: &mut Links,
    masters: &[Master],
    metric: Metric,
) -> anyhow::Result<HashMap<Slot, f64>> {
    let last = (SLOT_COUNT - 1).to_string();
    let mut loads = HashMap::new();
    let mut off = Vec::new();
    for m in masters {
        let reply = links
            .call_raw(
                &m.addr,
                &[
                    b"CLUSTER",
                    b"SLOT-STATS",
                    b"SLOTSRANGE",
                    b"0",
                    last.as_bytes(),
                ],
            )
            .await?;
        if let Value::Error(e) = &reply {
            bail!(
                "{}: CLUSTER SLOT-STATS failed ({}): planning by the engine's own per-slot figures needs CLUSTER SLOT-STATS (Valkey 8 and later); --by requests and --by bytes plan from orthrus's own measure",
                m.addr,
                String::from_utf8_lossy(e)
            );
        }
        let entries = reply.as_array().ok_or_else(|| {
            anyhow!(
                "{}: CLUSTER SLOT-STATS did not answer with an array",
                m.addr
            )
        })?;
        let mut enabled = true;
        for entry in entries {
            let Some((slot, figures)) = parse_entry(entry) else {
                bail!(
                    "{}: a CLUSTER SLOT-STATS entry is not [slot, figures]",
                    m.addr
                );
            };
            let mut sum = 0.0;
            for field in metric.fields() {
                match figures.field(field).and_then(Value::as_int) {
                    Some(n) => sum += n as f64,
                    None => enabled = false,
                }
            }
            loads.insert(slot, sum);
        }
        if !enabled {
            off.push(m.addr.to_string());
        }
    }
    if !off.is_empty() {
        bail!(
            "{} per slot is off on {}: turn it on with CONFIG SET cluster-slot-stats-enabled yes on every master (and cluster-slot-stats-enabled yes in their configuration files, to keep it), then run again; orthrus turns nothing on by itself",
            metric.fields().join(" and "),
            off.join(", ")
        );
    }
    Ok(loads)
}

/// `[slot, {field: value, ...}]`.
fn parse_entry(entry: &Value) -> Option<(Slot, &Value)> {
    let [slot, figures] = entry.as_array()? else {
        return None;
    };
    let slot = Slot::new(u16::try_from(slot.as_int()?).ok()?)?;
    Some((slot, figures))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn an_entry_is_a_slot_and_its_figures() {
        let entry = Value::Array(vec![
            Value::Integer(42),
            Value::Array(vec![bulk("key-count"), Value::Integer(7)]),
        ]);
        let (slot, figures) = parse_entry(&entry).unwrap();
        assert_eq!(slot, Slot::new(42).unwrap());
        assert_eq!(figures.field("key-count").and_then(Value::as_int), Some(7));
        assert!(figures.field("cpu-usec").is_none());
        assert!(parse_entry(&Value::Array(vec![Value::Integer(16384), Value::Null])).is_none());
        assert!(parse_entry(&Value::Integer(1)).is_none());
    }
}
