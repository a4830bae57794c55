//! Batched renewals: the renewer's leases that come due together are
//! renewed by one JetStream atomic batch per chunk of up to
//! [`MAX_BATCH`] (server 2.12 and later, on a bucket whose stream allows
//! atomic publishing: the builder turns it on). Each renewal is still one
//! message on its key's subject with the same headers as a single renewal
//! (the expected last sequence of the subject, `Nats-TTL`), but only the
//! batch's last message asks for an acknowledgement, which carries the
//! sequence of that message: the batch is stored as one contiguous run, so
//! the renewal at position `i` of `n` got `seq - (n - 1 - i)`.
//!
//! Atomic means all or nothing: when any renewal's condition fails (a lock
//! lost or taken over), or the server refuses the batch for any other
//! reason, nothing was stored, and the chunk's leases are renewed one by
//! one as [`Inner::renew`] does, which tells each lease its own outcome. A
//! revision computed wrong could only make the next renewal's condition
//! fail, which goes the same way. A lease this backend does not remember
//! the revision of goes one by one from the start.
//!
//! Why: one acknowledgement per renewal (a reply subscription's message,
//! its timer and oneshot, a JSON answer) was most of the client's cost of
//! keeping 10,000 locks (see `bench/analysis.md`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::header::{
    NATS_BATCH_COMMIT, NATS_BATCH_COMMIT_FINAL, NATS_BATCH_ID, NATS_BATCH_SEQUENCE,
    NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, NATS_MESSAGE_TTL,
};
use lock_core::{Error, LockToken, RenewOutcome, Result};
use tokio::time::Instant;

use crate::Inner;
use crate::error::{NAME, NotStored, publish_failed};
use crate::kv::ttl_secs;
use crate::lock::renewal_value;

/// Messages per atomic batch: the server's limit (1,000, the commit
/// included).
pub(crate) const MAX_BATCH: usize = 1000;

/// Chunks of one call in flight at once (the server keeps at most 50
/// batches of a stream open, across all its clients).
const CHUNKS_IN_FLIGHT: usize = 4;

/// A lease of a chunk that goes in the batch: its position in the chunk,
/// subject and the revision and fencing token of its last write.
struct Item {
    at: usize,
    /// Built once: each clone for its publish is a reference count.
    subject: async_nats::Subject,
    revision: u64,
    fence: u64,
}

/// How a batch ended when it stored nothing known.
enum Failed {
    /// Nothing stored: renew the leases one by one.
    NotStored,
    /// No answer: the batch may be stored; every lease's outcome is unknown.
    Unknown(String),
}

impl Inner {
    /// [`Inner::renew`] for many leases: one atomic batch per chunk (see
    /// the module's docs), or one renewal each when the bucket does not
    /// take atomic batches.
    pub(crate) async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        if items.len() < 2 || !self.atomic_batches.load(Ordering::Relaxed) {
            return futures::future::join_all(items.iter().map(|(key, token)| self.renew(key, token, ttl))).await;
        }
        let secs = match ttl_secs(ttl, "ttl") {
            Ok(secs) => secs,
            Err(e) => {
                let why = e.to_string();
                return items.iter().map(|_| Err(Error::invalid(why.clone()))).collect();
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for group in items.chunks(MAX_BATCH * CHUNKS_IN_FLIGHT) {
            let chunks = group.chunks(MAX_BATCH).map(|chunk| self.renew_chunk(chunk, ttl, secs));
            out.extend(futures::future::join_all(chunks).await.into_iter().flatten());
        }
        out
    }

    async fn renew_chunk(&self, chunk: &[(&str, &LockToken)], ttl: Duration, secs: u64) -> Vec<Result<RenewOutcome>> {
        let sent_at = Instant::now();
        let mut out: Vec<Option<Result<RenewOutcome>>> = chunk.iter().map(|_| None).collect();
        let mut batch = Vec::with_capacity(chunk.len());
        for (at, (key, token)) in chunk.iter().enumerate() {
            match self.subject_of("l", key) {
                Ok(subject) => {
                    if let Some((revision, fence)) = self.held.get(&subject, token) {
                        batch.push(Item {
                            at,
                            subject: subject.into(),
                            revision,
                            fence,
                        });
                    }
                }
                Err(e) => out[at] = Some(Err(e)),
            }
        }
        if batch.len() >= 2 {
            match self.publish_batch(chunk, &batch, secs).await {
                Ok(last) => {
                    let n = batch.len() as u64;
                    for (i, item) in batch.iter().enumerate() {
                        let revision = last - (n - 1 - i as u64);
                        let token = chunk[item.at].1;
                        self.held.put(&item.subject, token, revision, item.fence, sent_at + ttl);
                        out[item.at] = Some(Ok(RenewOutcome::Renewed));
                    }
                }
                Err(Failed::NotStored) => {}
                Err(Failed::Unknown(why)) => {
                    for item in &batch {
                        out[item.at] = Some(Err(Error::outcome_unknown(NAME, why.clone())));
                    }
                }
            }
        }
        // The rest (not remembered, or the batch stored nothing), one by one.
        let rest: Vec<usize> = (0..chunk.len()).filter(|&i| out[i].is_none()).collect();
        let renewed = futures::future::join_all(rest.iter().map(|&i| self.renew(chunk[i].0, chunk[i].1, ttl))).await;
        for (i, result) in rest.into_iter().zip(renewed) {
            out[i] = Some(result);
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::backend(NAME, "renewal not attempted"))))
            .collect()
    }

    /// Publishes `batch` as one atomic batch: the sequence of its last
    /// message once stored.
    async fn publish_batch(
        &self,
        chunk: &[(&str, &LockToken)],
        batch: &[Item],
        secs: u64,
    ) -> std::result::Result<u64, Failed> {
        let id = match LockToken::generate() {
            Ok(t) => t.to_hex(),
            Err(_) => return Err(Failed::NotStored),
        };
        let ttl = format!("{secs}s");
        let last = batch.len() - 1;
        for (i, item) in batch.iter().enumerate() {
            let mut headers = HeaderMap::new();
            headers.insert(NATS_BATCH_ID, id.as_str());
            headers.insert(NATS_BATCH_SEQUENCE, (i + 1).to_string());
            headers.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, item.revision.to_string());
            headers.insert(NATS_MESSAGE_TTL, ttl.as_str());
            let value = renewal_value(chunk[item.at].1, item.fence);
            if i < last {
                // Not acknowledged one by one: a failure here means the
                // client is closed, and a batch without its commit is
                // dropped by the server.
                if self
                    .client
                    .publish_with_headers(item.subject.clone(), headers, value)
                    .await
                    .is_err()
                {
                    return Err(Failed::NotStored);
                }
                continue;
            }
            headers.insert(NATS_BATCH_COMMIT, NATS_BATCH_COMMIT_FINAL);
            let acked = match self.js.publish_with_headers(item.subject.clone(), headers, value).await {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            return match acked {
                Ok(ack) if ack.batch_size == Some(batch.len() as u64) && ack.sequence >= last as u64 => {
                    Ok(ack.sequence)
                }
                // Stored, but not as this backend expects to count it: the
                // next renewals read their keys.
                Ok(_) => Err(Failed::NotStored),
                Err(e) => match publish_failed("renew (batch)", e) {
                    NotStored::WrongLast => Err(Failed::NotStored),
                    NotStored::Failed(e) if e.is_outcome_unknown() => Err(Failed::Unknown(e.to_string())),
                    NotStored::Failed(e) => {
                        self.refused_batch(&e);
                        Err(Failed::NotStored)
                    }
                },
            };
        }
        Err(Failed::NotStored)
    }

    /// The server refused a batch for another reason than a renewal's
    /// condition: if it does not take atomic batches on this bucket, stop
    /// sending them.
    fn refused_batch(&self, e: &Error) {
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("atomic") || text.contains("batch") {
            if self.atomic_batches.swap(false, Ordering::Relaxed) {
                tracing::warn!(error = %e, "NATS refused an atomic batch of renewals: renewing one by one");
            }
        } else {
            tracing::debug!(error = %e, "NATS refused a batch of renewals: renewing them one by one");
        }
    }
}
