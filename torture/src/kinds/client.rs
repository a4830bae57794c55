//! The kinds' clients: like the mutex rows' lock clients, each on its own
//! OS thread and current-thread runtime with its own backend connections
//! and its own kind manager, recording every hold on the run clock.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::{
    ElectionManager, Error, LeaseHandle, LockBackend, LockManager, LockOptions, MultiLockManager, RwLockManager,
    RwMode, SemaphoreManager,
};

use lock_core::raw::{ElectionBackend, MultiLockBackend, RwLockBackend, SemaphoreBackend};
use lock_memory::MemoryBackend;
use lock_redis_lua::RedisLuaBuilder;
use lock_tair::TairBuilder;
use tokio::time::Instant;

use super::SEMAPHORE_SIZE;
use crate::backends::Spec;
use crate::client::{InBody, Stall, error_kind};
use crate::clock;
use crate::probe;
use crate::record::Log;

/// What a client of a kind row does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Takes this many permits of the semaphore.
    Permits(u32),
    /// Read-locks.
    Reader,
    /// Write-locks.
    Writer,
    /// Takes the upgradeable read, reads, upgrades, writes (its holds are
    /// recorded as an `Upgrader` read, then an `Upgraded` write).
    Upgrader,
    /// The write of an upgraded read (a hold's role, not a client's).
    Upgraded,
    /// Locks two or three of the keys at once.
    Set,
    /// Locks one key with the plain mutex.
    Mutex,
    /// Campaigns for leadership.
    Candidate,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Permits(_) => "permits",
            Role::Reader => "reader",
            Role::Writer => "writer",
            Role::Upgrader => "upgrader",
            Role::Upgraded => "upgraded writer",
            Role::Set => "key set",
            Role::Mutex => "mutex",
            Role::Candidate => "candidate",
        }
    }

    /// Exclusive holds write to the protected resource with their token.
    fn writes(self) -> bool {
        matches!(
            self,
            Role::Writer | Role::Upgraded | Role::Set | Role::Mutex | Role::Candidate
        )
    }
}

/// One hold of a kind (a `with_*` body), on the run clock.
#[derive(Debug, Clone)]
pub struct Hold {
    /// Client index.
    pub client: usize,
    /// What the client does.
    pub role: Role,
    /// The keys held (multi-key and mutex clients), by index.
    pub keys: Vec<usize>,
    /// When the client asked (the `with_*` call began).
    pub asked: i64,
    /// Body start (the grant was in).
    pub start: i64,
    /// Body end (returned, or dropped on a loss).
    pub end: i64,
    /// The lease's local deadline when the body ended.
    pub deadline: i64,
    /// The grant's fencing token (the term for a leader).
    pub fence: Option<u64>,
    /// Dropped on a loss signal.
    pub cancelled: bool,
    /// The client's runtime was stalled inside it.
    pub stalled: bool,
}

impl Hold {
    /// End of the part inside the validity window.
    pub fn valid_end(&self) -> i64 {
        self.end.min(self.deadline)
    }
}

/// Every hold of a row.
#[derive(Debug, Default)]
pub struct Holds(Mutex<Vec<Hold>>);

impl Holds {
    fn lock(&self) -> MutexGuard<'_, Vec<Hold>> {
        match self.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn push(&self, h: Hold) {
        self.lock().push(h);
    }

    /// How many holds have been recorded so far.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// A copy of every hold.
    pub fn snapshot(&self) -> Vec<Hold> {
        self.lock().clone()
    }
}

/// The kind backends of one client (one connection set behind them all).
pub struct KindBackends {
    lock: Arc<dyn LockBackend>,
    semaphores: Arc<dyn SemaphoreBackend>,
    rw: Arc<dyn RwLockBackend>,
    multi: Arc<dyn MultiLockBackend>,
    elections: Arc<dyn ElectionBackend>,
}

fn every_kind<B>(b: B) -> KindBackends
where
    B: SemaphoreBackend + RwLockBackend + MultiLockBackend + ElectionBackend + 'static,
{
    let b = Arc::new(b);
    KindBackends {
        lock: b.clone(),
        semaphores: b.clone(),
        rw: b.clone(),
        multi: b.clone(),
        elections: b,
    }
}

/// Build the kind backends of `spec` as the mutex rows build theirs
/// (fencing on, `timeout` on each reply, the row's replica acknowledgement).
///
/// # Errors
/// The backend's connect errors; `Unsupported` for a backend without the
/// kinds (Redlock).
pub async fn build_kinds(spec: &Spec, timeout: Duration) -> lock_core::Result<KindBackends> {
    Ok(match spec {
        Spec::Memory(m) => every_kind::<MemoryBackend>(m.clone()),
        Spec::Lua { url, ack } => {
            let mut builder = RedisLuaBuilder::url(url.clone())
                .fencing(true)
                .connect_timeout(timeout)
                .response_timeout(timeout);
            if let Some(ack) = ack {
                builder = builder.replica_ack(*ack);
            }
            every_kind(builder.build().await?)
        }
        Spec::Tair { url, ack } => {
            let mut builder = TairBuilder::url(url.clone())
                .fencing(true)
                .connect_timeout(timeout)
                .response_timeout(timeout);
            if let Some(ack) = ack {
                builder = builder.replica_ack(*ack);
            }
            every_kind(builder.build().await?)
        }
        // The kinds' rows use the lease mode (the advisory mode has none).
        Spec::Postgres { url, .. } => every_kind(
            lock_postgres::PostgresBackend::builder(url)?
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .await?,
        ),
        Spec::Etcd { endpoints } => every_kind(
            lock_etcd::EtcdBuilder::new(endpoints.split(',').map(str::to_owned))
                .connect_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .await?,
        ),
        // Redlock has no kinds (its kind traits answer Unsupported); a
        // backend new to this module gets its arm here (then one line in
        // `kinds::full`).
        _ => {
            return Err(Error::Unsupported {
                backend: "this torture spec".into(),
                what: "lock kinds".into(),
            });
        }
    })
}

/// The managers a client uses.
enum Managers {
    Semaphore(lock_core::Semaphore),
    Rw(RwLockManager),
    Multi(MultiLockManager, LockManager),
    Election(ElectionManager),
}

/// One client of a kind row.
pub struct KindClient {
    /// Index (client 0 is the stalled one).
    pub id: usize,
    /// What it does.
    pub role: Role,
    /// How to reach the backend.
    pub spec: Spec,
    /// The semaphore's, read-write lock's or election's name.
    pub name: String,
    /// The multi-key rows' keys.
    pub keys: Arc<Vec<String>>,
    /// Lock options (TTL, timeouts).
    pub options: LockOptions,
    /// Seed of this client's random choices.
    pub seed: u64,
    /// Stop starting holds after this (run clock, µs).
    pub stop: Arc<AtomicI64>,
    /// The stall this client performs, if it is the stalled one.
    pub stall: Option<Arc<Stall>>,
    /// Set while inside a hold.
    pub in_body: Arc<AtomicBool>,
    /// Until then (run clock, µs) client 0 keeps long holds (see
    /// `crate::client::LockClient::long_until`).
    pub long_until: i64,
    /// Writes, errors, fault windows, runtime lags.
    pub log: Arc<Log>,
    /// Where holds go.
    pub holds: Arc<Holds>,
}

impl KindClient {
    /// Connect, then hold and release in a loop until `stop`.
    pub async fn run(self) {
        let ttl = self.options.ttl;
        let built = loop {
            match build_kinds(&self.spec, ttl).await {
                Ok(b) => break b,
                Err(e) => {
                    self.log.error(format!("connect: {}", error_kind(&e)));
                    if clock::now() >= self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    tokio::time::sleep(ttl / 4).await;
                }
            }
        };
        let managers = match self.managers(built) {
            Ok(m) => m,
            Err(e) => {
                self.log.error(format!("manager: {e}"));
                return;
            }
        };
        let _probe = probe::Running::start(self.id, self.log.clone());
        let mut rng = fastrand::Rng::with_seed(self.seed);
        while clock::now() < self.stop.load(Ordering::SeqCst) {
            let (hold, gap) = self.timing(&mut rng);
            let asked = clock::now();
            let result = match &managers {
                Managers::Semaphore(sem) => {
                    let Role::Permits(n) = self.role else { return };
                    sem.with_permits(n, |lease| self.body(self.role, Vec::new(), asked, lease, hold))
                        .await
                }
                Managers::Rw(rw) if self.role == Role::Upgrader => self.upgrade_once(rw, asked, hold).await,
                Managers::Rw(rw) => {
                    let mode = if self.role == Role::Writer {
                        RwMode::Write
                    } else {
                        RwMode::Read
                    };
                    rw.with_rw(&self.name, mode, |lease| {
                        self.body(self.role, vec![0], asked, lease, hold)
                    })
                    .await
                }
                Managers::Multi(multi, _) if self.role == Role::Set => {
                    // Two or three of the keys, any order.
                    let mut picked: Vec<usize> = (0..self.keys.len()).collect();
                    rng.shuffle(&mut picked);
                    picked.truncate(rng.usize(2..=self.keys.len()));
                    picked.sort_unstable();
                    let names: Vec<&str> = picked.iter().map(|&k| self.keys[k].as_str()).collect();
                    multi
                        .with_locks(&names, |lease| self.body(self.role, picked.clone(), asked, lease, hold))
                        .await
                }
                Managers::Multi(_, locks) => {
                    let k = rng.usize(..self.keys.len());
                    locks
                        .with_lock(&self.keys[k], |lease| self.body(self.role, vec![k], asked, lease, hold))
                        .await
                }
                Managers::Election(election) => {
                    let identity = format!("candidate-{}", self.id);
                    election
                        .with_leadership(&self.name, identity.as_bytes(), |lease| {
                            self.body(self.role, vec![0], asked, lease, hold)
                        })
                        .await
                }
            };
            if let Err(e) = result {
                self.log.error(format!("{}: {}", self.role.label(), error_kind(&e)));
            }
            tokio::time::sleep(gap).await;
        }
        match &managers {
            Managers::Semaphore(_) | Managers::Rw(_) | Managers::Election(_) => {}
            Managers::Multi(_, locks) => locks.shutdown(),
        }
    }

    fn managers(&self, b: KindBackends) -> lock_core::Result<Managers> {
        let o = self.options.clone();
        Ok(match self.role {
            Role::Permits(_) => {
                Managers::Semaphore(SemaphoreManager::from_arc(b.semaphores, o)?.semaphore(&self.name, SEMAPHORE_SIZE)?)
            }
            Role::Reader | Role::Writer | Role::Upgrader | Role::Upgraded => {
                Managers::Rw(RwLockManager::from_arc(b.rw, o)?)
            }
            Role::Set | Role::Mutex => Managers::Multi(
                MultiLockManager::from_arc(b.multi, o.clone())?,
                LockManager::from_arc(b.lock, o)?,
            ),
            Role::Candidate => Managers::Election(ElectionManager::from_arc(b.elections, o)?),
        })
    }

    /// Whether this is client 0 while the fault is due or pending.
    fn victim(&self) -> bool {
        self.id == 0 && (clock::now() < self.long_until || self.stall.as_ref().is_some_and(|s| s.is_requested()))
    }

    /// How long to hold, and the pause before the next attempt.
    fn timing(&self, rng: &mut fastrand::Rng) -> (Duration, Duration) {
        let ttl = self.options.ttl;
        match self.role {
            // Readers overlap one another with no gap: some reader is
            // nearly always inside. Short reads, with one in ten of 0.5–1.5
            // TTL (renewed).
            Role::Reader if rng.f64() < 0.1 => (ttl.mul_f64(0.5 + rng.f64()), Duration::ZERO),
            Role::Reader => (Duration::from_micros(rng.u64(2_000..30_000)), Duration::ZERO),
            // Client 0 (the writer the faults aim at) comes back after one
            // to two TTLs: each time it arrives among readers.
            Role::Writer if self.victim() => (ttl.mul_f64(0.1 + rng.f64() * 0.4), ttl.mul_f64(1.0 + rng.f64())),
            // Client 0 of the other kinds: hold times from 0.1 to 2.5 TTL
            // (many need the renewer).
            _ if self.victim() => (ttl.mul_f64(0.1 + rng.f64() * 2.4), ttl.mul_f64(rng.f64() * 0.2)),
            // The others: mostly short holds, so that a row sees hundreds.
            _ => crate::client::volume_timing(rng, ttl),
        }
    }

    /// One upgradeable read: half the hold reading, then the upgrade, then
    /// half the hold writing with the upgraded write's token; each part
    /// raced against the loss of its lease, as `with_rw` races its body.
    async fn upgrade_once(&self, rw: &RwLockManager, asked: i64, hold: Duration) -> lock_core::Result<()> {
        let read = rw.upgradeable_read(&self.name).await?;
        self.held(Role::Upgrader, asked, read.handle(), hold / 2).await?;
        let asked = clock::now();
        let write = read.upgrade().await?;
        self.held(Role::Upgraded, asked, write.handle(), hold / 2).await?;
        match write.release().await? {
            lock_core::ReleaseOutcome::Released => Ok(()),
            _ => Err(lost(&self.name, lock_core::LossReason::NotOwner)),
        }
    }

    /// The body of a hold under `lease`, dropped when the lease is lost.
    async fn held(&self, role: Role, asked: i64, lease: LeaseHandle, hold: Duration) -> lock_core::Result<()> {
        let loss = lease.lost();
        tokio::select! {
            biased;
            reason = loss => Err(lost(&self.name, reason)),
            () = self.body(role, vec![0], asked, lease.clone(), hold) => if lease.is_lost() {
                // The body returned past the deadline.
                Err(lost(&self.name, lock_core::LossReason::DeadlinePassed))
            } else {
                Ok(())
            },
        }
    }

    async fn body(&self, role: Role, keys: Vec<usize>, asked: i64, lease: LeaseHandle, hold: Duration) {
        let fence = lease.fencing_token().map(|f| f.0);
        let mut open = Open {
            holds: &self.holds,
            hold: Hold {
                client: self.id,
                role,
                keys,
                asked,
                start: clock::now(),
                end: 0,
                deadline: clock::at(lease.deadline()),
                fence,
                cancelled: true,
                stalled: false,
            },
            lease,
        };
        let start = open.hold.start;
        let _inside = InBody::enter(&self.in_body);
        self.write_all(role, &open.hold.keys, start, fence);
        let until = Instant::now() + hold;
        loop {
            if let Some(stall) = &self.stall
                && stall.start()
            {
                // Stop the world, then write at once (see the mutex rows).
                let from = clock::now();
                std::thread::sleep(stall.duration());
                self.log.window(from, clock::now());
                stall.finish();
                open.hold.stalled = true;
                self.write_all(role, &open.hold.keys, start, fence);
            }
            let now = Instant::now();
            if now >= until {
                break;
            }
            tokio::time::sleep((until - now).min(self.options.ttl / 10)).await;
        }
        self.write_all(role, &open.hold.keys, start, fence);
        open.hold.cancelled = false;
    }

    /// A write to the resource of each held key, with the hold's token.
    fn write_all(&self, role: Role, keys: &[usize], start: i64, fence: Option<u64>) {
        if role.writes() {
            for &k in keys {
                self.log.write(self.id, k, start, fence);
            }
        }
    }
}

/// Records the hold when its body ends or is dropped.
struct Open<'a> {
    holds: &'a Holds,
    hold: Hold,
    lease: LeaseHandle,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.hold.end = clock::now();
        self.hold.deadline = clock::at(self.lease.deadline());
        self.holds.push(self.hold.clone());
    }
}

/// The error of a hold whose lease was lost.
fn lost(name: &str, reason: lock_core::LossReason) -> Error {
    Error::Lost {
        key: name.to_owned(),
        held_for: Duration::ZERO,
        reason,
    }
}
