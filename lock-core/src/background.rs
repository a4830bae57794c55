//! The releases handed to the runtime in the background (a dropped guard's,
//! a cancelled acquire's clean-up, a fair waiter leaving its queue), counted
//! so that a program about to exit can wait for them: a runtime shut down
//! drops its tasks, and a clean-up release dropped that way leaves its key
//! held for the TTL.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Background releases spawned and not finished yet (process-wide).
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Woken whenever `PENDING` drops to zero.
static SETTLED: Notify = Notify::const_new();

/// Counts one background release from its spawn to its end (finished, or
/// dropped with its runtime).
struct Pending;

impl Pending {
    fn new() -> Self {
        PENDING.fetch_add(1, Ordering::SeqCst);
        Pending
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if PENDING.fetch_sub(1, Ordering::SeqCst) == 1 {
            SETTLED.notify_waiters();
        }
    }
}

/// Spawn `release` on `runtime`, counted until it ends.
pub(crate) fn spawn(runtime: &tokio::runtime::Handle, release: impl Future<Output = ()> + Send + 'static) {
    let pending = Pending::new();
    runtime.spawn(async move {
        release.await;
        drop(pending);
    });
}

/// Resolves once every release this process handed to a tokio runtime in
/// the background (a dropped guard's, the clean-up of a cancelled, failed or
/// timed-out acquire, a fair waiter leaving its queue) has finished or timed
/// out: each is bounded by its `op_timeout`.
///
/// Call it before a program exits right after dropping a guard or an
/// acquire future (a command interrupted while it waits, say): shutting a
/// runtime down drops its tasks, and a clean-up release dropped that way
/// leaves its key held until the TTL.
///
/// # Cancel safety
///
/// Cancel-safe: it only observes.
pub async fn wait_for_background_releases() {
    loop {
        let settled = SETTLED.notified();
        tokio::pin!(settled);
        settled.as_mut().enable();
        if PENDING.load(Ordering::SeqCst) == 0 {
            return;
        }
        settled.await;
    }
}
