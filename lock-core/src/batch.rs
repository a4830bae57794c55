//! Renewal batching for backends: the manager's renewer (`renewer.rs`)
//! renews the leases due in the same tick with one
//! [`crate::LockBackend::renew_many`] call; [`RenewBatch`] is the planner
//! backends use to split such a call into scripts or pipelines.

use std::time::Duration;

use crate::backend::RenewOutcome;
use crate::error::{Error, Result};

/// The bookkeeping of a backend's [`LockBackend::renew_many`](crate::LockBackend::renew_many): validates
/// each item, groups the valid ones (e.g. by cluster hash slot, since one
/// script's keys must share a slot), splits groups into chunks, and puts the
/// chunks' outcomes back in item order.
///
/// ```text
/// let batch = RenewBatch::new(items, ttl, 128, |key| clustered.then(|| slot(key)));
/// let outcomes = join_all(batch.chunks().iter().map(|chunk| self.renew_chunk(items, chunk))).await;
/// batch.finish(items, outcomes, "my-backend")
/// ```
#[derive(Debug)]
pub struct RenewBatch {
    /// Items already answered (invalid input), by position.
    answered: Vec<Option<Result<RenewOutcome>>>,
    chunks: Vec<Vec<usize>>,
}

impl RenewBatch {
    /// Plan the calls: invalid items (empty key, TTL out of range) are
    /// answered with `InvalidArgument` and never sent; the rest are grouped
    /// by `group_of(key)` and split into chunks of at most `max_chunk`.
    pub fn new<K: std::hash::Hash + Eq>(
        items: &[(&str, &crate::token::LockToken)],
        ttl: Duration,
        max_chunk: usize,
        group_of: impl Fn(&str) -> K,
    ) -> Self {
        let answered: Vec<Option<Result<RenewOutcome>>> = items
            .iter()
            .map(|(key, _)| {
                crate::validate::validate_key(key)
                    .and_then(|()| crate::validate::validate_ttl(ttl))
                    .err()
                    .map(Err)
            })
            .collect();
        let mut groups: std::collections::HashMap<K, Vec<usize>> = std::collections::HashMap::new();
        for (i, (key, _)) in items.iter().enumerate() {
            if answered[i].is_none() {
                groups.entry(group_of(key)).or_default().push(i);
            }
        }
        let chunks = groups
            .into_values()
            .flat_map(|group| {
                group
                    .chunks(max_chunk.max(1))
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        RenewBatch { answered, chunks }
    }

    /// The item indices of each call to make.
    pub fn chunks(&self) -> &[Vec<usize>] {
        &self.chunks
    }

    /// Merge the calls' outcomes (one `Vec` per chunk, in [`RenewBatch::chunks`]
    /// order, one result per index) into one result per item. An item left
    /// without an answer gets an outcome-unknown error.
    pub fn finish(
        mut self,
        items: &[(&str, &crate::token::LockToken)],
        outcomes: Vec<Vec<Result<RenewOutcome>>>,
        backend: &str,
    ) -> Vec<Result<RenewOutcome>> {
        for (chunk, outcomes) in self.chunks.iter().zip(outcomes) {
            for (&i, outcome) in chunk.iter().zip(outcomes) {
                self.answered[i] = Some(outcome);
            }
        }
        self.answered
            .into_iter()
            .zip(items)
            .map(|(r, (key, _))| {
                r.unwrap_or_else(|| Err(Error::outcome_unknown(backend, format!("renew of {key:?}: no reply"))))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::LockToken;

    #[test]
    fn a_batch_is_planned_and_merged_in_item_order() {
        let t = LockToken::from_bytes([7; 16]);
        let items = [("a1", &t), ("", &t), ("b1", &t), ("a2", &t), ("a3", &t)];
        let batch = RenewBatch::new(&items, Duration::from_secs(1), 2, |k| k.as_bytes().first().copied());
        let mut sizes: Vec<usize> = batch.chunks().iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(
            sizes,
            vec![1, 1, 2],
            "a-keys split 2+1, b-key alone, the empty key never sent"
        );
        let outcomes = batch
            .chunks()
            .iter()
            .map(|c| {
                c.iter()
                    .map(|&i| {
                        if i == 2 {
                            Ok(RenewOutcome::Missing)
                        } else {
                            Ok(RenewOutcome::Renewed)
                        }
                    })
                    .collect()
            })
            .collect();
        let merged = batch.finish(&items, outcomes, "test");
        assert!(matches!(merged[1], Err(Error::InvalidArgument(_))));
        assert!(matches!(merged[2], Ok(RenewOutcome::Missing)));
        assert!(
            [0, 3, 4]
                .iter()
                .all(|&i| matches!(merged[i], Ok(RenewOutcome::Renewed)))
        );
    }
}
