//! The slot map: which node owns each slot, and which replicas follow it.

use std::collections::HashMap;
use std::fmt;

use crate::{Health, Node, NodeAddr, Role, SLOT_COUNT, Slot, TopologyError};

/// The most nodes one map can hold; one index value is kept for "no owner".
/// Redis recommends clusters of at most about a thousand nodes, so this bound
/// only matters against a peer that invents addresses.
pub const MAX_NODES: usize = NO_OWNER as usize;

/// Owner index meaning "nobody serves this slot".
const NO_OWNER: u16 = u16::MAX;

/// A snapshot of the cluster's routing table.
///
/// Slots map to a `u16` index into the node table rather than to addresses,
/// so the table is 32 KiB and a lookup is one load plus one bounds-checked
/// index, with no hashing on the request path.
#[derive(Clone)]
pub struct SlotMap {
    /// Every known node, masters and replicas, in discovery order.
    nodes: Vec<Node>,
    /// Parallel to `nodes`: the usable replicas of each master (not failed
    /// or loading), for reads sent to replicas. Empty for replicas.
    replicas: Vec<Vec<NodeAddr>>,
    /// Slot -> index into `nodes`, or `NO_OWNER`.
    owners: Box<[u16; SLOT_COUNT as usize]>,
    /// Address -> index into `nodes`, so a MOVED patch is O(1).
    index: HashMap<NodeAddr, u16>,
    /// Number of slots with an owner, kept so `is_complete` is O(1).
    covered: usize,
}

// === impl SlotMap ===

impl SlotMap {
    /// No nodes, no owners.
    pub fn empty() -> SlotMap {
        SlotMap {
            nodes: Vec::new(),
            replicas: Vec::new(),
            owners: Box::new([NO_OWNER; SLOT_COUNT as usize]),
            index: HashMap::new(),
            covered: 0,
        }
    }

    /// One node, `addr`, that serves every slot: a standalone redis-server
    /// taken as a cluster of one master with no replicas.
    pub fn standalone(addr: NodeAddr) -> SlotMap {
        let mut map = SlotMap::empty();
        map.index.insert(addr.clone(), 0);
        map.nodes.push(Node {
            id: None,
            addr,
            role: Role::Master,
            health: Health::Online,
            zone: None,
        });
        map.replicas.push(Vec::new());
        map.owners.fill(0);
        map.covered = usize::from(SLOT_COUNT);
        map
    }

    /// The master serving `slot`, if any.
    #[inline]
    pub fn master(&self, slot: Slot) -> Option<&NodeAddr> {
        self.owner(slot).map(|node| &node.addr)
    }

    /// The node serving `slot`, with its id and health.
    #[inline]
    pub fn owner(&self, slot: Slot) -> Option<&Node> {
        let idx = *self.owners.get(slot.index())?;
        self.nodes.get(usize::from(idx))
    }

    /// The usable replicas of the master serving `slot` (empty if none, or
    /// if the slot has no owner). Replicas reported failed or loading are
    /// left out.
    pub fn replicas(&self, slot: Slot) -> &[NodeAddr] {
        self.owners
            .get(slot.index())
            .and_then(|&idx| self.replicas.get(usize::from(idx)))
            .map_or(&[], Vec::as_slice)
    }

    /// The usable replicas of the master at `addr` (empty if none, or if
    /// `addr` is not a known master).
    pub fn replicas_of(&self, addr: &NodeAddr) -> &[NodeAddr] {
        self.index
            .get(addr)
            .and_then(|&idx| self.replicas.get(usize::from(idx)))
            .map_or(&[], Vec::as_slice)
    }

    /// The availability zone the node at `addr` announces, if known.
    pub fn zone_of(&self, addr: &NodeAddr) -> Option<&str> {
        let idx = self.index.get(addr)?;
        self.nodes.get(usize::from(*idx))?.zone.as_deref()
    }

    /// The distinct masters that own at least one slot, sorted.
    pub fn masters(&self) -> Vec<NodeAddr> {
        let mut owns = vec![false; self.nodes.len()];
        for &idx in self.owners.iter() {
            // NO_OWNER is never a valid index (see MAX_NODES), so it misses.
            if let Some(flag) = owns.get_mut(usize::from(idx)) {
                *flag = true;
            }
        }
        let mut masters: Vec<NodeAddr> = self
            .nodes
            .iter()
            .zip(owns)
            .filter(|(_, owns)| *owns)
            .map(|(node, _)| node.addr.clone())
            .collect();
        masters.sort();
        masters
    }

    /// Every known node: masters (with or without slots) and replicas.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node at `addr`, if known.
    pub fn node(&self, addr: &NodeAddr) -> Option<&Node> {
        let idx = *self.index.get(addr)?;
        self.nodes.get(usize::from(idx))
    }

    /// Points `slot` at `addr` (after a MOVED) without touching any other
    /// slot. An unknown address is added as a master of unknown health; a
    /// known replica is promoted, since a MOVED to it means it now serves
    /// slots. Ignored, so the next full refresh repairs it, when an empty
    /// host would be recorded or the node table is full.
    pub fn set_master(&mut self, slot: Slot, addr: NodeAddr) {
        if !addr.has_host() {
            return;
        }
        let idx = match self.index.get(&addr) {
            Some(&idx) => idx,
            None => {
                let node = Node {
                    id: None,
                    addr,
                    role: Role::Master,
                    health: Health::Unknown,
                    zone: None,
                };
                match self.intern(node) {
                    Ok(idx) => idx,
                    Err(_) => return,
                }
            }
        };
        self.promote(idx);
        if let Some(cell) = self.owners.get_mut(slot.index()) {
            if *cell == NO_OWNER {
                self.covered += 1;
            }
            *cell = idx;
        }
    }

    /// How many slots have an owner.
    pub fn covered_slots(&self) -> usize {
        self.covered
    }

    /// Whether all 16384 slots have an owner.
    pub fn is_complete(&self) -> bool {
        self.covered == usize::from(SLOT_COUNT)
    }

    /// Maximal runs of consecutive slots with the same owner, as inclusive
    /// `(first, last, owner)` triples in slot order. Unowned slots are
    /// skipped.
    pub fn slot_ranges(&self) -> Vec<(u16, u16, NodeAddr)> {
        let mut ranges = Vec::new();
        let mut run: Option<(u16, u16, u16)> = None;
        for (slot, &idx) in (0..SLOT_COUNT).zip(self.owners.iter()) {
            run = match run {
                Some((first, _, owner)) if owner == idx => Some((first, slot, owner)),
                done => {
                    self.push_range(&mut ranges, done);
                    (idx != NO_OWNER).then_some((slot, slot, idx))
                }
            };
        }
        self.push_range(&mut ranges, run);
        ranges
    }

    /// Whether both maps route identically and know the same nodes: the same
    /// owner address for every slot, the same nodes (address, id, role and
    /// health) and the same replicas per master. The proxy uses it to log,
    /// and to swap snapshots, only when something changed.
    pub fn same_layout(&self, other: &SlotMap) -> bool {
        if self.nodes.len() != other.nodes.len() || self.covered != other.covered {
            return false;
        }
        // Addresses are unique within a map, so equal sizes plus every node
        // of `self` found in `other` means the two node sets are the same.
        let mut translate = Vec::with_capacity(self.nodes.len());
        for (node, replicas) in self.nodes.iter().zip(&self.replicas) {
            let Some(&idx) = other.index.get(&node.addr) else {
                return false;
            };
            let (Some(theirs), Some(their_replicas)) = (
                other.nodes.get(usize::from(idx)),
                other.replicas.get(usize::from(idx)),
            ) else {
                return false;
            };
            let same_node =
                theirs.id == node.id && theirs.role == node.role && theirs.health == node.health;
            if !same_node || !same_set(replicas, their_replicas) {
                return false;
            }
            translate.push(idx);
        }
        self.owners
            .iter()
            .zip(other.owners.iter())
            .all(|(&mine, &theirs)| {
                let mapped = translate
                    .get(usize::from(mine))
                    .copied()
                    .unwrap_or(NO_OWNER);
                mapped == theirs
            })
    }

    // --- construction, for the topology parsers ---

    /// Adds `node`, or merges it into the entry with the same address, and
    /// returns its index. A node listed both as a master and as a replica
    /// ends up a master: ownership is what routing depends on.
    pub(crate) fn intern(&mut self, node: Node) -> Result<u16, TopologyError> {
        if let Some(&idx) = self.index.get(&node.addr) {
            if let Some(known) = self.nodes.get_mut(usize::from(idx)) {
                if node.role == Role::Master && known.role == Role::Replica {
                    known.role = Role::Master;
                    known.health = node.health;
                }
                if known.id.is_none() {
                    known.id = node.id;
                }
                if known.health == Health::Unknown {
                    known.health = node.health;
                }
            }
            return Ok(idx);
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(TopologyError::TooManyNodes);
        }
        let idx = u16::try_from(self.nodes.len()).map_err(|_| TopologyError::TooManyNodes)?;
        self.index.insert(node.addr.clone(), idx);
        self.nodes.push(node);
        self.replicas.push(Vec::new());
        Ok(idx)
    }

    /// Gives slots `first..=last` to node `owner`. Both ends must already be
    /// valid slots; a slot claimed twice makes the reply inconsistent.
    pub(crate) fn assign(
        &mut self,
        first: Slot,
        last: Slot,
        owner: u16,
    ) -> Result<(), TopologyError> {
        let cells = self.owners.get_mut(first.index()..=last.index()).ok_or(
            TopologyError::BadSlotRange {
                first: first.get().into(),
                last: last.get().into(),
            },
        )?;
        for (slot, cell) in (first.get()..).zip(cells.iter_mut()) {
            if *cell != NO_OWNER && *cell != owner {
                return Err(TopologyError::SlotOwnedTwice { slot });
            }
            if *cell == NO_OWNER {
                self.covered += 1;
            }
            *cell = owner;
        }
        Ok(())
    }

    pub(crate) fn index_of(&self, addr: &NodeAddr) -> Option<u16> {
        self.index.get(addr).copied()
    }

    /// Records `addr` as a usable replica of node `master` (once).
    pub(crate) fn add_replica(&mut self, master: u16, addr: &NodeAddr) {
        if let Some(list) = self.replicas.get_mut(usize::from(master)) {
            if !list.contains(addr) {
                list.push(addr.clone());
            }
        }
    }

    fn promote(&mut self, idx: u16) {
        let Some(node) = self.nodes.get_mut(usize::from(idx)) else {
            return;
        };
        if node.role == Role::Master {
            return;
        }
        node.role = Role::Master;
        let addr = node.addr.clone();
        for list in &mut self.replicas {
            list.retain(|replica| *replica != addr);
        }
    }

    fn push_range(&self, ranges: &mut Vec<(u16, u16, NodeAddr)>, run: Option<(u16, u16, u16)>) {
        if let Some((first, last, idx)) = run {
            if let Some(node) = self.nodes.get(usize::from(idx)) {
                ranges.push((first, last, node.addr.clone()));
            }
        }
    }
}

impl Default for SlotMap {
    fn default() -> SlotMap {
        SlotMap::empty()
    }
}

impl fmt::Debug for SlotMap {
    /// Ranges instead of 16384 owner indices, so a map fits in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotMap")
            .field("covered", &self.covered)
            .field("ranges", &self.slot_ranges())
            .field("nodes", &self.nodes)
            .field("replicas", &self.replicas)
            .finish()
    }
}

fn same_set(a: &[NodeAddr], b: &[NodeAddr]) -> bool {
    a.len() == b.len() && a.iter().all(|addr| b.contains(addr))
}
