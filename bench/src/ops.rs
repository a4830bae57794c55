//! Operations other than lock pairs: PINGs, bare backend calls, and the
//! optimistic-increment loops of scenario 4.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis;
use fred::prelude::*;
use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_core::{Backoff, LockBackend, LockToken, UpdateOptions, VersionedStore, VersionedStoreExt};

use crate::BoxResult;
use crate::drive::Op;

/// `PING` over a redis-rs multiplexed connection.
pub struct PingRedisRs(pub redis::aio::MultiplexedConnection);

impl Op for PingRedisRs {
    async fn once(&self, _key: &str) -> BoxResult<()> {
        let mut conn = self.0.clone();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }
}

/// `PING` to several servers at once, done when `need` have answered (all of
/// them, or a quorum): the network floor of a quorum round.
pub struct PingFanout {
    /// One connection per server.
    pub conns: Vec<redis::aio::MultiplexedConnection>,
    /// Replies to wait for.
    pub need: usize,
}

impl Op for PingFanout {
    async fn once(&self, _key: &str) -> BoxResult<()> {
        use futures::StreamExt as _;
        let mut pending: futures::stream::FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|c| {
                let mut conn = c.clone();
                async move { redis::cmd("PING").query_async::<String>(&mut conn).await }
            })
            .collect();
        let mut answered = 0;
        while answered < self.need {
            match pending.next().await {
                Some(r) => {
                    r?;
                    answered += 1;
                }
                None => return Err("fewer servers than replies needed".into()),
            }
        }
        Ok(())
    }
}

/// `PING` over a fred client.
pub struct PingFred(pub fred::clients::Client);

impl Op for PingFred {
    async fn once(&self, _key: &str) -> BoxResult<()> {
        let _: String = self.0.ping(None).await?;
        Ok(())
    }
}

/// `try_acquire` + `release` straight on a backend, no manager: what the
/// manager adds is the difference.
pub struct BareBackend {
    /// The backend.
    pub backend: Arc<dyn LockBackend>,
    /// Draw a fresh token per pair (as the manager does) or reuse one.
    pub fresh_tokens: bool,
    /// A token to reuse.
    pub token: LockToken,
    /// TTL.
    pub ttl: Duration,
}

impl Op for BareBackend {
    async fn once(&self, key: &str) -> BoxResult<()> {
        let token = if self.fresh_tokens {
            LockToken::generate()?
        } else {
            self.token
        };
        match self.backend.try_acquire(key, &token, self.ttl).await? {
            AcquireOutcome::Acquired(_) => {}
            other => return Err(format!("try_acquire answered {other:?}").into()),
        }
        match self.backend.release(key, &token).await? {
            ReleaseOutcome::Released => Ok(()),
            other => Err(format!("release answered {other:?}").into()),
        }
    }
}

/// Increments a decimal counter with optimistic concurrency.
pub trait Incrementer: Send + Sync + 'static {
    /// One successful increment by task `task`; returns the attempts it took.
    fn increment(&self, task: usize, key: &str) -> impl Future<Output = BoxResult<u64>> + Send;

    /// The counter's value.
    fn read(&self, key: &str) -> impl Future<Output = BoxResult<u64>> + Send;
}

fn parse_counter(bytes: Option<&[u8]>) -> u64 {
    bytes
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// verrou's `VersionedStoreExt::update_from_opts` on any store: each task starts
/// its next increment from the value its previous one wrote (no read when
/// nobody else wrote meanwhile; the conflict reply corrects it otherwise).
pub struct StoreUpdate {
    /// The store.
    pub store: Arc<dyn VersionedStore>,
    /// Retry policy (the defaults, with room for heavy contention).
    pub options: UpdateOptions,
    /// Each task's last written value, by (task, key).
    pub last: std::sync::Mutex<std::collections::HashMap<(usize, String), lock_core::Versioned>>,
}

impl StoreUpdate {
    /// An incrementer over `store`.
    pub fn new(store: Arc<dyn VersionedStore>, options: UpdateOptions) -> Self {
        StoreUpdate {
            store,
            options,
            last: std::sync::Mutex::default(),
        }
    }

    fn last(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<(usize, String), lock_core::Versioned>> {
        match self.last.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Incrementer for StoreUpdate {
    async fn increment(&self, task: usize, key: &str) -> BoxResult<u64> {
        let mut attempts = 0u64;
        let start = self.last().remove(&(task, key.to_owned()));
        let written = match start {
            Some(start) => {
                self.store
                    .update_from_opts(key, Some(start), &self.options, |old| {
                        attempts += 1;
                        Some((parse_counter(old) + 1).to_string().into_bytes())
                    })
                    .await?
            }
            None => {
                self.store
                    .update_opts(key, &self.options, |old| {
                        attempts += 1;
                        Some((parse_counter(old) + 1).to_string().into_bytes())
                    })
                    .await?
            }
        }
        .ok_or("the increment never declines")?;
        self.last().insert((task, key.to_owned()), written);
        Ok(attempts)
    }

    async fn read(&self, key: &str) -> BoxResult<u64> {
        let v = self.store.get(key).await?;
        Ok(parse_counter(v.as_ref().map(|v| v.value.as_slice())))
    }
}

/// Tair without verrou: `EXGET`, then `EXSET .. VER v` (or `NX` when absent),
/// retried with the same backoff as verrou's update loop.
pub struct ExgetExset {
    /// The client.
    pub client: fred::clients::Client,
    /// Delay between conflicting attempts.
    pub backoff: Backoff,
}

impl Incrementer for ExgetExset {
    async fn increment(&self, _task: usize, key: &str) -> BoxResult<u64> {
        let mut attempts = 0u64;
        loop {
            if attempts > 0 {
                tokio::time::sleep(self.backoff.delay(u32::try_from(attempts - 1).unwrap_or(u32::MAX))).await;
            }
            attempts += 1;
            let current: Value = self.client.custom(fred::cmd!("EXGET"), vec![key]).await?;
            let written = match current {
                Value::Null => {
                    let r: Value = self.client.custom(fred::cmd!("EXSET"), vec![key, "1", "NX"]).await?;
                    !r.is_null()
                }
                Value::Array(items) => {
                    let value = items.first().and_then(|v| v.as_bytes()).map(<[u8]>::to_vec);
                    let version = items
                        .get(1)
                        .and_then(Value::as_i64)
                        .ok_or_else(|| format!("EXGET reply without a version: {items:?}"))?;
                    let next = (parse_counter(value.as_deref()) + 1).to_string();
                    let version = version.to_string();
                    let args = vec![key, next.as_str(), "VER", version.as_str()];
                    match self.client.custom::<Value, _>(fred::cmd!("EXSET"), args).await {
                        Ok(_) => true,
                        Err(e) if e.details().contains("stale") => false,
                        Err(e) => return Err(e.into()),
                    }
                }
                other => return Err(format!("unexpected EXGET reply {other:?}").into()),
            };
            if written {
                return Ok(attempts);
            }
        }
    }

    async fn read(&self, key: &str) -> BoxResult<u64> {
        let current: Value = self.client.custom(fred::cmd!("EXGET"), vec![key]).await?;
        match current {
            Value::Array(items) => Ok(parse_counter(items.first().and_then(|v| v.as_bytes()))),
            _ => Ok(0),
        }
    }
}

/// Plain Redis without verrou: `WATCH`+`GET` (one round trip), then
/// `MULTI`/`SET`/`EXEC` (one round trip), on a connection per task.
pub struct WatchMulti {
    /// One connection per task (WATCH is per connection).
    pub conns: Vec<redis::aio::MultiplexedConnection>,
    /// Delay between conflicting attempts.
    pub backoff: Backoff,
}

impl Incrementer for WatchMulti {
    async fn increment(&self, task: usize, key: &str) -> BoxResult<u64> {
        let mut conn = self.conns.get(task).ok_or("no connection for this task")?.clone();
        let mut attempts = 0u64;
        loop {
            if attempts > 0 {
                tokio::time::sleep(self.backoff.delay(u32::try_from(attempts - 1).unwrap_or(u32::MAX))).await;
            }
            attempts += 1;
            let (current,): (Option<String>,) = redis::pipe()
                .cmd("WATCH")
                .arg(key)
                .ignore()
                .get(key)
                .query_async(&mut conn)
                .await?;
            let next = parse_counter(current.as_deref().map(str::as_bytes)) + 1;
            let exec: redis::Value = redis::pipe().atomic().set(key, next).query_async(&mut conn).await?;
            if !matches!(exec, redis::Value::Nil) {
                return Ok(attempts);
            }
        }
    }

    async fn read(&self, key: &str) -> BoxResult<u64> {
        let mut conn = self.conns.first().ok_or("no connection")?.clone();
        let v: Option<String> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
        Ok(parse_counter(v.as_deref().map(str::as_bytes)))
    }
}
