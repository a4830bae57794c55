//! Keys that recently had a split vote: some nodes granted, but no quorum,
//! and too few refusals for anyone else to hold one. Every contender of such
//! a round gives its grants back, which signals a release on those nodes;
//! waking on these signals makes the waiters retry together and split the
//! votes again (a livelock on a hot key), and a refusal does not tell a real
//! holder from other splitters. So for a while after a split on a key, or
//! after a retry woken by release signals was refused again (the herd's
//! symptom), a retry waits a random delay that no release signal cuts short
//! (the Redlock paper's desynchronising retry).

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Most keys remembered at once. A forgotten mark costs retries woken by
/// release signals, as without this module.
const MAX_KEYS: usize = 4_096;

/// How long after its last split a key's waiters ignore release signals.
pub(crate) const CONTENDED_FOR: Duration = Duration::from_secs(1);

/// The longest random delay after a split (the manager's backoff, up to
/// 200 ms, otherwise): enough to spread the contenders' next rounds, which
/// take a round trip each; a longer sleep only leaves the key to the
/// others (a hot key's wait p99 was twice as long with the backoff's
/// delay).
pub(crate) const SPLIT_DELAY_MAX: Duration = Duration::from_millis(25);

#[derive(Debug, Default)]
struct State {
    /// Keys and their last split.
    split_at: HashMap<String, Instant>,
    /// Keys whose last wait was ended by release signals.
    woken: HashSet<String>,
}

/// The keys; one registry per [`crate::Redlock`] (clones share it).
#[derive(Debug, Default)]
pub(crate) struct SplitVotes {
    state: Mutex<State>,
}

impl SplitVotes {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a single map operation: a poisoned map is consistent.
        match self.state.lock() {
            Ok(k) => k,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A wait on `key` was ended by release signals.
    pub(crate) fn woken(&self, key: &str) {
        let mut state = self.state();
        if state.woken.len() >= MAX_KEYS {
            state.woken.clear();
        }
        state.woken.insert(key.to_owned());
    }

    /// A round on `key` was refused: `split` tells whether it split the
    /// votes. A split, or a refusal right after a wake-up by signals, marks
    /// the key contended.
    pub(crate) fn refused(&self, key: &str, split: bool) {
        let mut state = self.state();
        let after_signals = state.woken.remove(key);
        if !(split || after_signals) {
            return;
        }
        let now = Instant::now();
        let keys = &mut state.split_at;
        if let Some(at) = keys.get_mut(key) {
            *at = now;
            return;
        }
        if keys.len() >= MAX_KEYS {
            keys.retain(|_, at| now.duration_since(*at) < CONTENDED_FOR);
            if keys.len() >= MAX_KEYS {
                keys.clear();
            }
        }
        keys.insert(key.to_owned(), now);
    }

    /// Whether `key` was marked contended within [`CONTENDED_FOR`].
    pub(crate) fn recent(&self, key: &str) -> bool {
        let mut state = self.state();
        let keys = &mut state.split_at;
        match keys.get(key) {
            Some(at) if at.elapsed() < CONTENDED_FOR => true,
            Some(_) => {
                keys.remove(key);
                false
            }
            None => false,
        }
    }
}

thread_local! {
    /// splitmix64 state, seeded from std's per-process random hash keys.
    static JITTER: Cell<u64> = Cell::new(RandomState::new().hash_one(0u64) | 1);
}

/// Uniform in `[max / 2, max]`: contenders that split a round retry apart.
pub(crate) fn jittered(max: Duration) -> Duration {
    let r = JITTER.with(|s| {
        let mut z = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    });
    let unit = (r >> 11) as f64 / (1u64 << 53) as f64;
    max.mul_f64(0.5 + 0.5 * unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn marks_last_a_while() {
        let splits = SplitVotes::default();
        splits.refused("k", true);
        splits.refused("j", false);
        assert!(splits.recent("k"));
        assert!(!splits.recent("j"), "a clean refusal is no contention");
        splits.woken("j");
        splits.refused("j", false);
        assert!(splits.recent("j"), "refused again after a wake-up by signals");
        tokio::time::sleep(CONTENDED_FOR).await;
        assert!(!splits.recent("k"));
        assert!(!splits.recent("j"));
        assert!(splits.state().split_at.is_empty(), "expired marks are dropped");
    }

    #[test]
    fn jitter_stays_in_the_upper_half() {
        let max = Duration::from_millis(100);
        let delays: Vec<Duration> = (0..100).map(|_| jittered(max)).collect();
        assert!(delays.iter().all(|d| *d >= max / 2 && *d <= max));
        assert!(delays.iter().any(|d| *d != delays[0]), "not constant");
    }
}
