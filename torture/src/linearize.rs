//! Linearizability of the counter history against a register that
//! `update` increments atomically (read n, write n + 1, return n + 1).
//!
//! Why not a general checker (WGL / Porcupine, `stateright`'s tester): every
//! acknowledged increment returns the value it wrote, so the order of a
//! linearization is forced — by value. What is left is whether a point can
//! be placed in each operation's interval in that order, with the values no
//! acknowledged increment returned explained by outcome-unknown ones (whose
//! effect may land any time after their invocation, even after the error).
//! Earliest-point greedy decides that exactly in O(n log n); a general
//! search is exponential in the worst case and would only rediscover the
//! order.

use std::collections::BTreeMap;

use crate::record::{UpdateOp, UpdateOutcome};

/// The verdict on one history.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Acknowledged increments.
    pub acked: u64,
    /// Increments whose outcome is unknown.
    pub unknown: u64,
    /// Value read after the run (None: could not be read).
    pub final_value: Option<u64>,
    /// Why the history is not linearizable (None: it is).
    pub violation: Option<String>,
}

impl Verdict {
    /// True if linearizable.
    pub fn ok(&self) -> bool {
        self.violation.is_none()
    }
}

/// Check `ops` (all invoked on a counter that started absent = 0) and the
/// value read once they were all done.
pub fn check(ops: &[UpdateOp], final_value: Option<u64>) -> Verdict {
    let mut by_value: BTreeMap<u64, &UpdateOp> = BTreeMap::new();
    let mut unknown: Vec<i64> = Vec::new();
    let mut violation = None;
    let mut acked = 0;
    for op in ops {
        match op.outcome {
            UpdateOutcome::Ok(v) => {
                acked += 1;
                if v == 0 {
                    violation.get_or_insert_with(|| "an increment returned 0".to_owned());
                } else if by_value.insert(v, op).is_some() {
                    violation
                        .get_or_insert_with(|| format!("two acknowledged increments both wrote {v} (a lost update)"));
                }
            }
            UpdateOutcome::Unknown => unknown.push(op.inv),
            UpdateOutcome::Failed => {}
        }
    }
    let unknown_count = unknown.len() as u64;
    let verdict = |violation| Verdict {
        acked,
        unknown: unknown_count,
        final_value,
        violation,
    };
    if violation.is_some() {
        return verdict(violation);
    }
    let top = by_value.keys().next_back().copied().unwrap_or(0);
    let last = match final_value {
        Some(f) if f < top => {
            return verdict(Some(format!(
                "final value {f} is below the acknowledged write of {top} (a lost update)"
            )));
        }
        Some(f) => f,
        None => top,
    };
    // Unknown ops by invocation: the earliest unused one fills each gap.
    unknown.sort_unstable();
    let mut spare = unknown.iter().copied();
    let mut t = i64::MIN;
    for v in 1..=last {
        match by_value.get(&v) {
            Some(op) => {
                t = t.max(op.inv);
                if t > op.resp {
                    return verdict(Some(format!(
                        "the increment that wrote {v} finished before one that wrote less started (real-time order broken)"
                    )));
                }
            }
            None => match spare.next() {
                Some(inv) => t = t.max(inv),
                None => {
                    return verdict(Some(format!(
                        "value {v} was written by no acknowledged increment and no unknown one is left to explain it (final {last}, acknowledged {acked}, unknown {unknown_count})"
                    )));
                }
            },
        }
    }
    verdict(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(inv: i64, resp: i64, v: u64) -> UpdateOp {
        UpdateOp {
            inv,
            resp,
            outcome: UpdateOutcome::Ok(v),
        }
    }

    fn unknown(inv: i64) -> UpdateOp {
        UpdateOp {
            inv,
            resp: inv + 1,
            outcome: UpdateOutcome::Unknown,
        }
    }

    #[test]
    fn sequential_and_overlapping_histories_are_linearizable() {
        let ops = [ok(0, 10, 1), ok(5, 20, 3), ok(6, 15, 2), ok(30, 40, 4)];
        assert!(check(&ops, Some(4)).ok());
    }

    #[test]
    fn a_duplicate_value_is_a_lost_update() {
        let ops = [ok(0, 10, 1), ok(5, 20, 1)];
        assert!(!check(&ops, Some(1)).ok());
    }

    #[test]
    fn real_time_order_must_match_the_values() {
        // wrote 2 and finished before the op that wrote 1 started
        let ops = [ok(0, 10, 2), ok(20, 30, 1)];
        assert!(!check(&ops, Some(2)).ok());
    }

    #[test]
    fn gaps_need_unknown_ops_and_the_final_value_is_bounded() {
        let ops = [ok(0, 10, 1), unknown(11), ok(20, 30, 3)];
        assert!(check(&ops, Some(3)).ok());
        assert!(
            check(&ops, Some(4)).violation.is_some(),
            "final above acknowledged + unknown"
        );
        assert!(check(&[ok(0, 10, 1), ok(20, 30, 3)], Some(3)).violation.is_some());
        assert!(
            check(&[ok(0, 10, 1), ok(20, 30, 2)], Some(1)).violation.is_some(),
            "final below acked"
        );
    }

    #[test]
    fn an_unknown_op_cannot_take_effect_before_it_was_invoked() {
        // value 1 must come from the unknown op invoked at 50, after 2 was acknowledged
        let ops = [unknown(50), ok(0, 10, 2)];
        assert!(!check(&ops, Some(2)).ok());
    }
}
