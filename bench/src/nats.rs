//! NATS in the benchmark (issue 45): one nats-server with JetStream started
//! on first use, with the server's default `sync_interval` (as the Redis
//! servers here run without persistence and etcd without fsync: the rows
//! compare clients, not disks; SAFETY.md's claims need `sync_interval:
//! always`, where each write also waits for an fsync, about 0.2 ms on the
//! machine of the last run), verrou's NATS backend, and what a Rust service on NATS would write
//! instead: raw async-nats key-value calls doing the same operations
//! (`create_with_ttl`, `delete_expect_revision`) on the same bucket. The
//! round trip is a key-value `get` of the same client (a direct get, the
//! key absent).

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use lock_core::LockToken;
use lock_nats::NatsBackend;
use lock_testkit::server::{NatsCluster, SyncInterval};

use crate::BoxResult;
use crate::drive::Op;
use crate::locks::Locker;

/// verrou's NATS backend, defaults.
pub const VERROU_NATS: &str = "verrou nats";
/// Raw async-nats key-value calls, the same operations.
pub const RAW_NATS: &str = "raw async-nats kv (create_with_ttl + delete_expect_revision)";
/// The NATS round trip.
pub const READ_NATS: &str = "kv get of one key (async-nats)";

/// The bucket every NATS row uses.
const BUCKET: &str = "bench";

/// Whether a row label is one of the NATS rows.
pub fn is_nats(label: &str) -> bool {
    label.contains("nats")
}

/// The NATS server of a run, started on first use (a run filtered to
/// other rows never starts one).
#[derive(Default)]
pub struct NatsLab {
    server: Option<NatsCluster>,
}

impl NatsLab {
    /// The server's URL with the bench bucket, starting it on first call.
    pub async fn url(&mut self) -> BoxResult<String> {
        if self.server.is_none() {
            self.server = Some(NatsCluster::start(1, SyncInterval::Default).await?);
        }
        let server = self.server.as_ref().ok_or("nats not started")?;
        Ok(format!("{}?bucket={BUCKET}", server.url()))
    }

    /// A new backend with its own connection (it creates the bucket).
    pub async fn backend(&mut self) -> BoxResult<NatsBackend> {
        let url = self.url().await?;
        Ok(NatsBackend::connect(&url).await?)
    }

    /// The bucket through a plain client of its own (made by the backend,
    /// so per-key TTL is on).
    pub async fn store(&mut self) -> BoxResult<kv::Store> {
        let backend = self.backend().await?;
        let js = jetstream::new(backend.client().clone());
        Ok(js.get_key_value(BUCKET).await?)
    }
}

/// async-nats, no framework: `create_with_ttl` with a fresh random token as
/// the value (its own fallback over a delete marker included), then
/// `delete_expect_revision` at the revision it returned.
pub struct RawNats {
    store: kv::Store,
    ttl: Duration,
}

impl RawNats {
    /// A client of its own; locks of `ttl`.
    pub async fn connect(lab: &mut NatsLab, ttl: Duration) -> BoxResult<Self> {
        Ok(RawNats {
            store: lab.store().await?,
            ttl,
        })
    }
}

impl Locker for RawNats {
    type Held = (String, u64);

    async fn acquire(&self, key: &str) -> BoxResult<(String, u64)> {
        let safe: String = key
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let k = format!("raw.{safe}");
        let value = LockToken::generate()?.hex_bytes();
        let revision = self
            .store
            .create_with_ttl(&k, value.to_vec().into(), self.ttl)
            .await
            .map_err(|e| format!("raw async-nats: {key}: {e}"))?;
        Ok((k, revision))
    }

    async fn release(&self, (k, revision): (String, u64)) -> BoxResult<()> {
        self.store
            .delete_expect_revision(&k, Some(revision))
            .await
            .map_err(|e| format!("raw async-nats: {k}: {e}"))?;
        Ok(())
    }
}

/// A key-value `get` of an absent key over one client: the round trip.
pub struct ReadNats(pub kv::Store);

impl Op for ReadNats {
    async fn once(&self, _key: &str) -> BoxResult<()> {
        self.0.get("bench.read").await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_nats_rows() {
        assert!(is_nats(VERROU_NATS) && is_nats(RAW_NATS) && is_nats(READ_NATS));
        assert!(!is_nats("verrou redis-lua") && !is_nats(crate::etcd::VERROU_ETCD));
    }
}
