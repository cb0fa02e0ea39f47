//! What one node says about the cluster: `CLUSTER NODES` lines and the
//! `CLUSTER SLOTS` table, reduced to what devcluster compares and waits on.

use orthrus_resp::Value;

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeLine {
    pub(crate) id: String,
    pub(crate) port: u16,
    pub(crate) flags: Vec<String>,
    /// The master's id, for replicas.
    pub(crate) master_id: Option<String>,
    pub(crate) config_epoch: u64,
    /// Owned slot ranges, inclusive; migration markers are left out.
    pub(crate) slots: Vec<(u16, u16)>,
}

/// One row of `CLUSTER SLOTS`, by client port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SlotRange {
    pub(crate) start: u16,
    pub(crate) end: u16,
    pub(crate) master: u16,
    /// Sorted.
    pub(crate) replicas: Vec<u16>,
}

// === impl NodeLine ===

impl NodeLine {
    pub(crate) fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// Flagged master and not confirmed failed (a suspected failure, `fail?`,
    /// still counts: the cluster has not given up on it).
    pub(crate) fn is_live_master(&self) -> bool {
        self.has_flag("master") && !self.has_flag("fail")
    }

    pub(crate) fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }
}

/// Parses a whole `CLUSTER NODES` reply; the error names the bad line.
pub(crate) fn parse_cluster_nodes(text: &str) -> Result<Vec<NodeLine>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| parse_node_line(line).ok_or_else(|| format!("bad CLUSTER NODES line: {line}")))
        .collect()
}

fn parse_node_line(line: &str) -> Option<NodeLine> {
    // <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
    // <pong-recv> <config-epoch> <link-state> <slot> ...
    let mut fields = line.split_ascii_whitespace();
    let id = fields.next()?.to_owned();
    let addr = fields.next()?;
    let flags = fields.next()?.split(',').map(str::to_owned).collect();
    let master = fields.next()?;
    let config_epoch = fields.nth(2)?.parse().ok()?;
    let _link_state = fields.next()?;
    let host_port = addr.split(['@', ',']).next()?;
    let port = host_port.rsplit(':').next()?.parse().ok()?;
    let slots = fields.filter_map(parse_slot_field).collect::<Option<_>>()?;
    Some(NodeLine {
        id,
        port,
        flags,
        master_id: (master != "-").then(|| master.to_owned()),
        config_epoch,
        slots,
    })
}

/// `Some(Some(range))` for `5` or `0-5460`, `None` to skip a migration
/// marker (`[5->-id]`), `Some(None)` for garbage.
fn parse_slot_field(field: &str) -> Option<Option<(u16, u16)>> {
    if field.starts_with('[') {
        return None;
    }
    let range = match field.split_once('-') {
        Some((lo, hi)) => lo.parse().ok().zip(hi.parse().ok()),
        None => field.parse().ok().map(|s| (s, s)),
    };
    Some(range.filter(|&(lo, hi)| lo <= hi && hi < SLOT_COUNT))
}

/// Parses a `CLUSTER SLOTS` reply into rows sorted by first slot.
pub(crate) fn parse_cluster_slots(reply: &Value) -> Option<Vec<SlotRange>> {
    let Value::Array(rows) = reply else {
        return None;
    };
    let mut out = rows
        .iter()
        .map(parse_slot_row)
        .collect::<Option<Vec<_>>>()?;
    out.sort();
    Some(out)
}

fn parse_slot_row(row: &Value) -> Option<SlotRange> {
    let Value::Array(items) = row else {
        return None;
    };
    let mut items = items.iter();
    let start = slot_number(items.next()?)?;
    let end = slot_number(items.next()?)?;
    let master = endpoint_port(items.next()?)?;
    let mut replicas = items.map(endpoint_port).collect::<Option<Vec<_>>>()?;
    replicas.sort_unstable();
    Some(SlotRange {
        start,
        end,
        master,
        replicas,
    })
}

fn slot_number(v: &Value) -> Option<u16> {
    match v {
        Value::Integer(n) => u16::try_from(*n).ok().filter(|&s| s < SLOT_COUNT),
        _ => None,
    }
}

/// `[ip, port, id, ...]` -> port.
fn endpoint_port(v: &Value) -> Option<u16> {
    match v {
        Value::Array(parts) => match parts.get(1)? {
            Value::Integer(n) => u16::try_from(*n).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// Whether the rows cover every slot exactly once.
pub(crate) fn covers_all_slots(rows: &[SlotRange]) -> bool {
    let mut next = 0u32;
    for row in rows {
        if u32::from(row.start) != next || row.end < row.start {
            return false;
        }
        next = u32::from(row.end) + 1;
    }
    next == u32::from(SLOT_COUNT)
}

/// Slots split evenly over `masters`: the inclusive range of master `i`.
pub(crate) fn even_split(i: usize, masters: usize) -> (u16, u16) {
    let total = usize::from(SLOT_COUNT);
    let lo = i * total / masters;
    let hi = (i + 1) * total / masters - 1;
    // Both are below SLOT_COUNT for i < masters <= SLOT_COUNT.
    (lo as u16, hi as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-a slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 1426238316232 0 5 disconnected
";

    #[test]
    fn parses_cluster_nodes() {
        let lines = parse_cluster_nodes(NODES).unwrap();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].port, 30004);
        assert!(lines[0].has_flag("slave"));
        assert_eq!(
            lines[0].master_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(lines[1].slots, vec![(5461, 10922)]);
        assert!(lines[2].is_live_master());
        assert_eq!(lines[2].slots, vec![(0, 5460)]);
        assert_eq!(lines[2].config_epoch, 1);
        assert!(lines[2].owns(5460) && !lines[2].owns(5461));
        assert!(!lines[3].is_live_master());
        assert!(lines[3].slots.is_empty());
    }

    #[test]
    fn rejects_bad_lines() {
        assert!(parse_cluster_nodes("abc 127.0.0.1:1@2 master").is_err());
        assert!(parse_cluster_nodes("a 127.0.0.1:1@2 master - 0 0 1 connected 9-x").is_err());
        assert!(parse_cluster_nodes("a 127.0.0.1:1@2 master - 0 0 1 connected 16384").is_err());
    }

    fn endpoint(port: i64) -> Value {
        Value::Array(vec![
            Value::Bulk(Bytes::from_static(b"127.0.0.1")),
            Value::Integer(port),
            Value::Bulk(Bytes::from_static(b"id")),
        ])
    }

    #[test]
    fn parses_and_checks_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Integer(8192),
                Value::Integer(16383),
                endpoint(2),
                endpoint(9),
                endpoint(5),
            ]),
            Value::Array(vec![Value::Integer(0), Value::Integer(8191), endpoint(1)]),
        ]);
        let rows = parse_cluster_slots(&reply).unwrap();
        assert_eq!(rows[0].master, 1);
        assert_eq!(rows[1].replicas, vec![5, 9]);
        assert!(covers_all_slots(&rows));
        assert!(!covers_all_slots(&rows[..1]));
        assert!(parse_cluster_slots(&Value::Integer(1)).is_none());
    }

    #[test]
    fn even_split_covers_every_slot_once() {
        for masters in [1, 3, 5, 7] {
            let mut next = 0u32;
            for i in 0..masters {
                let (lo, hi) = even_split(i, masters);
                assert_eq!(u32::from(lo), next);
                next = u32::from(hi) + 1;
            }
            assert_eq!(next, 16384);
        }
    }
}
