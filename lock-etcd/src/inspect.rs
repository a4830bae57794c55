//! Inspecting a lock key: a range read of the key, then its lease's time
//! to live. Nothing is written and no lease is granted.

use std::time::Duration;

use lock_core::{FencingToken, LockInfo, Result};

use crate::Inner;
use crate::error::failed;

impl Inner {
    /// The holder's fencing token (the key's create revision) and the time
    /// its lease has left: etcd answers whole seconds, rounded down, so one
    /// second is added (an upper bound). A lease that ended between the two
    /// reads leaves the key gone: free.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let k = self.lock_key(key)?;
        let (entry, _) = self.get_entry(&k).await?;
        let Some(kv) = entry else {
            return Ok(LockInfo::free());
        };
        let fence = u64::try_from(kv.create_revision()).ok().map(FencingToken);
        let remaining = match kv.lease() {
            0 => None,
            lease => {
                let resp = self
                    .client
                    .lease_client()
                    .time_to_live(lease, None)
                    .await
                    .map_err(|e| failed("inspect (lease time to live)", e))?;
                match u64::try_from(resp.ttl()) {
                    Ok(secs) => Some(Duration::from_secs(secs + 1)),
                    Err(_) => return Ok(LockInfo::free()), // -1: the lease ended
                }
            }
        };
        Ok(LockInfo::held(remaining).with_fencing_token(fence))
    }
}

impl Inner {
    /// The semaphore `name`'s live holders (entries `h/<token>`, value
    /// `<size> <permits>`, each on its holder's lease: an expired one is
    /// gone): one range read.
    pub(crate) async fn inspect_permits(&self, name: &str) -> Result<lock_core::PermitsInfo> {
        let holders = crate::kinds::Prefix::new(self, "sem", name)?.sub("h/");
        let resp = self
            .client
            .kv_client()
            .get(
                holders.start.clone(),
                Some(etcd_client::GetOptions::new().with_range(holders.end.clone())),
            )
            .await
            .map_err(|e| failed("semaphore inspect", e))?;
        let (mut in_use, mut count, mut size) = (0u32, 0u32, None);
        for kv in resp.kvs() {
            let mut parts = kv.value().split(|b| *b == b' ');
            let mut number = || {
                parts
                    .next()
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .and_then(|t| t.parse::<u32>().ok())
            };
            let (s, permits) = (number(), number().unwrap_or(0));
            size = size.or(s);
            in_use = in_use.saturating_add(permits);
            count = count.saturating_add(1);
        }
        Ok(lock_core::PermitsInfo::new(in_use, count, size))
    }
}

impl Inner {
    /// The read-write lock `name`'s entries (readers `r/`, the writer `w/`,
    /// intents `i/`, each on its holder's lease: an expired one is gone):
    /// one range read. The writer's fencing token is its entry's create
    /// revision.
    pub(crate) async fn inspect_rw(&self, name: &str) -> Result<lock_core::RwInfo> {
        let p = crate::kinds::Prefix::new(self, "rw", name)?;
        let resp = self
            .client
            .kv_client()
            .get(
                p.start.clone(),
                Some(etcd_client::GetOptions::new().with_range(p.end.clone())),
            )
            .await
            .map_err(|e| failed("read-write inspect", e))?;
        let (r, w, i) = (p.sub("r/"), p.sub("w/"), p.sub("i/"));
        let (mut readers, mut writer, mut waiting) = (0u32, None, false);
        for kv in resp.kvs() {
            if r.owner(kv.key()).is_some() {
                readers = readers.saturating_add(1);
            } else if w.owner(kv.key()).is_some() {
                writer = Some(u64::try_from(kv.create_revision()).ok().map(FencingToken));
            } else if i.owner(kv.key()).is_some() {
                waiting = true;
            }
        }
        let info = match writer {
            Some(token) => lock_core::RwInfo::writer(token),
            None => lock_core::RwInfo::readers(readers),
        };
        Ok(info.with_writer_waiting(waiting))
    }
}
