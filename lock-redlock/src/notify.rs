//! Waiting for a release: `M` signals from the nodes with release
//! notifications, or a random delay just after a split vote.

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lock_core::raw::WaitOptions;

use crate::{Redlock, splits};

impl Redlock {
    /// [`LockBackend::wait_for_release`]: `M` release signals, or a random
    /// delay just after a split vote. Every node sees the same waiter
    /// (`options`' or this Redlock's, see the `waiters` module).
    pub(crate) async fn wait_for_quorum_release(&self, key: &str, options: &WaitOptions) {
        let inner = &self.inner;
        let max_wait = options.max_wait;
        // Counted on every wait, so that the acquire keeps its age.
        let waiter = options.waiter.or_else(|| inner.waiters.start(key));
        if inner.splits.recent(key) {
            // Soon after a split vote, a release signal is most likely a
            // contender giving its grants back: waking on it would retry in
            // step with the others. Wait a random delay instead.
            tokio::time::sleep(splits::jittered(max_wait.min(splits::SPLIT_DELAY_MAX))).await;
            return;
        }
        let named = match waiter {
            Some(waiter) => WaitOptions::new(max_wait).waiter(waiter),
            None => WaitOptions::new(max_wait),
        };
        let named = &named;
        let mut waits: FuturesUnordered<_> = inner
            .notifying
            .iter()
            .filter_map(|&i| inner.nodes.get(i))
            .map(|node| node.wait_for_release_opts(key, named))
            .collect();
        // A holder releases all its nodes (at least M) at once: wait for M
        // signals, not the first, or the retry would race the holder's other
        // deletes and miss their signals. The timeout guards against a node
        // that overstays its own bound.
        let needed = inner.quorum.min(waits.len());
        let signals = async {
            for _ in 0..needed {
                if waits.next().await.is_none() {
                    break;
                }
            }
        };
        if needed == 0 {
            tokio::time::sleep(max_wait).await;
        } else if tokio::time::timeout(max_wait, signals).await.is_ok() {
            inner.splits.woken(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lock_core::LockBackend;
    use lock_memory::MemoryBackend;
    use tokio::time::Instant;

    use crate::Redlock;
    use crate::splits::SPLIT_DELAY_MAX;

    #[tokio::test(start_paused = true)]
    async fn a_wait_soon_after_a_split_sleeps_a_short_random_delay() {
        let nodes: Vec<Arc<dyn LockBackend>> = (0..3).map(|_| Arc::new(MemoryBackend::new()) as _).collect();
        let redlock = Redlock::new(nodes).expect("valid");
        redlock.inner.splits.refused("k", true);
        for _ in 0..20 {
            let started = Instant::now();
            redlock.wait_for_release("k", Duration::from_millis(200)).await;
            let slept = started.elapsed();
            assert!(
                slept >= SPLIT_DELAY_MAX / 2 && slept <= SPLIT_DELAY_MAX,
                "not the backoff's 200 ms: {slept:?}"
            );
        }
    }
}
