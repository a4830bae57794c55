//! One interface over everything the benchmark locks with: verrou's manager,
//! rslock, thin raw clients of redis-rs and fred, and tokio's mutex.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_redis::redis;
use fred::interfaces::{ClientLike, KeysInterface};
use fred::types::{Expiration, SetOptions};
use lock_core::ReleaseOutcome;
use lock_core::{LockGuard, LockManager};

use crate::BoxResult;

/// Acquire and release one key.
pub trait Locker: Send + Sync + 'static {
    /// Proof of holding the key.
    type Held: Send;

    /// Take `key`, waiting as the implementation does by default.
    fn acquire(&self, key: &str) -> impl Future<Output = BoxResult<Self::Held>> + Send;

    /// Give it back; an error if it was no longer ours.
    fn release(&self, held: Self::Held) -> impl Future<Output = BoxResult<()>> + Send;

    /// One acquire + release pair.
    fn pair(&self, key: &str) -> impl Future<Output = BoxResult<()>> + Send {
        async move {
            let held = self.acquire(key).await?;
            self.release(held).await
        }
    }
}

/// verrou: `LockManager::lock` + `LockGuard::release`.
pub struct Verrou(pub LockManager);

impl Locker for Verrou {
    type Held = LockGuard;

    async fn acquire(&self, key: &str) -> BoxResult<LockGuard> {
        Ok(self.0.lock(key).await?)
    }

    async fn release(&self, guard: LockGuard) -> BoxResult<()> {
        match guard.release().await? {
            ReleaseOutcome::Released => Ok(()),
            other => Err(format!("release answered {other:?}").into()),
        }
    }
}

/// rslock 0.10: `acquire_no_guard` (its retry loop) + `unlock`.
pub struct Rslock {
    manager: rslock::LockManager,
    ttl: Duration,
}

impl Rslock {
    /// A manager over these servers (quorum n/2+1), default retries.
    pub fn new(urls: &[String], ttl: Duration) -> Self {
        Rslock {
            manager: rslock::LockManager::new(urls.to_vec()),
            ttl,
        }
    }
}

impl Locker for Rslock {
    type Held = rslock::Lock;

    async fn acquire(&self, key: &str) -> BoxResult<rslock::Lock> {
        self.manager
            .acquire_no_guard(key, self.ttl)
            .await
            .map_err(|e| format!("rslock: {e:?}").into())
    }

    async fn release(&self, lock: rslock::Lock) -> BoxResult<()> {
        // rslock's unlock reports nothing.
        self.manager.unlock(&lock).await;
        Ok(())
    }
}

/// Cheap unique lock values for the raw clients: a random per-process prefix
/// and a counter. The floor of what a token can cost.
pub struct TokenSource {
    prefix: String,
    next: AtomicU64,
}

impl TokenSource {
    /// A fresh source.
    pub fn new() -> BoxResult<Self> {
        let token = lock_core::LockToken::generate()?;
        Ok(TokenSource {
            prefix: token.to_hex()[..16].to_owned(),
            next: AtomicU64::new(0),
        })
    }

    /// The next value (32 hex digits, the size of verrou's tokens).
    pub fn next(&self) -> String {
        format!("{}{:016x}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// The compare-and-delete script a Lua backend releases with.
pub const RELEASE_LUA: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// An acquire script doing what a Lua backend's does: take a free key, or
/// answer the holder's remaining TTL.
pub const ACQUIRE_LUA: &str = "if redis.call('get', KEYS[1]) then return {0, redis.call('pttl', KEYS[1])} end \
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return {1, 0}";

/// redis-rs, no framework: `SET key token NX PX ttl` (or, scripted, the
/// acquire script by `EVALSHA`), then the release script by `EVALSHA`
/// (redis-rs loads scripts on `NOSCRIPT`), over one shared multiplexed
/// connection.
pub struct RawRedisRs {
    conn: redis::aio::MultiplexedConnection,
    acquire: Option<redis::Script>,
    release: redis::Script,
    tokens: TokenSource,
    ttl_ms: u64,
}

impl RawRedisRs {
    /// Connect to `url`; acquire with `SET NX PX`.
    pub async fn connect(url: &str, ttl: Duration) -> BoxResult<Self> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(RawRedisRs {
            conn,
            acquire: None,
            release: redis::Script::new(RELEASE_LUA),
            tokens: TokenSource::new()?,
            ttl_ms: lock_core::raw::ttl_millis(ttl),
        })
    }

    /// Connect to `url`; acquire with a script, as the Lua backend does.
    pub async fn connect_scripted(url: &str, ttl: Duration) -> BoxResult<Self> {
        let mut raw = Self::connect(url, ttl).await?;
        raw.acquire = Some(redis::Script::new(ACQUIRE_LUA));
        Ok(raw)
    }

    /// The connection (cheap to clone), for PING and other raw commands.
    pub fn connection(&self) -> redis::aio::MultiplexedConnection {
        self.conn.clone()
    }
}

impl Locker for RawRedisRs {
    type Held = (String, String);

    async fn acquire(&self, key: &str) -> BoxResult<(String, String)> {
        let token = self.tokens.next();
        let mut conn = self.conn.clone();
        if let Some(script) = &self.acquire {
            let (taken, _pttl): (i64, i64) = script
                .key(key)
                .arg(&token)
                .arg(self.ttl_ms)
                .invoke_async(&mut conn)
                .await?;
            return if taken == 1 {
                Ok((key.to_owned(), token))
            } else {
                Err(format!("raw redis-rs: {key} is held").into())
            };
        }
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms)
            .query_async(&mut conn)
            .await?;
        match reply {
            Some(_) => Ok((key.to_owned(), token)),
            None => Err(format!("raw redis-rs: {key} is held").into()),
        }
    }

    async fn release(&self, (key, token): (String, String)) -> BoxResult<()> {
        let mut conn = self.conn.clone();
        let deleted: i64 = self.release.key(&key).arg(&token).invoke_async(&mut conn).await?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(format!("raw redis-rs: release of {key} deleted nothing").into())
        }
    }
}

/// A fred client configured as a lock library would: command timeout,
/// reconnect policy, one attempt per command (no silent re-sends), no Nagle.
pub async fn fred_client(url: &str) -> BoxResult<fred::clients::Client> {
    use fred::types::config::{Config, ReconnectPolicy, TcpConfig};
    let mut builder = fred::types::Builder::from_config(Config::from_url(url)?);
    builder
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(2);
            c.internal_command_timeout = Duration::from_secs(2);
            c.max_command_attempts = 1;
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..Default::default()
            };
        })
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2));
    let client = builder.build()?;
    client.init().await?;
    Ok(client)
}

/// fred, no framework: `SET key token NX PX ttl`, then Tair's `CAD key token`,
/// over one client (fred pipelines concurrent commands on its connection).
pub struct RawFred {
    client: fred::clients::Client,
    tokens: TokenSource,
    ttl_ms: i64,
    /// The release script's SHA, when releasing by `EVALSHA` instead of `CAD`.
    release_sha: Option<String>,
}

impl RawFred {
    /// Connect to `url` (a server with the Tair module, for `CAD`).
    pub async fn connect(url: &str, ttl: Duration) -> BoxResult<Self> {
        Ok(RawFred {
            client: fred_client(url).await?,
            tokens: TokenSource::new()?,
            ttl_ms: i64::try_from(lock_core::raw::ttl_millis(ttl))?,
            release_sha: None,
        })
    }

    /// Connect to `url`; release with the compare-and-delete script (loaded
    /// here) by `EVALSHA`: the commands of the Tair backend's default release.
    pub async fn connect_scripted(url: &str, ttl: Duration) -> BoxResult<Self> {
        let mut raw = Self::connect(url, ttl).await?;
        let sha: String = raw
            .client
            .custom(fred::cmd!("SCRIPT"), vec!["LOAD", RELEASE_LUA])
            .await?;
        raw.release_sha = Some(sha);
        Ok(raw)
    }

    /// The client, for PING and other raw commands.
    pub fn client(&self) -> &fred::clients::Client {
        &self.client
    }
}

impl Locker for RawFred {
    type Held = (String, String);

    async fn acquire(&self, key: &str) -> BoxResult<(String, String)> {
        let token = self.tokens.next();
        let reply: Option<String> = self
            .client
            .set(
                key,
                token.as_str(),
                Some(Expiration::PX(self.ttl_ms)),
                Some(SetOptions::NX),
                false,
            )
            .await?;
        match reply {
            Some(_) => Ok((key.to_owned(), token)),
            None => Err(format!("raw fred: {key} is held").into()),
        }
    }

    async fn release(&self, (key, token): (String, String)) -> BoxResult<()> {
        let deleted: i64 = match &self.release_sha {
            Some(sha) => {
                self.client
                    .custom(
                        fred::cmd!("EVALSHA"),
                        vec![sha.as_str(), "1", key.as_str(), token.as_str()],
                    )
                    .await?
            }
            None => {
                self.client
                    .custom(fred::cmd!("CAD"), vec![key.as_str(), token.as_str()])
                    .await?
            }
        };
        if deleted == 1 {
            Ok(())
        } else {
            Err(format!("raw fred: CAD {key} answered {deleted}").into())
        }
    }
}

/// `tokio::sync::Mutex` lock + unlock: the in-process reference.
pub struct TokioMutex(pub Arc<tokio::sync::Mutex<()>>);

impl Locker for TokioMutex {
    type Held = tokio::sync::OwnedMutexGuard<()>;

    async fn acquire(&self, _key: &str) -> BoxResult<Self::Held> {
        Ok(self.0.clone().lock_owned().await)
    }

    async fn release(&self, guard: Self::Held) -> BoxResult<()> {
        drop(guard);
        Ok(())
    }

    async fn pair(&self, _key: &str) -> BoxResult<()> {
        let guard = self.0.lock().await;
        drop(guard);
        Ok(())
    }
}
