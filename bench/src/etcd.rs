//! etcd in the benchmark (issue 26): one member started on first use,
//! verrou's etcd backend, and what a Rust service on etcd would use
//! instead: raw `etcd-client` transactions sending the backend's own
//! operations (create-if-absent on a lease, delete-if-owner), and etcd's
//! server-side `Lock` API (`LockClient::lock` + `unlock`, waiting in the
//! server). The round trip is a single-key read (`get`) of the same client.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::LockToken;
use lock_etcd::{EtcdBackend, EtcdBuilder};
use lock_testkit::server::EtcdCluster;
use tokio::task::JoinHandle;

use crate::BoxResult;
use crate::drive::Op;
use crate::locks::Locker;

/// verrou's etcd backend, defaults.
pub const VERROU_ETCD: &str = "verrou etcd";
/// Raw etcd-client, the backend's transactions on one kept-alive lease.
pub const RAW_ETCD: &str = "raw etcd-client transactions (same operations, one lease)";
/// etcd's server-side Lock API.
pub const LOCK_API: &str = "etcd Lock API (etcd-client LockClient lock + unlock)";
/// The etcd round trip.
pub const READ_ETCD: &str = "get of one key (etcd-client)";

/// Whether a row label is one of the etcd rows.
pub fn is_etcd(label: &str) -> bool {
    label.contains("etcd")
}

/// The etcd member of a run, started on first use (a run filtered to
/// other rows never starts one).
#[derive(Default)]
pub struct EtcdLab {
    cluster: Option<EtcdCluster>,
}

impl EtcdLab {
    /// The member's endpoints, starting it on first call.
    pub async fn endpoints(&mut self) -> BoxResult<Vec<String>> {
        if self.cluster.is_none() {
            self.cluster = Some(EtcdCluster::single().await?);
        }
        Ok(self.cluster.as_ref().ok_or("etcd not started")?.endpoints())
    }

    /// A new backend with its own client and leases.
    pub async fn backend(&mut self) -> BoxResult<EtcdBackend> {
        let endpoints = self.endpoints().await?;
        Ok(EtcdBuilder::new(endpoints).build().await?)
    }

    /// A new plain client.
    pub async fn client(&mut self) -> BoxResult<Client> {
        let endpoints = self.endpoints().await?;
        Ok(Client::connect(endpoints, None).await?)
    }
}

/// A lease kept alive by a task (every third of its TTL) until dropped.
struct KeptLease {
    id: i64,
    task: JoinHandle<()>,
}

impl KeptLease {
    async fn grant(client: &Client, ttl: Duration) -> BoxResult<Self> {
        let secs = i64::try_from(ttl.as_secs().max(1))?;
        let id = client.lease_client().grant(secs, None).await?.id();
        let (mut keeper, mut stream) = client.lease_client().keep_alive(id).await?;
        let every = ttl / 3;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if keeper.keep_alive().await.is_err() || !matches!(stream.message().await, Ok(Some(_))) {
                    return;
                }
            }
        });
        Ok(KeptLease { id, task })
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// etcd-client, no framework: the etcd backend's acquire transaction
/// (create the key on a lease if it has no create revision, otherwise read
/// the holder) and release transaction (delete if the value is ours,
/// otherwise read), a fresh random token per lock as the value, one lease
/// for all locks, kept alive in the background.
pub struct RawEtcd {
    client: Client,
    lease: KeptLease,
}

impl RawEtcd {
    /// A client of its own and a lease of `ttl`.
    pub async fn connect(lab: &mut EtcdLab, ttl: Duration) -> BoxResult<Self> {
        let client = lab.client().await?;
        let lease = KeptLease::grant(&client, ttl).await?;
        Ok(RawEtcd { client, lease })
    }
}

impl Locker for RawEtcd {
    type Held = (String, [u8; 32]);

    async fn acquire(&self, key: &str) -> BoxResult<(String, [u8; 32])> {
        let k = format!("raw/{key}");
        let value = LockToken::generate()?.hex_bytes();
        let txn = Txn::new()
            .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                k.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_lease(self.lease.id)),
            )])
            .or_else([TxnOp::get(k.clone(), None)]);
        let resp = self.client.kv_client().txn(txn).await?;
        if resp.succeeded() {
            Ok((k, value))
        } else {
            Err(format!("raw etcd-client: {key} is held").into())
        }
    }

    async fn release(&self, (k, value): (String, [u8; 32])) -> BoxResult<()> {
        let txn = Txn::new()
            .when([Compare::value(k.clone(), CompareOp::Equal, value.to_vec())])
            .and_then([TxnOp::delete(k.clone(), None)])
            .or_else([TxnOp::get(k.clone(), None)]);
        let resp = self.client.kv_client().txn(txn).await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(format!("raw etcd-client: {k} was no longer ours").into())
        }
    }
}

/// etcd's server-side Lock API (the `v3lock` service): `lock(name)` on a
/// lease creates `name/<lease>` and waits in the server until every key
/// under `name` created before it is gone; `unlock(key)` deletes it. Locks
/// of one lease share one key per name, so contenders on one name need a
/// `LockApi` (a lease) each.
pub struct LockApi {
    client: Client,
    lease: KeptLease,
}

impl LockApi {
    /// A client of its own and a lease of `ttl`.
    pub async fn connect(lab: &mut EtcdLab, ttl: Duration) -> BoxResult<Self> {
        let client = lab.client().await?;
        let lease = KeptLease::grant(&client, ttl).await?;
        Ok(LockApi { client, lease })
    }
}

impl Locker for LockApi {
    type Held = Vec<u8>;

    async fn acquire(&self, key: &str) -> BoxResult<Vec<u8>> {
        let options = etcd_client::LockOptions::new().with_lease(self.lease.id);
        let resp = self
            .client
            .lock_client()
            .lock(format!("api/{key}"), Some(options))
            .await?;
        Ok(resp.key().to_vec())
    }

    async fn release(&self, key: Vec<u8>) -> BoxResult<()> {
        self.client.lock_client().unlock(key).await?;
        Ok(())
    }
}

/// A linearizable single-key read (`get`, the key absent) over one client:
/// the round trip.
pub struct ReadEtcd(pub Client);

impl Op for ReadEtcd {
    async fn once(&self, _key: &str) -> BoxResult<()> {
        self.0.kv_client().get("bench/read", None).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_etcd_rows() {
        assert!(is_etcd(VERROU_ETCD) && is_etcd(RAW_ETCD) && is_etcd(LOCK_API) && is_etcd(READ_ETCD));
        assert!(!is_etcd("verrou redis-lua") && !is_etcd(crate::pg::VERROU_PG));
    }
}
