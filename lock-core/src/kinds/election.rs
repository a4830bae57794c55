//! Leader election: one leader per name, its caller-supplied identity stored
//! with its lease, a term that increases with every new leader.
//!
//! `campaign` waits until it wins and returns a [`Leadership`]: the mutex's
//! lifecycle (renewal, `lost()` at the local deadline, resignation on drop),
//! with the term as its fencing token. `leader` reads the current leader;
//! `observe` is a stream of leader changes: it reads the leader, then waits
//! for [`ElectionBackend::wait_for_leader_change`] (pub/sub where the backend
//! has it, else the poll interval) and reads again, so a missed change
//! between two reads is collapsed, never invented.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;

use super::guard::{KindGuard, adapter_capabilities, kind_locks};
use crate::backend::{AcquireOutcome, Capabilities, LockBackend, ReleaseOutcome, RenewOutcome};
use crate::engine::{Attempt, Identity};
use crate::error::{Error, Result};
use crate::guard::LeaseHandle;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::token::LockToken;
use crate::validate::validate_key;

/// The current leader of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The identity it campaigned with.
    pub identity: Vec<u8>,
    /// Its term: strictly increasing per name with every new leader.
    pub term: u64,
}

impl LeaderInfo {
    /// A leader with `identity` in `term`.
    pub fn new(identity: Vec<u8>, term: u64) -> Self {
        LeaderInfo { identity, term }
    }
}

/// Primitive, owner-checked election operations: one round trip each.
///
/// # Cancel safety
///
/// As [`LockBackend`]: dropping a call's future leaves its outcome unknown
/// (a write applied whole or not at all) and must leave the backend usable.
#[async_trait]
pub trait ElectionBackend: LockBackend {
    /// Become leader of `name` with `identity` for `ttl` if there is none
    /// (a holder of `token` is refreshed). `Acquired` carries the term as
    /// its fencing token.
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome>;

    /// Step down if `token` leads.
    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome>;

    /// Extend `token`'s leadership.
    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome>;

    /// The current leader, if any.
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>>;

    /// Wait until the leader of `name` may differ from `seen`, or `max_wait`
    /// passes. A hint only (the caller reads the leader again either way);
    /// the default sleeps, so `observe` polls.
    async fn wait_for_leader_change(&self, name: &str, seen: Option<&LeaderInfo>, max_wait: Duration) {
        let _ = (name, seen);
        tokio::time::sleep(max_wait).await;
    }
}

/// Check an identity: 1 to [`ElectionManager::MAX_IDENTITY`] bytes.
///
/// # Errors
/// [`Error::InvalidArgument`] otherwise.
pub fn validate_identity(identity: &[u8]) -> Result<()> {
    if identity.is_empty() || identity.len() > ElectionManager::MAX_IDENTITY {
        return Err(Error::invalid(format!(
            "an identity must be 1 to {} bytes, got {}",
            ElectionManager::MAX_IDENTITY,
            identity.len()
        )));
    }
    Ok(())
}

/// One campaign's attempt, handed to the manager's acquire engine: the
/// identity travels with the attempt, not through the key.
struct LeadAttempt<'a> {
    backend: &'a dyn ElectionBackend,
    identity: &'a [u8],
}

#[async_trait]
impl Attempt for LeadAttempt<'_> {
    async fn attempt(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.backend.try_lead(key, token, self.identity, ttl).await
    }
}

struct LeadAsLock {
    backend: Arc<dyn ElectionBackend>,
}

#[async_trait]
impl LockBackend for LeadAsLock {
    async fn try_acquire(&self, _key: &str, _token: &LockToken, _ttl: Duration) -> Result<AcquireOutcome> {
        // The manager hands every campaign its `LeadAttempt`.
        Err(Error::invalid("a campaign must go through ElectionManager"))
    }
    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.backend.resign(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.backend.renew_lead(key, token, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        adapter_capabilities(self.backend.capabilities(), true)
    }
}

/// Campaigns, reads and observes leaders over one backend. Cheap to clone.
///
/// ```
/// # async fn demo(backend: impl lock_core::raw::ElectionBackend) -> lock_core::Result<()> {
/// use lock_core::ElectionManager;
/// let election = ElectionManager::new(backend)?;
/// let leadership = election.campaign("scheduler", b"node-a").await?; // waits to win
/// assert_eq!(election.leader("scheduler").await?.map(|l| l.identity), Some(b"node-a".to_vec()));
/// // ... lead until leadership.lost() fires, or step down:
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ElectionManager {
    locks: LockManager,
    backend: Arc<dyn ElectionBackend>,
}

impl std::fmt::Debug for ElectionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElectionManager")
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

impl ElectionManager {
    /// Longest identity accepted, in bytes.
    pub const MAX_IDENTITY: usize = 4096;

    /// A manager with the default [`LockOptions`].
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`Capabilities::leader_election`] is false;
    /// [`Error::InvalidArgument`] as [`LockManager::new`].
    pub fn new(backend: impl ElectionBackend) -> Result<Self> {
        Self::with_options(backend, LockOptions::default())
    }

    /// A manager with custom options.
    ///
    /// # Errors
    /// As [`ElectionManager::new`], and [`Error::InvalidArgument`] for bad options.
    pub fn with_options(backend: impl ElectionBackend, options: LockOptions) -> Result<Self> {
        Self::from_arc(Arc::new(backend), options)
    }

    /// A manager over a shared backend handle (the same `Arc` can back a
    /// [`LockManager`] and every other kind's manager).
    ///
    /// # Errors
    /// As [`ElectionManager::with_options`].
    pub fn from_arc(backend: Arc<dyn ElectionBackend>, options: LockOptions) -> Result<Self> {
        let caps = backend.capabilities();
        let adapter = LeadAsLock {
            backend: backend.clone(),
        };
        Ok(ElectionManager {
            locks: kind_locks(caps, |c| c.leader_election, "leader election", adapter, options)?,
            backend,
        })
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        self.locks.options()
    }

    /// Campaign for `name` with `identity`, waiting up to the acquire timeout.
    ///
    /// # Errors
    /// [`Error::Timeout`] while another leads; [`Error::InvalidArgument`] for
    /// a bad name or identity; the last backend error.
    ///
    /// # Cancel safety
    /// Dropping the future resigns anything it may have won (in the background).
    pub async fn campaign(&self, name: &str, identity: &[u8]) -> Result<Leadership> {
        self.campaign_opts(name, identity, self.locks.options()).await
    }

    /// [`ElectionManager::campaign`] with per-call options.
    ///
    /// # Errors
    /// As [`ElectionManager::campaign`].
    ///
    /// # Cancel safety
    /// As [`ElectionManager::campaign`].
    pub async fn campaign_opts(&self, name: &str, identity: &[u8], options: &LockOptions) -> Result<Leadership> {
        validate_key(name)?;
        validate_identity(identity)?;
        let attempt = LeadAttempt {
            backend: &*self.backend,
            identity,
        };
        let guard = self
            .locks
            .lock_kind(name, options, Some(&attempt), Identity::PerAttempt)
            .await?;
        lead(guard, &*self.backend)
    }

    /// One attempt: `Ok(None)` when another leads.
    ///
    /// # Errors
    /// As [`ElectionManager::campaign`], without the timeout.
    ///
    /// # Cancel safety
    /// As [`ElectionManager::campaign`].
    pub async fn try_campaign(&self, name: &str, identity: &[u8]) -> Result<Option<Leadership>> {
        self.try_campaign_opts(name, identity, self.locks.options()).await
    }

    /// [`ElectionManager::try_campaign`] with per-call options.
    ///
    /// # Errors
    /// As [`ElectionManager::try_campaign`].
    ///
    /// # Cancel safety
    /// As [`ElectionManager::campaign`].
    pub async fn try_campaign_opts(
        &self,
        name: &str,
        identity: &[u8],
        options: &LockOptions,
    ) -> Result<Option<Leadership>> {
        validate_key(name)?;
        validate_identity(identity)?;
        let attempt = LeadAttempt {
            backend: &*self.backend,
            identity,
        };
        let guard = self.locks.try_lock_kind(name, options, Some(&attempt)).await?;
        guard.map(|guard| lead(guard, &*self.backend)).transpose()
    }

    /// The current leader of `name`, if any.
    ///
    /// # Errors
    /// The backend's error.
    ///
    /// # Cancel safety
    /// Safe (a read).
    pub async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        validate_key(name)?;
        self.backend.leader(name).await
    }

    /// Run `body` while leading `name`; on loss the body is dropped and
    /// [`Error::Lost`] returned.
    ///
    /// # Errors
    /// As [`ElectionManager::campaign`], plus [`Error::Lost`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the leadership, which resigns in the background.
    pub async fn with_leadership<F, Fut, T>(&self, name: &str, identity: &[u8], body: F) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_leadership_opts(name, identity, self.locks.options(), body)
            .await
    }

    /// [`ElectionManager::with_leadership`] with per-call options.
    ///
    /// # Errors
    /// As [`ElectionManager::with_leadership`].
    ///
    /// # Cancel safety
    /// As [`ElectionManager::with_leadership`].
    pub async fn with_leadership_opts<F, Fut, T>(
        &self,
        name: &str,
        identity: &[u8],
        options: &LockOptions,
        body: F,
    ) -> Result<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.campaign_opts(name, identity, options).await?;
        leadership.run_while_held(name, body).await
    }

    /// Leader changes of `name`: the first item is the current leader (or
    /// `None`), then one item per observed change. Between two reads it
    /// waits for a change announced by the backend (the Lua backend with
    /// release notifications publishes every win and resignation) or
    /// `interval`, whichever comes first; an expiry is announced by no one,
    /// so it is seen at the next poll.
    ///
    /// A read that fails is an `Err` item (one per `interval` while the
    /// backend stays unreachable): the leader is *unknown* then, never
    /// "unchanged". The first read that succeeds after an error is always
    /// reported, changed or not. The stream never ends by itself.
    pub fn observe(
        &self,
        name: &str,
        interval: Duration,
    ) -> impl Stream<Item = Result<Option<LeaderInfo>>> + Send + 'static {
        let backend = self.backend.clone();
        let name = name.to_owned();
        let interval = interval.max(Duration::from_millis(1));
        // `last`: the leader last reported; `None` before the first item and
        // after an error (so the next read is reported whatever it says).
        let start: (Arc<dyn ElectionBackend>, String, Option<Option<LeaderInfo>>, bool) = (backend, name, None, false);
        futures::stream::unfold(start, move |(backend, name, last, failed)| async move {
            if failed {
                tokio::time::sleep(interval).await;
            }
            loop {
                match backend.leader(&name).await {
                    Ok(now) if last.as_ref() != Some(&now) => {
                        return Some((Ok(now.clone()), (backend, name, Some(now), false)));
                    }
                    Ok(now) => backend.wait_for_leader_change(&name, now.as_ref(), interval).await,
                    Err(e) => return Some((Err(e), (backend, name, None, true))),
                }
            }
        })
    }
}

/// What a [`Leadership`] holds: the lead, with its term (also the lease's
/// fencing token).
#[derive(Debug)]
pub struct Lead {
    term: u64,
}

/// A won campaign's guard as a [`Leadership`]: every election backend issues
/// a term with the grant; a grant without one is refused (and resigned in
/// the background by the guard's drop).
fn lead(guard: crate::guard::LockGuard, backend: &dyn ElectionBackend) -> Result<Leadership> {
    match guard.fencing_token() {
        Some(term) => Ok(KindGuard::new(guard, Lead { term: term.0 })),
        None => Err(Error::backend(
            backend.capabilities().name,
            "an election backend granted a leadership without a term",
        )),
    }
}

/// Held leadership (the shared [`KindGuard`]). Owned and `'static`;
/// dropping it resigns in the background.
pub type Leadership = KindGuard<Lead>;

impl KindGuard<Lead> {
    /// The term of this leadership: strictly increasing per name with every
    /// new leader, and the lease's fencing token. Hand it to the protected
    /// resource with every write; the resource refuses a write whose term is
    /// lower than the highest it has seen (a deposed leader's).
    pub fn term(&self) -> u64 {
        self.kind().term
    }

    /// Step down (owner-checked): [`KindGuard::release`].
    ///
    /// # Errors
    /// The backend's error; the lease then expires on its own.
    ///
    /// # Cancel safety
    /// Safe: if dropped mid-flight, the resignation is sent again in the background.
    pub async fn resign(self) -> Result<ReleaseOutcome> {
        self.release().await
    }
}

#[async_trait]
impl<B: ElectionBackend + ?Sized> ElectionBackend for Arc<B> {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        (**self).try_lead(name, token, identity, ttl).await
    }
    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        (**self).resign(name, token).await
    }
    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        (**self).renew_lead(name, token, ttl).await
    }
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        (**self).leader(name).await
    }
    async fn wait_for_leader_change(&self, name: &str, seen: Option<&LeaderInfo>, max_wait: Duration) {
        (**self).wait_for_leader_change(name, seen, max_wait).await;
    }
}
