//! Delta debugging: the smallest sequence that still shows a difference.
//!
//! `ddmin` over the steps (remove chunks, halving their size down to one
//! step), then the same over the commands of each pipeline. The predicate
//! runs the candidate on both targets, so every candidate costs two real
//! runs; `budget` bounds how many are tried.

use crate::sequence::{Action, Sequence, Step};

/// Shrinks `seq` while `fails` holds, trying at most `budget` candidates.
pub fn shrink(seq: &Sequence, budget: usize, fails: &mut dyn FnMut(&Sequence) -> bool) -> Sequence {
    let mut tries = 0;
    let mut steps = seq.steps.clone();
    let conns = seq.conns.clone();
    let mut test = |steps: &[Step], tries: &mut usize| {
        *tries += 1;
        fails(&Sequence {
            conns: conns.clone(),
            steps: steps.to_vec(),
        })
    };
    let mut n = 2;
    while steps.len() >= 2 && tries < budget {
        let chunk = steps.len().div_ceil(n);
        let mut removed = false;
        let mut start = 0;
        while start < steps.len() && tries < budget {
            let end = (start + chunk).min(steps.len());
            let mut candidate = steps[..start].to_vec();
            candidate.extend_from_slice(&steps[end..]);
            if !candidate.is_empty() && test(&candidate, &mut tries) {
                steps = candidate;
                removed = true;
                n = (n - 1).max(2);
                break;
            }
            start = end;
        }
        if !removed {
            if chunk == 1 {
                break;
            }
            n = (n * 2).min(steps.len());
        }
    }
    // Commands inside pipelines, one at a time.
    let mut i = 0;
    while i < steps.len() && tries < budget {
        let mut j = 0;
        while let Action::Pipeline(cmds) = &steps[i].action {
            if j >= cmds.len() || cmds.len() < 2 || tries >= budget {
                break;
            }
            let mut fewer = cmds.clone();
            fewer.remove(j);
            let mut candidate = steps.clone();
            candidate[i].action = Action::Pipeline(fewer);
            if test(&candidate, &mut tries) {
                steps = candidate;
            } else {
                j += 1;
            }
        }
        i += 1;
    }
    Sequence { conns, steps }
}
