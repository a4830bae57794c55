//! The lock kinds on a backend that runs Lua scripts (redis-lua, Tair): the
//! backend implements [`ScriptedKinds`] ("run this script on these keys
//! with these arguments"), and the kinds' logic — checks, keys, arguments,
//! reading replies — is the `*_lua` modules' functions over it, and
//! [`crate::kind_backends!`] writes each backend's `RwLockBackend`,
//! `SemaphoreBackend`, `MultiLockBackend` and `ElectionBackend` as one call
//! per method.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use super::{election, inspect, multi, rw, semaphore};
use lock_core::LeaderInfo;
use lock_core::LockToken;
use lock_core::{Error, Result};
use lock_core::{ReleaseOutcome, RenewOutcome, ReplicaAck, Replication};

/// One of the kinds' shared scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KindScript {
    /// [`rw::ACQUIRE`].
    RwAcquire,
    /// [`rw::RELEASE`].
    RwRelease,
    /// [`rw::RENEW`].
    RwRenew,
    /// [`election::LEAD`].
    Lead,
    /// [`election::RESIGN`].
    Resign,
    /// [`election::RENEW`].
    RenewLead,
    /// [`semaphore::ACQUIRE`].
    SemaphoreAcquire,
    /// [`semaphore::RELEASE`].
    SemaphoreRelease,
    /// [`semaphore::RENEW`].
    SemaphoreRenew,
    /// [`multi::ACQUIRE_ALL`].
    MultiAcquire,
    /// [`multi::RELEASE_ALL`].
    MultiRelease,
    /// [`multi::RELEASE_ALL_NOTIFY`].
    MultiReleaseNotify,
    /// [`multi::RENEW_ALL`].
    MultiRenew,
    /// [`inspect::SEMAPHORE_INSPECT`] (a read).
    SemaphoreInspect,
    /// [`inspect::RW_INSPECT`] (a read).
    RwInspect,
}

impl KindScript {
    /// Every script, in the order of [`KindScript::index`]: a backend
    /// prepares them once (SHA1s) and picks one by index.
    pub const ALL: [KindScript; 15] = [
        KindScript::RwAcquire,
        KindScript::RwRelease,
        KindScript::RwRenew,
        KindScript::Lead,
        KindScript::Resign,
        KindScript::RenewLead,
        KindScript::SemaphoreAcquire,
        KindScript::SemaphoreRelease,
        KindScript::SemaphoreRenew,
        KindScript::MultiAcquire,
        KindScript::MultiRelease,
        KindScript::MultiReleaseNotify,
        KindScript::MultiRenew,
        KindScript::SemaphoreInspect,
        KindScript::RwInspect,
    ];

    /// The script's position in [`KindScript::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The Lua source.
    pub fn source(self) -> &'static str {
        match self {
            KindScript::RwAcquire => rw::ACQUIRE,
            KindScript::RwRelease => rw::RELEASE,
            KindScript::RwRenew => rw::RENEW,
            KindScript::Lead => election::LEAD,
            KindScript::Resign => election::RESIGN,
            KindScript::RenewLead => election::RENEW,
            KindScript::SemaphoreAcquire => semaphore::ACQUIRE,
            KindScript::SemaphoreRelease => semaphore::RELEASE,
            KindScript::SemaphoreRenew => semaphore::RENEW,
            KindScript::MultiAcquire => multi::ACQUIRE_ALL,
            KindScript::MultiRelease => multi::RELEASE_ALL,
            KindScript::MultiReleaseNotify => multi::RELEASE_ALL_NOTIFY,
            KindScript::MultiRenew => multi::RENEW_ALL,
            KindScript::SemaphoreInspect => inspect::SEMAPHORE_INSPECT,
            KindScript::RwInspect => inspect::RW_INSPECT,
        }
    }

    /// Whether the script grants (a semaphore's permits, a read-write
    /// lock, a leadership, a multi-key lock): under replica acknowledgement
    /// it is followed by `WAIT` when its reply's first element is `1`.
    pub fn is_grant(self) -> bool {
        matches!(
            self,
            KindScript::SemaphoreAcquire | KindScript::RwAcquire | KindScript::Lead | KindScript::MultiAcquire
        )
    }

    /// Whether the script gives a grant back (a release, a resignation):
    /// after a grant of the same token whose reply did not come, it must
    /// follow that grant on its connection.
    pub fn is_release(self) -> bool {
        matches!(
            self,
            KindScript::SemaphoreRelease
                | KindScript::RwRelease
                | KindScript::Resign
                | KindScript::MultiRelease
                | KindScript::MultiReleaseNotify
        )
    }

    /// Whether the script renews: under replica acknowledgement it is
    /// followed by `WAIT` when it answers `1`.
    pub fn is_renewal(self) -> bool {
        matches!(
            self,
            KindScript::SemaphoreRenew | KindScript::RwRenew | KindScript::RenewLead | KindScript::MultiRenew
        )
    }
}

/// One script call of a kind operation.
#[derive(Debug, Clone, Copy)]
pub struct KindCall<'a> {
    /// The operation, for errors ("read-write acquire", "campaign", ...).
    pub op: &'static str,
    /// The kind's name (the user's), for errors.
    pub name: &'a str,
    /// The script.
    pub script: KindScript,
    /// Its keys, all in one slot; the first routes the call.
    pub keys: &'a [&'a str],
    /// Its arguments.
    pub args: &'a [&'a [u8]],
    /// The token of the grant, release or renewal: a grant whose reply
    /// did not come is remembered with its connection, so that its clean-up
    /// release goes out after it there (the mutex's rule).
    pub token: &'a LockToken,
    /// A grant's or renewal's TTL (how long a grant whose reply did not come
    /// may still matter); `None` for a release.
    pub ttl: Option<Duration>,
}

/// What a Lua-scripting backend provides for the kinds of this module's
/// functions: running a script, reading its reply, and its settings.
///
/// # Cancel safety
///
/// As [`lock_core::LockBackend`]: dropping [`ScriptedKinds::run_kind_script`]'s
/// future leaves the script's outcome unknown.
#[async_trait]
pub trait ScriptedKinds: Send + Sync {
    /// A script's reply as the client returns it.
    type Reply: Debug + Send;

    /// The backend's name, in errors.
    fn kinds_backend(&self) -> &'static str;

    /// The prefix of every kind key (the backend's reserved prefix).
    fn kinds_key_prefix(&self) -> &'static str;

    /// The replica acknowledgement in force, if any.
    fn kinds_replica_ack(&self) -> Option<&ReplicaAck>;

    /// Whether a kind's grant or renewal is followed by `WAIT` under
    /// replica acknowledgement; when not, semaphores, read-write locks and
    /// elections are refused under it. The default: it is (as
    /// [`ScriptedKinds::run_kind_script`] says).
    fn semaphore_waits_for_replicas(&self) -> bool {
        true
    }

    /// The channel on which a win or a resignation of the leader key
    /// `lead` is announced (`PUBLISH` from the script), if any.
    fn leader_channel(&self, lead: &str) -> Option<String> {
        let _ = lead;
        None
    }

    /// Runs `call`. When [`ScriptedKinds::semaphore_waits_for_replicas`] and
    /// replica acknowledgement is on, a semaphore grant or renewal is
    /// followed by `WAIT`, whose count comes back with the reply.
    ///
    /// # Errors
    /// The backend's error for the call.
    async fn run_kind_script(&self, call: KindCall<'_>) -> Result<(Self::Reply, Option<Replication>)>;

    /// The reply as an integer.
    fn reply_int(reply: &Self::Reply) -> Option<i64>;

    /// The reply as an array of integers.
    fn reply_ints(reply: &Self::Reply) -> Option<Vec<i64>>;

    /// The error for a reply of an unexpected shape.
    fn unexpected_reply(&self, op: &str, name: &str, reply: &Self::Reply) -> Error;

    /// A renewal's outcome once replicas were counted (`replication`): an
    /// error when a renewal too few replicas acknowledged must not count.
    /// The default is the mutex's rule, [`crate::shortfall::counted_renewal`].
    ///
    /// # Errors
    /// The backend's shortfall error.
    fn counted_renewal(
        &self,
        name: &str,
        outcome: RenewOutcome,
        replication: Option<Replication>,
    ) -> Result<RenewOutcome> {
        crate::shortfall::counted_renewal(
            self.kinds_backend(),
            name,
            outcome,
            replication,
            self.kinds_replica_ack(),
        )
    }

    /// Refuses a kind's name or a multi-key lock's key under the backend's
    /// reserved names (after [`lock_core::raw::validate_key`] accepted it),
    /// as the backend's mutex refuses such a key; the default refuses none.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a reserved key.
    fn check_user_key(&self, key: &str) -> Result<()> {
        let _ = key;
        Ok(())
    }

    /// Whether `a` and `b` can be in one script: always on a single server,
    /// on a cluster when they hash to one slot.
    fn same_slot(&self, a: &str, b: &str) -> bool;

    /// The mutex's fence counter of `key`, which a multi-key grant writes
    /// (whatever the mutex's fencing setting).
    fn fence_key(&self, key: &str) -> String;

    /// The waiter keys of `set`'s keys (marker, wake set, fair queue, queue
    /// deadlines: four per key, in `set`'s order) when a multi-key release
    /// wakes the waiters of each key it frees
    /// ([`multi::RELEASE_ALL_NOTIFY`]); `None`, the default: it does not
    /// ([`multi::RELEASE_ALL`]).
    fn multi_release_waiters(&self, set: &[&str]) -> Option<Vec<String>> {
        let _ = set;
        None
    }

    /// The error of a multi-key grant of `set` that only `acknowledged` of
    /// `requested` replicas acknowledged under `ack`, once the keys were
    /// given back (`released`, the release's result).
    fn multi_shortfall(
        &self,
        set: &[&str],
        acknowledged: u32,
        requested: u32,
        ack: &ReplicaAck,
        released: Result<ReleaseOutcome>,
    ) -> Error {
        let took = format!("took the keys {set:?}");
        shortfall_error(
            self.kinds_backend(),
            &took,
            "them",
            acknowledged,
            requested,
            ack,
            released,
        )
    }

    /// The leader of the election `name`
    /// ([`lock_core::raw::ElectionBackend::leader`]), read by the
    /// backend's own command.
    ///
    /// # Errors
    /// As the trait method.
    async fn read_leader(&self, name: &str) -> Result<Option<LeaderInfo>>;

    /// [`lock_core::raw::ElectionBackend::wait_for_leader_change`];
    /// the default sleeps, as the trait's.
    async fn wait_for_leader(&self, name: &str, seen: Option<&LeaderInfo>, max_wait: std::time::Duration) {
        let _ = (name, seen);
        tokio::time::sleep(max_wait).await;
    }
}

/// `kind` (e.g. "read-write locks") is refused under replica
/// acknowledgement: its grants are not followed by `WAIT`.
pub(crate) fn refuse_under_ack<K: ScriptedKinds + ?Sized>(kinds: &K, what: &str) -> Result<()> {
    match kinds.kinds_replica_ack() {
        Some(_) => Err(Error::Unsupported {
            backend: kinds.kinds_backend().to_owned(),
            what: what.to_owned(),
        }),
        None => Ok(()),
    }
}

/// A grant under replica acknowledgement, as for the mutex: a grant too few
/// replicas acknowledged is given back (`give_back`) and fails under
/// [`lock_core::OnShortfall::ReleaseAndFail`]; otherwise the lease records its
/// replication (`Unconfirmed` counts as such). `what` names the grant in
/// the error ("took permits of", "took the read-write lock").
pub(crate) async fn acked_grant<K, F, Fut>(
    kinds: &K,
    name: &str,
    what: &str,
    outcome: lock_core::AcquireOutcome,
    replication: Option<Replication>,
    give_back: F,
) -> Result<lock_core::AcquireOutcome>
where
    K: ScriptedKinds + ?Sized,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<ReleaseOutcome>>,
{
    acked_grant_with(
        kinds,
        outcome,
        replication,
        give_back,
        |acknowledged, requested, ack, released| {
            shortfall_error(
                kinds.kinds_backend(),
                &format!("{what} {name:?}"),
                "it",
                acknowledged,
                requested,
                ack,
                released,
            )
        },
    )
    .await
}

/// The error of a grant (`took`: "took the keys [...]") that only
/// `acknowledged` of `requested` replicas acknowledged within `ack`'s
/// timeout, once `it` ("it", "them") was given back (`released`, the
/// release's result): outcome unknown when the release failed.
fn shortfall_error(
    backend: &str,
    took: &str,
    it: &str,
    acknowledged: u32,
    requested: u32,
    ack: &ReplicaAck,
    released: Result<ReleaseOutcome>,
) -> Error {
    let message = format!(
        "{took} but only {acknowledged} of {requested} replicas acknowledged within {:?}; {}",
        ack.timeout,
        match &released {
            Ok(_) => format!("gave {it} back"),
            Err(e) => format!("giving {it} back failed ({e})"),
        }
    );
    match released {
        Ok(_) => Error::backend(backend, message),
        Err(_) => Error::outcome_unknown(backend, message),
    }
}

/// [`acked_grant`] with the shortfall's error from `shortfall`
/// (acknowledged, requested, the acknowledgement in force, the give-back's
/// result).
pub(crate) async fn acked_grant_with<K, F, Fut, S>(
    kinds: &K,
    outcome: lock_core::AcquireOutcome,
    replication: Option<Replication>,
    give_back: F,
    shortfall: S,
) -> Result<lock_core::AcquireOutcome>
where
    K: ScriptedKinds + ?Sized,
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<ReleaseOutcome>>,
    S: FnOnce(u32, u32, &ReplicaAck, Result<ReleaseOutcome>) -> Error,
{
    use lock_core::{AcquireOutcome, OnShortfall};
    match (outcome, replication, kinds.kinds_replica_ack()) {
        (
            AcquireOutcome::Acquired(_),
            Some(Replication::Unconfirmed {
                acknowledged,
                requested,
            }),
            Some(ack),
        ) if ack.on_shortfall == OnShortfall::ReleaseAndFail => {
            Err(shortfall(acknowledged, requested, ack, give_back().await))
        }
        (AcquireOutcome::Acquired(lease), replication, _) => Ok(AcquireOutcome::Acquired(
            lease.with_replication(replication.unwrap_or_default()),
        )),
        (held, _, _) => Ok(held),
    }
}

/// Runs `call` without replica counting (the kinds refused under
/// acknowledgement).
pub(crate) async fn run<K: ScriptedKinds + ?Sized>(kinds: &K, call: KindCall<'_>) -> Result<K::Reply> {
    kinds.run_kind_script(call).await.map(|(reply, _)| reply)
}

/// An owner-checked release's status: `1` released, `2` held by another
/// (a status a script answers only when `max` is 2), `0` nothing.
pub(crate) fn released<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    op: &str,
    name: &str,
    reply: &K::Reply,
    max: i64,
) -> Result<ReleaseOutcome> {
    Ok(match status(kinds, op, name, reply, max)? {
        1 => ReleaseOutcome::Released,
        2 => ReleaseOutcome::HeldByOther,
        _ => ReleaseOutcome::Missing,
    })
}

/// An owner-checked renewal's status, as [`released`]'s.
pub(crate) fn renewed<K: ScriptedKinds + ?Sized>(
    kinds: &K,
    op: &str,
    name: &str,
    reply: &K::Reply,
    max: i64,
) -> Result<RenewOutcome> {
    Ok(match status(kinds, op, name, reply, max)? {
        1 => RenewOutcome::Renewed,
        2 => RenewOutcome::HeldByOther,
        _ => RenewOutcome::Missing,
    })
}

/// A status reply in `0..=max`.
fn status<K: ScriptedKinds + ?Sized>(kinds: &K, op: &str, name: &str, reply: &K::Reply, max: i64) -> Result<i64> {
    match K::reply_int(reply) {
        Some(n) if (0..=max).contains(&n) => Ok(n),
        _ => Err(kinds.unexpected_reply(op, name, reply)),
    }
}
