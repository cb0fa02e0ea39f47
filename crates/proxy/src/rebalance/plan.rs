//! The rebalance plan: which slots to move so that every master carries
//! about the mean load. Pure: loads and owners in, moves out.
//!
//! Greedy, one move at a time: take the busiest master and the idlest,
//! and move the busiest one's slot whose load comes closest to what would
//! bring one of them to the mean without overshooting the other (strictly
//! less than their difference, so each move lowers the sum of squared
//! loads and the loop ends). Hot slots go first, so few moves suffice. A
//! slot moves at most once, a migrating slot never, and a master keeps at
//! least one slot. A slot that carries less than [`MIN_SLOT_PCT`] of the
//! mean load is never moved: closing the last percent with hundreds of
//! nearly idle slots is churn, not balance by load.

use std::collections::HashSet;

use orthrus_cluster::Slot;

/// The least load a slot must carry to be moved, in percent of the mean
/// load of a master.
pub const MIN_SLOT_PCT: f64 = 0.5;

/// One slot's measured load and its master (an index into the masters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlotLoad {
    pub slot: Slot,
    pub owner: usize,
    /// Requests or bytes per second; what the plan evens out.
    pub load: f64,
    /// Open migration (MIGRATING or IMPORTING): never moved.
    pub migrating: bool,
}

/// What the plan must reach and may do.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Every master within this percentage of the mean load.
    pub threshold_pct: f64,
    /// At most this many moves.
    pub max_moves: usize,
}

/// One slot to move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Move {
    pub slot: Slot,
    pub from: usize,
    pub to: usize,
    pub load: f64,
}

/// The moves, and each master's load before and after them.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub moves: Vec<Move>,
    pub before: Vec<f64>,
    pub after: Vec<f64>,
    /// Whether every master ends within the threshold of the mean.
    pub balanced: bool,
}

// === impl Plan ===

impl Plan {
    /// Each master's share of the total load, in percent, `before` or after.
    pub fn shares(loads: &[f64]) -> Vec<f64> {
        let total: f64 = loads.iter().sum();
        loads
            .iter()
            .map(|l| if total > 0.0 { l * 100.0 / total } else { 0.0 })
            .collect()
    }
}

/// Plans the fewest moves (greedy, hottest useful slot first) that bring
/// each of `masters` masters within `bounds.threshold_pct` of the mean.
pub fn plan(slots: &[SlotLoad], masters: usize, bounds: Bounds) -> Plan {
    let mut loads = vec![0.0_f64; masters];
    let mut owned = vec![0_usize; masters];
    for s in slots {
        if let (Some(l), Some(n)) = (loads.get_mut(s.owner), owned.get_mut(s.owner)) {
            *l += s.load;
            *n = n.saturating_add(1);
        }
    }
    let before = loads.clone();
    let mut moved: HashSet<Slot> = HashSet::new();
    let mut moves = Vec::new();
    while moves.len() < bounds.max_moves && !balanced(&loads, bounds.threshold_pct) {
        let Some(m) = next_move(slots, &loads, &owned, &moved) else {
            break;
        };
        if let Some(l) = loads.get_mut(m.from) {
            *l -= m.load;
        }
        if let Some(l) = loads.get_mut(m.to) {
            *l += m.load;
        }
        if let Some(n) = owned.get_mut(m.from) {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = owned.get_mut(m.to) {
            *n = n.saturating_add(1);
        }
        moved.insert(m.slot);
        moves.push(m);
    }
    Plan {
        balanced: balanced(&loads, bounds.threshold_pct),
        moves,
        before,
        after: loads,
    }
}

/// Whether every load is within `threshold_pct` of the mean. No load at
/// all counts as balanced: there is nothing to even out.
pub fn balanced(loads: &[f64], threshold_pct: f64) -> bool {
    let total: f64 = loads.iter().sum();
    if loads.is_empty() || total <= 0.0 {
        return true;
    }
    let mean = total / loads.len() as f64;
    let slack = mean * threshold_pct / 100.0;
    loads.iter().all(|l| (l - mean).abs() <= slack)
}

/// The best move from the busiest master to the idlest, if any slot of
/// the busiest one would narrow their gap.
fn next_move(
    slots: &[SlotLoad],
    loads: &[f64],
    owned: &[usize],
    moved: &HashSet<Slot>,
) -> Option<Move> {
    let (from, busiest) = extreme(loads, |a, b| a > b)?;
    let (to, idlest) = extreme(loads, |a, b| a < b)?;
    if from == to || owned.get(from).copied().unwrap_or(0) < 2 {
        return None;
    }
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    let gap = busiest - idlest;
    let target = (busiest - mean).min(mean - idlest);
    let least = mean * MIN_SLOT_PCT / 100.0;
    slots
        .iter()
        .filter(|s| s.owner == from && !s.migrating && s.load >= least && s.load < gap)
        .filter(|s| !moved.contains(&s.slot))
        .min_by(|a, b| {
            (a.load - target)
                .abs()
                .total_cmp(&(b.load - target).abs())
                .then(b.load.total_cmp(&a.load))
                .then(a.slot.cmp(&b.slot))
        })
        .map(|s| Move {
            slot: s.slot,
            from,
            to,
            load: s.load,
        })
}

/// The index and value that `better` prefers, first one on ties.
fn extreme(loads: &[f64], better: impl Fn(f64, f64) -> bool) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &l) in loads.iter().enumerate() {
        match best {
            Some((_, b)) if !better(l, b) => {}
            _ => best = Some((i, l)),
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: u16) -> Slot {
        Slot::new(n).unwrap()
    }

    fn load(n: u16, owner: usize, load: f64) -> SlotLoad {
        SlotLoad {
            slot: slot(n),
            owner,
            load,
            migrating: false,
        }
    }

    const BOUNDS: Bounds = Bounds {
        threshold_pct: 10.0,
        max_moves: 100,
    };

    /// Six hot slots on master 0, a little load everywhere else.
    fn skewed() -> Vec<SlotLoad> {
        let mut slots: Vec<SlotLoad> = (0..6).map(|i| load(i, 0, 100.0)).collect();
        slots.extend((100..110).map(|i| load(i, 0, 3.0)));
        slots.extend((6000..6010).map(|i| load(i, 1, 3.0)));
        slots.extend((12000..12010).map(|i| load(i, 2, 3.0)));
        slots
    }

    #[test]
    fn hot_slots_spread_in_the_fewest_moves() {
        let p = plan(&skewed(), 3, BOUNDS);
        assert_eq!(p.before, vec![630.0, 30.0, 30.0]);
        assert_eq!(p.moves.len(), 4, "{:?}", p.moves);
        assert!(p.moves.iter().all(|m| m.from == 0 && m.load == 100.0));
        assert_eq!(p.after, vec![230.0, 230.0, 230.0]);
        assert!(p.balanced);
        let shares = Plan::shares(&p.before);
        assert!(shares[0] > 90.0);
    }

    #[test]
    fn a_balanced_cluster_needs_no_move() {
        let slots = vec![load(1, 0, 10.0), load(2, 1, 10.5), load(3, 2, 9.5)];
        let p = plan(&slots, 3, BOUNDS);
        assert!(p.moves.is_empty());
        assert!(p.balanced);
    }

    #[test]
    fn max_moves_is_respected() {
        let p = plan(
            &skewed(),
            3,
            Bounds {
                max_moves: 2,
                ..BOUNDS
            },
        );
        assert_eq!(p.moves.len(), 2);
        assert!(!p.balanced);
        assert_eq!(p.after.iter().sum::<f64>(), 690.0);
    }

    #[test]
    fn migrating_slots_stay_where_they_are() {
        let mut slots = skewed();
        for s in slots.iter_mut().take(6) {
            s.migrating = s.slot != slot(5);
        }
        let p = plan(&slots, 3, BOUNDS);
        assert!(p.moves.iter().all(|m| m.slot != slot(0)));
        assert!(p.moves.iter().any(|m| m.slot == slot(5)));
        assert!(
            !p.moves
                .iter()
                .any(|m| slots.iter().any(|s| s.slot == m.slot && s.migrating))
        );
    }

    #[test]
    fn a_master_keeps_its_last_slot() {
        // One slot carries everything: moving it only moves the problem,
        // and its master would be left with nothing.
        let slots = vec![load(7, 0, 1000.0), load(8, 1, 1.0)];
        let p = plan(&slots, 3, BOUNDS);
        assert!(p.moves.is_empty());
        assert!(!p.balanced);
    }

    #[test]
    fn an_empty_master_receives_slots() {
        let slots: Vec<SlotLoad> = (0..8).map(|i| load(i, i as usize % 2, 10.0)).collect();
        let p = plan(
            &slots,
            3,
            Bounds {
                threshold_pct: 30.0,
                ..BOUNDS
            },
        );
        assert!(p.moves.iter().all(|m| m.to == 2));
        assert!(p.moves.len() >= 2);
        assert!(p.balanced, "{:?}", p.after);
    }

    #[test]
    fn no_load_is_balanced_and_moves_nothing() {
        let slots = vec![load(1, 0, 0.0), load(2, 1, 0.0)];
        let p = plan(&slots, 2, BOUNDS);
        assert!(p.moves.is_empty());
        assert!(p.balanced);
        assert_eq!(Plan::shares(&p.after), vec![0.0, 0.0]);
    }

    #[test]
    fn nearly_idle_slots_are_not_moved_to_shave_the_last_percent() {
        // Three unequal hot slots on master 0 cannot be spread within 10 %;
        // the two useful moves are made, not a hundred of idle slots.
        let mut slots = vec![load(1, 0, 7765.0), load(2, 0, 6877.0), load(3, 0, 5284.0)];
        slots.extend((100..1000).map(|i| load(i, 0, 4.6)));
        slots.extend((6000..7000).map(|i| load(i, 1, 4.3)));
        slots.extend((12000..13000).map(|i| load(i, 2, 4.2)));
        let p = plan(&slots, 3, BOUNDS);
        assert_eq!(p.moves.len(), 2, "{:?}", p.moves);
        assert!(p.moves.iter().all(|m| m.load > 5000.0));
        assert!(!p.balanced);
    }

    #[test]
    fn a_slot_moves_once_and_the_loop_ends() {
        // Two masters and one slot heavier than their difference can take:
        // no move narrows the gap, so none is made.
        let slots = vec![load(1, 0, 60.0), load(2, 0, 50.0), load(3, 1, 50.0)];
        let p = plan(
            &slots,
            2,
            Bounds {
                threshold_pct: 0.0,
                ..BOUNDS
            },
        );
        assert!(p.moves.len() <= 1);
        let moved: HashSet<Slot> = p.moves.iter().map(|m| m.slot).collect();
        assert_eq!(moved.len(), p.moves.len());
    }
}
