//! Where a request goes: a slot's master (of an upstream), any master, or
//! one node; the slot map that decides it, and the node it names now.

use std::sync::atomic::Ordering;

use orthrus_cluster::{NodeAddr, Slot, SlotMap};

use super::Env;
use crate::process::Held;
use crate::route::prefix::{DEFAULT_UPSTREAM, Place, Upstream};

/// Where a request goes.
#[derive(Clone, Debug)]
pub enum Target {
    /// The master (or, for a replica read, a replica) of a slot of an
    /// upstream.
    Slot(Place),
    /// Any master (key-less commands).
    Any,
    /// This node (fan-out, SCAN).
    Node(NodeAddr),
}

// === impl Target ===

impl Target {
    /// The upstream it is in (a key-less command's or a node's: the
    /// default one's).
    pub fn upstream(&self) -> Upstream {
        match self {
            Target::Slot(place) => place.upstream,
            Target::Any | Target::Node(_) => DEFAULT_UPSTREAM,
        }
    }

    /// The slot map it is looked up in.
    #[inline]
    pub fn map(&self, env: &Env) -> Held<SlotMap> {
        match self {
            Target::Slot(place) => env.slots_of(place.upstream),
            Target::Any | Target::Node(_) => env.slots(),
        }
    }
}

/// The node `target` names in `map` now.
pub fn owner<'a>(map: &'a SlotMap, target: &'a Target) -> Option<&'a NodeAddr> {
    match target {
        Target::Slot(place) => map.master(place.slot),
        Target::Any => any_master(map),
        Target::Node(addr) => Some(addr),
    }
}

/// Spreads key-less commands over the masters without allocating.
fn any_master(map: &SlotMap) -> Option<&NodeAddr> {
    use std::sync::atomic::AtomicU16;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = NEXT.fetch_add(4099, Ordering::Relaxed);
    (0..16u16)
        .filter_map(|i| {
            Slot::new(start.wrapping_add(i.wrapping_mul(1024)) % orthrus_cluster::SLOT_COUNT)
        })
        .find_map(|slot| map.master(slot))
}

/// Whether a request for `target`, whose node `down` cannot be reached, may
/// still be served by another node: its slot has a new owner already, or
/// the topology shows a replica of it that can be promoted.
pub fn can_take_over(map: &SlotMap, target: &Target, down: &NodeAddr) -> bool {
    match target {
        Target::Slot(place) => {
            map.master(place.slot) != Some(down) || !map.replicas(place.slot).is_empty()
        }
        Target::Any => true,
        Target::Node(addr) => !map.replicas_of(addr).is_empty(),
    }
}
