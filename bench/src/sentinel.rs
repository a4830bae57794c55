//! Redis Sentinel in the benchmark (issue 46): lock-testkit's
//! `SentinelGroup` (a primary with the Tair module, two replicas, three
//! sentinels) started on first use, and verrou's redis-lua and tair
//! backends on it twice, in the same interleaved rounds: through the
//! sentinels (`redis+sentinel://`, `tair+sentinel://`) and connected
//! directly to the primary they name. The sentinels are asked at connect
//! and after a dropped connection only, never per operation, so the pairs
//! should cost the same.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions};
use lock_redis_lua::RedisLuaBackend;
use lock_tair::TairBackend;
use lock_testkit::server::{RedisServer, SentinelGroup};

use crate::BoxResult;
use crate::drive::Pairs;
use crate::lab::admin;
use crate::locks::Verrou;
use crate::measure::Probe;
use crate::results::Kind;
use crate::rows::Subject;

/// verrou's redis-lua backend through the sentinels, defaults.
pub const LUA_SENTINEL: &str = "verrou redis-lua through Sentinel";
/// The same backend connected to the primary the sentinels name.
pub const LUA_SENTINEL_DIRECT: &str = "… redis-lua direct to the Sentinel primary";
/// verrou's tair backend through the sentinels, defaults.
pub const TAIR_SENTINEL: &str = "verrou tair through Sentinel";
/// The same backend connected to the primary the sentinels name.
pub const TAIR_SENTINEL_DIRECT: &str = "… tair direct to the Sentinel primary";

/// Each through-Sentinel row and its direct baseline.
pub const PAIRS: [(&str, &str); 2] = [
    (LUA_SENTINEL, LUA_SENTINEL_DIRECT),
    (TAIR_SENTINEL, TAIR_SENTINEL_DIRECT),
];

/// `down-after-milliseconds` of the group: long, so that a loaded
/// machine's slow reply does not fail it over during a row.
const DOWN_AFTER: Duration = Duration::from_secs(10);

/// The Sentinel group of a run, started on first use (a run filtered to
/// other rows never starts one).
#[derive(Default)]
pub struct SentinelLab {
    group: Option<SentinelGroup>,
}

impl SentinelLab {
    async fn group(&mut self) -> BoxResult<&SentinelGroup> {
        if self.group.is_none() {
            let builder = RedisServer::builder().tair_module();
            self.group = Some(SentinelGroup::start_with(builder, DOWN_AFTER).await?);
        }
        self.group.as_ref().ok_or_else(|| "Sentinel group not started".into())
    }

    /// The row called `label` (one of [`PAIRS`]): a manager with default
    /// options on a backend of its own, and a probe over the primary.
    pub async fn subject(&mut self, label: &str) -> BoxResult<Subject> {
        let group = self.group().await?;
        let primary = group.primary().await?;
        let backend: Arc<dyn LockBackend> = match label {
            LUA_SENTINEL => Arc::new(RedisLuaBackend::connect(&group.url("redis+sentinel")).await?),
            LUA_SENTINEL_DIRECT => Arc::new(RedisLuaBackend::connect(&primary.url()).await?),
            TAIR_SENTINEL => Arc::new(TairBackend::connect(&group.url("tair+sentinel")).await?),
            TAIR_SENTINEL_DIRECT => Arc::new(TairBackend::connect(&format!("tair://{}", primary.addr())).await?),
            other => return Err(format!("not a Sentinel row: {other}").into()),
        };
        let kind = if label.starts_with('…') {
            Kind::Reference
        } else {
            Kind::Verrou
        };
        let manager = LockManager::from_arc(backend, LockOptions::default())?;
        let probe = Probe::connect(&[primary]).await?;
        Ok(Subject::new(label, kind, Pairs(Verrou(manager)), probe))
    }

    /// Empties the primary (the replicas follow), if the group runs.
    pub async fn flush(&self) -> BoxResult<()> {
        if let Some(group) = &self.group {
            admin(group.primary().await?, &["FLUSHALL"]).await?;
        }
        Ok(())
    }
}
