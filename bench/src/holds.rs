//! Recorded holds and the check that a lock kind's bound held: every hold is
//! an interval from the grant (after the acquire returned) to the start of
//! its release, on one or more resources; a sweep over all of them finds
//! the most holders of one resource at once.

use std::time::Instant;

/// How a hold shares its resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// With other shared holders, up to the bound's `shared_max`.
    Shared,
    /// With nobody.
    Exclusive,
}

/// One hold, as the holder saw it.
#[derive(Debug, Clone)]
pub struct Hold {
    /// Granted (the acquire call returned).
    pub start: Instant,
    /// About to release.
    pub end: Instant,
    /// Shared or exclusive.
    pub claim: Claim,
    /// The resources held (a multi-key lock's keys; one for the others).
    pub resources: Vec<u16>,
}

/// What the sweep found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peak {
    /// Most holders of one resource at once.
    pub holders: usize,
    /// Grants that broke the bound: more shared holders than allowed, or a
    /// holder beside an exclusive one.
    pub violations: u64,
    /// Holds checked.
    pub holds: u64,
}

/// Sweep `holds`: at each grant, count who else holds each of its
/// resources. A hold that ends exactly when another starts does not
/// overlap it (the release had not been sent when the other was granted).
pub fn check(holds: &[Hold], shared_max: usize) -> Peak {
    #[derive(Clone, Copy, Default)]
    struct Count {
        shared: usize,
        exclusive: usize,
    }
    // (time, is_start, hold index); ends sort before starts at equal times.
    let mut events: Vec<(Instant, bool, usize)> = Vec::with_capacity(holds.len() * 2);
    for (i, h) in holds.iter().enumerate() {
        events.push((h.start, true, i));
        events.push((h.end.max(h.start), false, i));
    }
    events.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let resources = holds
        .iter()
        .flat_map(|h| h.resources.iter().copied())
        .max()
        .map_or(0, |m| usize::from(m) + 1);
    let mut counts = vec![Count::default(); resources];
    let mut peak = Peak {
        holds: holds.len() as u64,
        ..Peak::default()
    };
    for (_, is_start, i) in events {
        let h = &holds[i];
        let mut broke = false;
        for &r in &h.resources {
            let c = &mut counts[usize::from(r)];
            match (is_start, h.claim) {
                (true, Claim::Shared) => {
                    c.shared += 1;
                    broke |= c.exclusive > 0 || c.shared > shared_max;
                }
                (true, Claim::Exclusive) => {
                    c.exclusive += 1;
                    broke |= c.exclusive > 1 || c.shared > 0;
                }
                (false, Claim::Shared) => c.shared = c.shared.saturating_sub(1),
                (false, Claim::Exclusive) => c.exclusive = c.exclusive.saturating_sub(1),
            }
            peak.holders = peak.holders.max(c.shared + c.exclusive);
        }
        if broke {
            peak.violations += 1;
        }
    }
    peak
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn hold(t0: Instant, from: u64, to: u64, claim: Claim, resources: &[u16]) -> Hold {
        Hold {
            start: t0 + Duration::from_millis(from),
            end: t0 + Duration::from_millis(to),
            claim,
            resources: resources.to_vec(),
        }
    }

    #[test]
    fn shared_holders_up_to_the_bound_pass_and_one_more_fails() {
        let t0 = Instant::now();
        let four: Vec<Hold> = (0..4).map(|i| hold(t0, i, 10, Claim::Shared, &[0])).collect();
        assert_eq!(check(&four, 4).violations, 0);
        assert_eq!(check(&four, 4).holders, 4);
        let mut five = four.clone();
        five.push(hold(t0, 5, 6, Claim::Shared, &[0]));
        assert_eq!(check(&five, 4).violations, 1);
    }

    #[test]
    fn an_exclusive_holder_excludes_readers_and_writers_but_back_to_back_is_fine() {
        let t0 = Instant::now();
        let ok = [
            hold(t0, 0, 10, Claim::Shared, &[0]),
            hold(t0, 2, 10, Claim::Shared, &[0]),
            hold(t0, 10, 20, Claim::Exclusive, &[0]),
            hold(t0, 20, 30, Claim::Exclusive, &[0]),
        ];
        assert_eq!(check(&ok, usize::MAX).violations, 0);
        let reader_inside = [
            hold(t0, 0, 10, Claim::Exclusive, &[0]),
            hold(t0, 5, 6, Claim::Shared, &[0]),
        ];
        assert_eq!(check(&reader_inside, usize::MAX).violations, 1);
    }

    #[test]
    fn key_sets_conflict_only_on_a_common_key() {
        let t0 = Instant::now();
        let disjoint = [
            hold(t0, 0, 10, Claim::Exclusive, &[0, 1]),
            hold(t0, 1, 9, Claim::Exclusive, &[2, 3]),
        ];
        assert_eq!(check(&disjoint, 0).violations, 0);
        let overlapping = [
            hold(t0, 0, 10, Claim::Exclusive, &[0, 1]),
            hold(t0, 1, 9, Claim::Exclusive, &[1, 2]),
        ];
        let peak = check(&overlapping, 0);
        assert_eq!((peak.violations, peak.holders), (1, 2));
    }
}
