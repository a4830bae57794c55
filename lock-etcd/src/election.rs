//! Leader election: one key per name, `<namespace>election/<name>`, whose
//! value is the leader's token (hex) then its identity, on a lease of the
//! leader's own. Campaigning is one transaction (create the
//! key if it does not exist); the **term** is the key's create revision
//! (cluster-wide, only growing, kept through etcd leader changes).
//! Observers watch the key: a change wakes them at once, no polling.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};
use lock_core::raw::ElectionBackend;
use lock_core::raw::validate_identity;
use lock_core::raw::validate_key;
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{LeaderInfo, LockToken, Result};
use tokio::time::Instant;

use crate::error::{failed, no_header};
use crate::lock::{first_kv, release_outcome};
use crate::{EtcdBackend, Inner};

/// Length of the token prefix of a leader's value.
const TOKEN_HEX: usize = 32;

impl Inner {
    fn election_key(&self, name: &str) -> Result<Vec<u8>> {
        validate_key(name)?;
        Ok(format!("{}election/{name}", self.namespace).into_bytes())
    }

    /// The leader of `key` and the revision read.
    async fn read_leader(&self, key: &[u8]) -> Result<(Option<LeaderInfo>, i64)> {
        let mut resp = self
            .client
            .kv_client()
            .get(key.to_vec(), None::<GetOptions>)
            .await
            .map_err(|e| failed("reading the leader", e))?;
        let revision = resp.header().ok_or_else(|| no_header("reading the leader"))?.revision();
        Ok((resp.take_kvs().first().and_then(leader_of), revision))
    }
}

fn leader_of(kv: &KeyValue) -> Option<LeaderInfo> {
    let identity = kv.value().get(TOKEN_HEX..)?.to_vec();
    let term = u64::try_from(kv.create_revision()).ok()?;
    Some(LeaderInfo::new(identity, term))
}

/// The first value after every value starting with `hex` (its last byte
/// plus one: hex digits are ASCII).
fn after_token(hex: &[u8; TOKEN_HEX]) -> Vec<u8> {
    let mut end = hex.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

#[async_trait]
impl ElectionBackend for EtcdBackend {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        validate_identity(identity)?;
        let inner = &self.inner;
        let k = inner.election_key(name)?;
        let hex = token.hex_bytes();
        let mut value = hex.to_vec();
        value.extend_from_slice(identity);
        let sent_at = Instant::now();
        let leased = inner
            .leased_txn(ttl, sent_at, "campaign", |lease| {
                Txn::new()
                    .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        k.clone(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(lease)),
                    )])
                    .or_else([TxnOp::get(k.clone(), None)])
            })
            .await?;
        if leased.resp.succeeded() {
            let term = leased.revision("campaign")?;
            return leased.grant(inner, Some(term), sent_at);
        }
        match first_kv(&leased.resp) {
            // Leading already (a re-sent campaign): the term stays.
            Some(kv) if kv.value().starts_with(&hex) => {
                leased
                    .grant_found(inner, &kv, Some(kv.create_revision()), sent_at)
                    .await
            }
            _ => Ok(AcquireOutcome::Held { retry_after: None }),
        }
    }

    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let k = self.inner.election_key(name)?;
        let hex = token.hex_bytes();
        // "The value starts with the token": above the token itself (an
        // identity is never empty) and below the token's successor.
        let when = vec![
            Compare::value(k.clone(), CompareOp::Greater, hex.to_vec()),
            Compare::value(k.clone(), CompareOp::Less, after_token(&hex)),
        ];
        Ok(release_outcome(self.inner.delete_if(k, when, "resign").await?))
    }

    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let entry = self.inner.election_key(name).map(|k| (k, token.hex_bytes().to_vec()));
        let mut out = self.inner.renew_entries(vec![entry], ttl).await;
        out.pop().unwrap_or(Ok(RenewOutcome::Missing))
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let k = self.inner.election_key(name)?;
        Ok(self.inner.read_leader(&k).await?.0)
    }

    async fn wait_for_leader_change(&self, name: &str, seen: Option<&LeaderInfo>, max_wait: Duration) {
        let changed = async {
            let k = self.inner.election_key(name)?;
            let (now, revision) = self.inner.read_leader(&k).await?;
            if now.as_ref() != seen {
                return Ok(());
            }
            self.inner.watch_for(k, None, revision + 1, false).await
        };
        lock_core::raw::wait_hint(max_wait, changed).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bounds_enclose_only_that_token() {
        let a = [b'a'; TOKEN_HEX];
        let end = after_token(&a);
        let mut mine = a.to_vec();
        mine.extend_from_slice(b"\xff\xffid");
        assert!(mine.as_slice() > a.as_slice() && mine < end);
        let mut other = a;
        other[TOKEN_HEX - 1] = b'b';
        let mut theirs = other.to_vec();
        theirs.push(b'x');
        assert!(theirs >= end, "another token is outside");
        other[TOKEN_HEX - 1] = b'9';
        assert!(other.as_slice() < a.as_slice());
    }
}
