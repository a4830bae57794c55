//! Scenario 8: one contended load per lock kind (issue 16): a semaphore of
//! 4 permits, a read-write lock read mostly, transfers between accounts
//! under two-key locks, and leader election with hand-overs. Every hold is
//! recorded as an interval and the kind's bound checked over all of them.

use std::fmt::Display;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Mutex, atomic::Ordering};

use lock_core::{
    Capabilities, ElectionManager, Leadership, LockBackend, MultiLockGuard, MultiLockManager, Permit, RwLockGuard,
    RwLockManager, Semaphore, SemaphoreManager,
};

use lock_core::ReleaseOutcome;

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::drive::Timing;
use crate::holds::{Claim, Hold, check};
use crate::lab::AllKinds;
use crate::measure::{Interval, Latencies, nanos};
use crate::results::{KindRow, Kinds};

/// Permits of the semaphore.
pub const SEMAPHORE_SIZE: u32 = 4;
/// Contenders for them.
pub const SEMAPHORE_CONTENDERS: usize = 16;
/// Readers of the read-write lock.
pub const RW_READERS: usize = 14;
/// Writers of the read-write lock.
pub const RW_WRITERS: usize = 2;
/// A writer's pause between two writes: writers that loop without one keep
/// a waiting writer's intent up all the time, and the writer-preferring
/// policy then holds every reader back (a load of writes, not of reads).
pub const WRITER_REST: Duration = Duration::from_millis(5);
/// Accounts transferred between.
pub const ACCOUNTS: usize = 8;
/// Tasks moving money, each between two accounts at a time.
pub const TRANSFER_CONTENDERS: usize = 16;
/// Campaigners for one leadership.
pub const CAMPAIGNERS: usize = 8;
/// Each account's starting balance.
const START_BALANCE: i64 = 1_000;

/// The four loads.
#[derive(Debug, Clone, Copy)]
enum Load {
    Semaphore,
    ReadWrite,
    MultiKey,
    Election,
}

impl Load {
    const ALL: [Load; 4] = [Load::Semaphore, Load::ReadWrite, Load::MultiKey, Load::Election];

    fn name(self) -> &'static str {
        match self {
            Load::Semaphore => "semaphore",
            Load::ReadWrite => "read-write",
            Load::MultiKey => "multi-key",
            Load::Election => "election",
        }
    }

    fn supported(self, caps: &Capabilities) -> bool {
        match self {
            Load::Semaphore => caps.semaphores,
            Load::ReadWrite => caps.rw_locks,
            Load::MultiKey => caps.multi_key_locks,
            Load::Election => caps.leader_election,
        }
    }

    fn contenders(self) -> usize {
        match self {
            Load::Semaphore => SEMAPHORE_CONTENDERS,
            Load::ReadWrite => RW_READERS + RW_WRITERS,
            Load::MultiKey => TRANSFER_CONTENDERS,
            Load::Election => CAMPAIGNERS,
        }
    }

    fn setup(self) -> String {
        match self {
            Load::Semaphore => format!("N = {SEMAPHORE_SIZE}, {SEMAPHORE_CONTENDERS} contenders × 1 permit"),
            Load::ReadWrite => format!(
                "{RW_READERS} readers, {RW_WRITERS} writers ({} ms apart)",
                WRITER_REST.as_millis()
            ),
            Load::MultiKey => format!("{TRANSFER_CONTENDERS} tasks, random pairs of {ACCOUNTS} accounts"),
            Load::Election => format!("{CAMPAIGNERS} campaigners, campaign → resign"),
        }
    }

    fn bound(self) -> String {
        match self {
            Load::Semaphore => format!("≤ {SEMAPHORE_SIZE} holders"),
            Load::ReadWrite => "1 writer or many readers".to_owned(),
            Load::MultiKey => "1 holder per account".to_owned(),
            Load::Election => "1 leader".to_owned(),
        }
    }

    fn shared_max(self) -> usize {
        match self {
            Load::Semaphore => SEMAPHORE_SIZE as usize,
            Load::ReadWrite => usize::MAX,
            Load::MultiKey | Load::Election => 0,
        }
    }
}

/// What a held lock of any kind needs to be given back.
trait Contender: Send + Sync + 'static {
    type Held: Send + 'static;

    /// Wait for the lock: the guard, how it shares, and what it holds.
    fn acquire(&self) -> impl Future<Output = lock_core::Result<(Self::Held, Claim, Vec<u16>)>> + Send;

    /// The critical section.
    fn inside(&self, held: &Self::Held) -> impl Future<Output = ()> + Send;

    /// Give it back.
    fn release(&self, held: Self::Held) -> impl Future<Output = lock_core::Result<ReleaseOutcome>> + Send;

    /// Time between a release and the next acquire (not counted as a wait).
    fn rest(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A few yields: long enough for other holders to be granted meanwhile
/// (the bound is reached, so it can be exceeded), short enough to measure
/// the lock rather than the work.
async fn work() {
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
}

struct PermitTaker(Semaphore);

impl Contender for PermitTaker {
    type Held = Permit;

    async fn acquire(&self) -> lock_core::Result<(Permit, Claim, Vec<u16>)> {
        Ok((self.0.acquire(1).await?, Claim::Shared, vec![0]))
    }

    async fn inside(&self, _: &Permit) {
        work().await;
    }

    async fn release(&self, held: Permit) -> lock_core::Result<ReleaseOutcome> {
        held.release().await
    }
}

struct RwUser {
    locks: RwLockManager,
    writer: bool,
}

impl Contender for RwUser {
    type Held = RwLockGuard;

    async fn acquire(&self) -> lock_core::Result<(RwLockGuard, Claim, Vec<u16>)> {
        Ok(if self.writer {
            (self.locks.write("kinds:rw").await?, Claim::Exclusive, vec![0])
        } else {
            (self.locks.read("kinds:rw").await?, Claim::Shared, vec![0])
        })
    }

    async fn inside(&self, _: &RwLockGuard) {
        work().await;
    }

    async fn release(&self, held: RwLockGuard) -> lock_core::Result<ReleaseOutcome> {
        held.release().await
    }

    async fn rest(&self) {
        if self.writer {
            tokio::time::sleep(WRITER_REST).await;
        }
    }
}

/// Moves one unit between two accounts under a lock over both; the
/// balances are read, yielded over and written back, so an overlap of two
/// transfers on one account loses or creates money.
struct Transferrer {
    locks: MultiLockManager,
    keys: Arc<Vec<String>>,
    balances: Arc<Vec<AtomicI64>>,
    rng: AtomicU64,
}

impl Transferrer {
    /// Two distinct accounts (xorshift: no need for a good generator).
    fn pair(&self) -> (usize, usize) {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        let from = (x % ACCOUNTS as u64) as usize;
        let step = 1 + ((x >> 32) % (ACCOUNTS as u64 - 1)) as usize;
        (from, (from + step) % ACCOUNTS)
    }
}

impl Contender for Transferrer {
    type Held = (MultiLockGuard, usize, usize);

    async fn acquire(&self) -> lock_core::Result<(Self::Held, Claim, Vec<u16>)> {
        let (from, to) = self.pair();
        let guard = self.locks.lock(&[&self.keys[from], &self.keys[to]]).await?;
        Ok(((guard, from, to), Claim::Exclusive, vec![from as u16, to as u16]))
    }

    async fn inside(&self, held: &Self::Held) {
        let (_, from, to) = *held;
        let a = self.balances[from].load(Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.balances[from].store(a - 1, Ordering::SeqCst);
        let b = self.balances[to].load(Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.balances[to].store(b + 1, Ordering::SeqCst);
    }

    async fn release(&self, held: Self::Held) -> lock_core::Result<ReleaseOutcome> {
        held.0.release().await
    }
}

/// Terms won, each with when it was won (`None`: a leadership without a term).
type Won = Vec<(Instant, Option<u64>)>;

/// Campaigns, leads for a moment, resigns, campaigns again; records each
/// term it won with the time it won it.
struct Campaigner {
    election: ElectionManager,
    identity: Vec<u8>,
    terms: Arc<Mutex<Won>>,
}

impl Contender for Campaigner {
    type Held = Leadership;

    async fn acquire(&self) -> lock_core::Result<(Leadership, Claim, Vec<u16>)> {
        let leadership = self.election.campaign("kinds:leader", &self.identity).await?;
        let won = (Instant::now(), Some(leadership.term()));
        self.terms.lock().unwrap_or_else(|e| e.into_inner()).push(won);
        Ok((leadership, Claim::Exclusive, vec![0]))
    }

    async fn inside(&self, _: &Leadership) {
        work().await;
    }

    async fn release(&self, held: Leadership) -> lock_core::Result<ReleaseOutcome> {
        held.resign().await
    }
}

/// One contender's record.
#[derive(Default)]
struct Log {
    holds: Vec<Hold>,
    /// (grant time, wait, claim).
    waits: Vec<(Instant, u64, Claim)>,
    errors: u64,
    first_error: Option<String>,
}

impl Log {
    fn failed(&mut self, e: impl Display) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| e.to_string());
    }
}

/// What a contended run produced.
#[derive(Default)]
struct Run {
    acquisitions: u64,
    waits: Vec<u64>,
    exclusive_waits: Vec<u64>,
    shared: u64,
    exclusive: u64,
    holds: Vec<Hold>,
    interval: Interval,
    errors: u64,
    first_error: Option<String>,
}

/// Every contender loops acquire → work → release until the window closes.
async fn contend<C: Contender>(contenders: Vec<C>, timing: Timing, probe: &mut Probe) -> BoxResult<Run> {
    let start = Instant::now();
    let measure_from = start + timing.warmup;
    let end = measure_from + timing.measure;
    let mut set = JoinSet::new();
    for contender in contenders {
        set.spawn(async move {
            let mut log = Log::default();
            while Instant::now() < end {
                let t0 = Instant::now();
                let acquired = tokio::select! {
                    r = contender.acquire() => r,
                    () = tokio::time::sleep_until(end.into()) => break,
                };
                let (held, claim, resources) = match acquired {
                    Ok(a) => a,
                    Err(e) => {
                        log.failed(e);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                };
                let granted = Instant::now();
                contender.inside(&held).await;
                let releasing = Instant::now();
                log.holds.push(Hold {
                    start: granted,
                    end: releasing,
                    claim,
                    resources,
                });
                log.waits.push((granted, nanos(granted - t0), claim));
                match contender.release(held).await {
                    Ok(ReleaseOutcome::Released) => {}
                    Ok(other) => log.failed(format!("release answered {other:?}")),
                    Err(e) => log.failed(e),
                }
                contender.rest().await;
            }
            log
        });
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let before = probe.read().await?;
    tokio::time::sleep_until(end.into()).await;
    let after = probe.read().await?;
    let inside = |t: Instant| t >= before.at && t <= after.at;
    let mut run = Run {
        interval: after.since(&before),
        ..Run::default()
    };
    while let Some(log) = set.join_next().await {
        let log = log?;
        for &(_, wait, claim) in log.waits.iter().filter(|w| inside(w.0)) {
            run.acquisitions += 1;
            run.waits.push(wait);
            match claim {
                Claim::Shared => run.shared += 1,
                Claim::Exclusive => {
                    run.exclusive += 1;
                    run.exclusive_waits.push(wait);
                }
            }
        }
        run.holds.extend(log.holds);
        run.errors += log.errors;
        if run.first_error.is_none() {
            run.first_error = log.first_error;
        }
    }
    Ok(run)
}

/// Terms must strictly increase in the order they were won.
fn terms_increase(mut terms: Won) -> Result<usize, String> {
    terms.sort_by_key(|t| t.0);
    let mut last = None;
    for (_, term) in &terms {
        let Some(term) = *term else {
            return Err("a leadership without a term".to_owned());
        };
        if last.is_some_and(|l| term <= l) {
            return Err(format!("term {term} won after term {}", last.unwrap_or(0)));
        }
        last = Some(term);
    }
    Ok(terms.len())
}

/// One row: `load` on `backend`, one manager (and backend instance, with
/// its own connections) per contender, as separate processes would have.
async fn kind_row(lab: &mut Lab, backend: Backend, load: Load, s: &Settings) -> BoxResult<KindRow> {
    let n = load.contenders();
    let mut backends: Vec<Arc<dyn AllKinds>> = Vec::with_capacity(n);
    for _ in 0..n {
        backends.push(lab.kinds_backend(backend).await?);
    }
    let mut probe = lab.probe(backend).await?;
    let options = LockOptions::default();
    let mut broken = Vec::new();
    let (run, detail) = match load {
        Load::Semaphore => {
            let mut contenders = Vec::with_capacity(n);
            for b in backends {
                let semaphores = SemaphoreManager::with_options(b, options.clone())?;
                contenders.push(PermitTaker(semaphores.semaphore("kinds:sem", SEMAPHORE_SIZE)?));
            }
            (contend(contenders, s.hot, &mut probe).await?, String::new())
        }
        Load::ReadWrite => {
            let mut contenders = Vec::with_capacity(n);
            for (i, b) in backends.into_iter().enumerate() {
                contenders.push(RwUser {
                    locks: RwLockManager::with_options(b, options.clone())?,
                    writer: i < RW_WRITERS,
                });
            }
            let run = contend(contenders, s.hot, &mut probe).await?;
            let writer_waits = Latencies::from_nanos(run.exclusive_waits.clone());
            let detail = format!(
                "{} reads, {} writes; writer wait p50 {:.2} ms, p99 {:.2} ms",
                run.shared,
                run.exclusive,
                writer_waits.p50().as_secs_f64() * 1e3,
                writer_waits.p99().as_secs_f64() * 1e3
            );
            (run, detail)
        }
        Load::MultiKey => {
            let keys: Arc<Vec<String>> = Arc::new((0..ACCOUNTS).map(|i| format!("{{acct}}:{i}")).collect());
            let balances: Arc<Vec<AtomicI64>> =
                Arc::new((0..ACCOUNTS).map(|_| AtomicI64::new(START_BALANCE)).collect());
            let mut contenders = Vec::with_capacity(n);
            for (i, b) in backends.into_iter().enumerate() {
                contenders.push(Transferrer {
                    locks: MultiLockManager::with_options(b, options.clone())?,
                    keys: keys.clone(),
                    balances: balances.clone(),
                    rng: AtomicU64::new(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9)),
                });
            }
            let run = contend(contenders, s.hot, &mut probe).await?;
            let total: i64 = balances.iter().map(|b| b.load(Ordering::SeqCst)).sum();
            let expected = START_BALANCE * ACCOUNTS as i64;
            if total != expected {
                broken.push(format!("total balance {total} ≠ {expected}"));
            }
            let detail = format!("total balance {total} of {expected} after every transfer");
            (run, detail)
        }
        Load::Election => {
            let terms = Arc::new(Mutex::new(Vec::new()));
            let mut contenders = Vec::with_capacity(n);
            for (i, b) in backends.into_iter().enumerate() {
                contenders.push(Campaigner {
                    election: ElectionManager::with_options(b, options.clone())?,
                    identity: format!("node-{i}").into_bytes(),
                    terms: terms.clone(),
                });
            }
            let run = contend(contenders, s.hot, &mut probe).await?;
            let won = std::mem::take(&mut *terms.lock().unwrap_or_else(|e| e.into_inner()));
            let detail = match terms_increase(won) {
                Ok(n) => format!("{n} terms, strictly increasing"),
                Err(e) => {
                    broken.push(e.clone());
                    e
                }
            };
            (run, detail)
        }
    };
    Ok(KindRow {
        label: backend.label().to_owned(),
        kind: load.name(),
        setup: load.setup(),
        acquisitions: run.acquisitions,
        waits: Latencies::from_nanos(run.waits),
        interval: run.interval,
        bound: load.bound(),
        peak: check(&run.holds, load.shared_max()),
        broken,
        detail,
        errors: run.errors,
        first_error: run.first_error,
    })
}

fn say_kind(row: &KindRow) {
    eprintln!(
        "  {:<11} {:<18} {:>8.0} acq/s  wait p50 {:>7.2} ms p99 {:>7.2} ms  cpu {:>6.1} µs/acq  cmds {:>5.2}/acq  peak {}  {}",
        row.kind,
        row.label,
        row.rate(),
        row.waits.p50().as_secs_f64() * 1e3,
        row.waits.p99().as_secs_f64() * 1e3,
        row.client_cpu_per_op().as_secs_f64() * 1e6,
        row.commands_per_op(),
        row.peak.holders,
        if row.correct() { "bound held" } else { "BOUND BROKEN" },
    );
}

fn check_kind(problems: &mut Vec<String>, row: &KindRow) {
    let what = format!("{} {}", row.kind, row.label);
    if row.peak.violations > 0 {
        problems.push(format!(
            "{what}: {} of {} grants broke the bound ({}): peak {} holders",
            row.peak.violations, row.peak.holds, row.bound, row.peak.holders
        ));
    }
    for b in &row.broken {
        problems.push(format!("{what}: {b}"));
    }
    if row.errors > 0 {
        problems.push(format!(
            "{what}: {} failed calls (first: {})",
            row.errors,
            row.first_error.as_deref().unwrap_or("?")
        ));
    }
}

/// Scenario 8: every kind on every backend whose capability flags claim it.
pub async fn kinds(lab: &mut Lab, s: &Settings, problems: &mut Vec<String>) -> BoxResult<Kinds> {
    let mut out = Kinds::default();
    for backend in [
        Backend::Memory,
        Backend::RedisLua,
        Backend::Tair,
        Backend::Redlock,
        Backend::Postgres,
    ] {
        if !s.runs(backend.label()) {
            continue;
        }
        let caps = match lab.kinds_backend(backend).await {
            Ok(b) => b.capabilities(),
            Err(e) => {
                keep::<()>(problems, backend.label(), Err(e));
                continue;
            }
        };
        let refused: Vec<&'static str> = Load::ALL
            .iter()
            .filter(|l| !l.supported(&caps))
            .map(|l| l.name())
            .collect();
        if !refused.is_empty() {
            eprintln!(
                "  {}: refuses {} (capability flags)",
                backend.label(),
                refused.join(", ")
            );
            out.unsupported.push((backend.label().to_owned(), refused));
        }
        for load in Load::ALL.into_iter().filter(|l| l.supported(&caps)) {
            lab.flush().await?;
            let row = kind_row(lab, backend, load, s).await;
            let label = format!("{} {}", load.name(), backend.label());
            if let Some(row) = keep(problems, &label, row) {
                say_kind(&row);
                check_kind(problems, &row);
                out.rows.push(row);
            }
        }
    }
    // One block per kind, backends side by side.
    out.rows
        .sort_by_key(|row| Load::ALL.iter().position(|l| l.name() == row.kind));
    lab.flush().await?;
    Ok(out)
}
