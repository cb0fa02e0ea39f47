//! Which replica a read goes to: spread over the usable replicas of the
//! slot's master, those in orthrus's availability zone first.

use orthrus_cluster::{NodeAddr, Slot, SlotMap};

use super::Env;
use crate::observe::stats::WorkerStats;

/// A usable replica of `slot`'s master for one read, turning over on each
/// call, that is not `skip` and whose connection is not in back-off after a
/// failure. With `cluster.availability_zone`, one that announces that zone
/// in `map` first (counted as a read in the zone or out of it).
pub fn pick_replica<'a>(
    env: &Env,
    map: &'a SlotMap,
    slot: Slot,
    skip: Option<&NodeAddr>,
) -> Option<&'a NodeAddr> {
    let replicas = map.replicas(slot);
    if replicas.is_empty() {
        return None;
    }
    let start = env.spread();
    let mut turn = (0..replicas.len())
        .filter_map(|i| replicas.get(start.wrapping_add(i) % replicas.len()))
        .filter(|addr| Some(*addr) != skip && env.backing_off(addr).is_none());
    let Some((zone, primary)) = &env.shared.zone else {
        return turn.next();
    };
    let mut other = None;
    for addr in turn {
        if map.zone_of(addr) == Some(zone.as_str()) {
            WorkerStats::bump(&env.stats().reads_same_zone);
            return Some(addr);
        }
        other = other.or(Some(addr));
    }
    // az-affinity-replicas-and-primary: the master, when in the zone,
    // before a replica of another (None sends the read to the master).
    let master = map.master(slot);
    if *primary && master.is_some_and(|m| map.zone_of(m) == Some(zone.as_str())) {
        return None;
    }
    if other.is_some() {
        WorkerStats::bump(&env.stats().reads_other_zone);
    }
    other
}
