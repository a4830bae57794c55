//! Starting during an outage: nodes that connect in the background
//! ([`LazyNode`]) and a [`Redlock`] that starts once a quorum of them has
//! connected ([`Redlock::connect`]).
//!
//! Redlock exists to tolerate a minority of failed nodes; a service that
//! restarts while one node is down must still get its locks. A node that is
//! not connected yet answers every call with [`Error::Backend`] (a failed
//! vote, nothing written), keeps connecting in the background, and is used
//! from the first call after it connects.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::raw::{FairWaiter, InstantLockBackend};
use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_core::{Capabilities, Error, LockBackend, LockToken, Result};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::{NAME, Redlock, RedlockOptions};

/// First pause between connection attempts of a [`LazyNode`]; it doubles
/// after each failure up to [`LAZY_RETRY_MAX`].
pub const LAZY_RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest pause between connection attempts of a [`LazyNode`].
pub const LAZY_RETRY_MAX: Duration = Duration::from_secs(5);

/// A Redlock node that connects in the background: connection attempts
/// start at once and repeat (pausing [`LAZY_RETRY_MIN`], doubling up to
/// [`LAZY_RETRY_MAX`]) until one succeeds. Until then every call fails with
/// [`Error::Backend`] (outcome known: nothing was sent), which a
/// [`Redlock`] counts as a failed vote; after that every call goes to the
/// connected backend.
///
/// Only [`Error::Backend`] failures are retried; any other error (an
/// invalid option, a missing feature) stops the attempts and is what
/// [`Redlock::connect`] returns. Dropping the last clone stops the attempts.
///
/// ```
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::LockManager;
/// use lock_memory::MemoryBackend;
/// use lock_redlock::{LazyNode, Redlock, RedlockOptions};
///
/// let nodes = (0..3)
///     .map(|i| LazyNode::spawn(format!("node{i}"), || async { Ok(MemoryBackend::new()) }))
///     .collect::<lock_core::Result<Vec<_>>>()?;
/// let locks = LockManager::new(Redlock::connect(nodes, RedlockOptions::default()).await?)?;
/// locks.lock("job").await?.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LazyNode {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    node: OnceLock<Arc<dyn LockBackend>>,
    status: watch::Sender<Status>,
    task: OnceLock<AbortHandle>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

/// Where a [`LazyNode`]'s connection stands.
#[derive(Clone)]
enum Status {
    Connecting {
        failures: u32,
        last_error: String,
    },
    Connected,
    /// A failure that retrying cannot fix.
    GaveUp(Arc<Error>),
}

impl std::fmt::Debug for LazyNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyNode")
            .field("name", &self.shared.name)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

impl LazyNode {
    /// Start connecting a node called `name` (in errors and logs) with
    /// `connect`, called again after each [`Error::Backend`] failure.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside a Tokio runtime (the attempts run
    /// on it).
    pub fn spawn<F, Fut, B>(name: impl Into<String>, mut connect: F) -> Result<LazyNode>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<B>> + Send + 'static,
        B: LockBackend,
    {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("LazyNode::spawn needs a Tokio runtime: call it inside one"))?;
        let shared = Arc::new(Shared {
            name: name.into(),
            node: OnceLock::new(),
            status: watch::Sender::new(Status::Connecting {
                failures: 0,
                last_error: "connecting".to_owned(),
            }),
            task: OnceLock::new(),
        });
        // The task holds the node weakly: dropping the last LazyNode ends it
        // (and aborts an attempt in progress, through `Shared::drop`).
        let weak = Arc::downgrade(&shared);
        let task = runtime.spawn(async move {
            let mut pause = LAZY_RETRY_MIN;
            loop {
                let result = connect().await;
                let Some(shared) = weak.upgrade() else { return };
                match result {
                    Ok(backend) => {
                        let _ = shared.node.set(Arc::new(backend));
                        shared.status.send_replace(Status::Connected);
                        tracing::info!(node = %shared.name, "redlock node connected");
                        return;
                    }
                    Err(e @ Error::Backend { .. }) => {
                        let failures = shared.failures() + 1;
                        if failures == 1 {
                            tracing::warn!(node = %shared.name, error = %e, "redlock node unreachable; retrying in the background");
                        } else {
                            tracing::debug!(node = %shared.name, error = %e, failures, "redlock node still unreachable");
                        }
                        shared.status.send_replace(Status::Connecting {
                            failures,
                            last_error: e.to_string(),
                        });
                    }
                    Err(e) => {
                        tracing::error!(node = %shared.name, error = %e, "redlock node cannot be used");
                        shared.status.send_replace(Status::GaveUp(Arc::new(e)));
                        return;
                    }
                }
                drop(shared);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LAZY_RETRY_MAX);
            }
        });
        let _ = shared.task.set(task.abort_handle());
        Ok(LazyNode { shared })
    }

    /// The name given to [`LazyNode::spawn`].
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// True once a connection attempt succeeded.
    pub fn is_connected(&self) -> bool {
        self.shared.node.get().is_some()
    }

    /// Waits until the node connected or its first attempt failed.
    async fn first_attempt(&self) {
        let mut status = self.shared.status.subscribe();
        let _ = status
            .wait_for(|s| !matches!(s, Status::Connecting { failures: 0, .. }))
            .await;
    }

    fn node(&self) -> Result<&Arc<dyn LockBackend>> {
        self.shared.node.get().ok_or_else(|| self.unavailable())
    }

    /// The failed vote of a node that is not connected (nothing was sent).
    fn unavailable(&self) -> Error {
        let why = match &*self.shared.status.borrow() {
            Status::Connecting { last_error, .. } => format!("not connected yet ({last_error})"),
            Status::GaveUp(e) => format!("cannot be used: {e}"),
            Status::Connected => "connected".to_owned(),
        };
        Error::backend(&self.shared.name, why)
    }
}

impl Shared {
    fn failures(&self) -> u32 {
        match &*self.status.borrow() {
            Status::Connecting { failures, .. } => *failures,
            _ => 0,
        }
    }
}

/// The error a node gave up with, as an owned [`Error`] of the same kind.
fn copy_error(node: &str, e: &Error) -> Error {
    match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{node}: {m}")),
        Error::Unsupported { backend, what } => Error::Unsupported {
            backend: backend.clone(),
            what: format!("{node}: {what}"),
        },
        other => Error::backend(NAME, format!("{node}: {other}")),
    }
}

impl Redlock {
    /// A Redlock over nodes that connect in the background: returns once
    /// every node has connected or failed its first attempt, when at least a
    /// quorum connected. The others keep connecting; until they do, they
    /// count as failed votes, and from then on they vote like the rest.
    ///
    /// A node connected late is not asked for release notifications (the
    /// capabilities are read here, as in [`Redlock::with_named_nodes`]):
    /// waiters still wake on the others' notifications or their timers.
    ///
    /// # Errors
    /// As [`Redlock::with_options`]; [`Error::Backend`] naming each failed
    /// node when fewer than a quorum connected at their first attempt; a
    /// node's own error when it failed with anything but [`Error::Backend`]
    /// (an invalid option, say).
    ///
    /// # Cancel safety
    /// Dropping the future drops the nodes (when the caller kept no clone),
    /// which stops their attempts; nothing is written.
    pub async fn connect(nodes: impl IntoIterator<Item = LazyNode>, options: RedlockOptions) -> Result<Redlock> {
        let nodes: Vec<LazyNode> = nodes.into_iter().collect();
        let quorum = options.validate(nodes.len())?;
        for node in &nodes {
            node.first_attempt().await;
        }
        let mut failed = Vec::new();
        for node in &nodes {
            match &*node.shared.status.borrow() {
                Status::Connected => {}
                Status::GaveUp(e) => return Err(copy_error(node.name(), e)),
                Status::Connecting { last_error, .. } => failed.push(format!("{}: {last_error}", node.name())),
            }
        }
        let connected = nodes.len() - failed.len();
        if connected < quorum {
            return Err(Error::backend(
                NAME,
                format!(
                    "only {connected} of {} nodes connected, below the quorum of {quorum}: {}",
                    nodes.len(),
                    failed.join("; ")
                ),
            ));
        }
        let named = nodes
            .into_iter()
            .map(|node| (node.name().to_owned(), Arc::new(node) as Arc<dyn LockBackend>));
        Redlock::with_named_nodes(named, options)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)] // a wrapper forwards every method
impl LockBackend for LazyNode {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome> {
        self.node()?.try_acquire(key, token, ttl).await
    }

    async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        self.node()?.release(key, token).await
    }

    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        self.node()?.renew(key, token, ttl).await
    }

    async fn renew_many(&self, items: &[(&str, &LockToken)], ttl: Duration) -> Vec<Result<RenewOutcome>> {
        match self.node() {
            Ok(node) => node.renew_many(items, ttl).await,
            Err(_) => items.iter().map(|_| Err(self.unavailable())).collect(),
        }
    }

    async fn wait_for_release(&self, key: &str, max_wait: Duration) {
        match self.node() {
            Ok(node) => node.wait_for_release(key, max_wait).await,
            Err(_) => tokio::time::sleep(max_wait).await,
        }
    }

    async fn wait_for_release_opts(&self, key: &str, options: &lock_core::raw::WaitOptions) {
        match self.node() {
            Ok(node) => node.wait_for_release_opts(key, options).await,
            Err(_) => tokio::time::sleep(options.max_wait).await,
        }
    }

    async fn try_acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        self.node()?.try_acquire_fair(key, token, ttl, waiter).await
    }

    async fn wait_fair(&self, key: &str, waiter: &FairWaiter, max_wait: Duration) {
        match self.node() {
            Ok(node) => node.wait_fair(key, waiter, max_wait).await,
            Err(_) => tokio::time::sleep(max_wait).await,
        }
    }

    async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        match self.node() {
            Ok(node) => node.leave_queue(key, waiter).await,
            // Never connected, so never queued there.
            Err(_) => Ok(()),
        }
    }

    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.node()?.inspect(key).await
    }

    /// The connected backend's; before that, conservative defaults under
    /// the node's name.
    fn capabilities(&self) -> Capabilities {
        match self.shared.node.get() {
            Some(node) => node.capabilities(),
            None => Capabilities::new(self.name()),
        }
    }

    /// Never forwarded: the quorum calls every node through its futures.
    fn instant(&self) -> Option<&dyn InstantLockBackend> {
        None
    }
}
