//! The fair (FIFO) queue on a single server, the redis-lua backend's
//! scheme: a ticket and a server-time claim deadline per waiter beside the
//! lock key (`verrou:tair:queue:<key>`, `verrou:tair:queued:<key>`); a free
//! key goes only to the head of the live waiters; the release script (with
//! release notifications) wakes the head, a waiter that gives up leaves and
//! wakes the next head. Without notifications waiters poll every third of
//! their claim (the manager's rule).

use std::sync::OnceLock;
use std::time::Duration;

use fred::types::Value;
use lock_core::raw::FairWaiter;
use lock_core::raw::ttl_millis;
use lock_core::{AcquireOutcome, Lease};
use lock_core::{Error, LockToken, Result};
use lock_redis_family::board::{self, Subscriber};
use lock_redis_family::wake::{self as wake_lua, FairReply};

use crate::conn::{Access, NAME, map_error, unexpected_reply};
use crate::keys::fence_key;
use crate::notify::WaiterId;
use crate::script::Script;
use crate::unsettled::Pending;
use crate::wake::helper_keys;
use crate::{TairBackend, token_arg};

struct Scripts {
    acquire: Script,
    leave: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(wake_lua::ACQUIRE_FAIR),
        leave: Script::new(wake_lua::LEAVE_QUEUE),
    })
}

impl TairBackend {
    /// `waiter`'s id in the queue: this backend's process id (zeros without
    /// notifications: nobody listens) followed by the waiter's own.
    pub(crate) fn fair_waiter_id(&self, waiter: &FairWaiter) -> WaiterId {
        board::queue_waiter_id(self.inner.wake.as_ref().map(|w| w.notifier.process()), waiter)
    }

    /// Fair mode runs on one server without replica acknowledgement.
    pub(crate) fn fair_supported(&self) -> bool {
        !self.inner.clustered && self.inner.ack.is_none()
    }

    /// One fair attempt (see `LockBackend::try_acquire_fair`) by the
    /// waiter whose queue id is `id` ([`Self::fair_waiter_id`]) and whose
    /// claim on the head is `claim`: all the queue script needs of it.
    pub(crate) async fn acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        id: WaiterId,
        claim: Duration,
    ) -> Result<AcquireOutcome> {
        if !self.fair_supported() {
            return Err(Error::unsupported(
                NAME,
                "fair locking on a cluster or with replica acknowledgement",
            ));
        }
        let [marker, _, queue, deadlines] = helper_keys(key);
        let fence = self.inner.fence_prefix.as_deref().map(|p| fence_key(p, key));
        let mut keys: Vec<&str> = vec![key, &marker, &queue, &deadlines];
        if let Some(f) = &fence {
            keys.push(f);
        }
        let mut args: Vec<Value> = vec![
            token_arg(token),
            ttl_millis(ttl).to_string().into(),
            Value::from(&id[..]),
            ttl_millis(claim).to_string().into(),
        ];
        if self.inner.wake.is_some() {
            // A queued waiter marks the holder's value, so that its
            // release wakes the head.
            args.push(Value::from_static_str(wake_lua::WAITER_MARK));
        }
        let client = self.inner.commands.next();
        // Until the server answers, a clean-up release must follow this
        // write on its connection (see the `unsettled` module).
        let pending = Pending::new(&self.inner.unsettled, *token, client, self.unsettled_for(ttl));
        let reply = self
            .run_script_on(client, &scripts().acquire, &keys, args, false)
            .await
            .map_err(|e| map_error("EVAL (fair acquire)", key, Access::Script, e))?;
        pending.settle();
        let bad = || unexpected_reply("EVAL (fair acquire)", key, Access::Script, &reply);
        let Value::Array(items) = &reply else {
            return Err(bad());
        };
        let code = items.first().and_then(Value::as_i64);
        let second = items.get(1).and_then(Value::as_i64);
        match FairReply::read(code, second, fence.is_some()).ok_or_else(bad)? {
            FairReply::Granted(fencing_token) => {
                Ok(AcquireOutcome::Acquired(Lease::new().with_fencing_token(fencing_token)))
            }
            FairReply::Held(retry_after) => Ok(AcquireOutcome::Held { retry_after }),
        }
    }

    /// Takes `waiter` out of `key`'s queue, waking the next head if the
    /// key is free.
    pub(crate) async fn leave_fair_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        if !self.fair_supported() {
            return Ok(()); // it never queued
        }
        let [marker, _, queue, deadlines] = helper_keys(key);
        let id = self.fair_waiter_id(waiter);
        let reply = self
            .run_script(
                "EVAL (leave queue)",
                &scripts().leave,
                &[key, &marker, &queue, &deadlines],
                vec![Value::from(&id[..])],
            )
            .await?;
        match reply.as_i64() {
            Some(1) => Ok(()),
            _ => Err(unexpected_reply("EVAL (leave queue)", key, Access::Script, &reply)),
        }
    }

    /// Waits until `waiter` may head `key`'s free queue, or `max_wait`
    /// passes: woken by a release or a leaving head with notifications,
    /// else the timer.
    pub(crate) async fn wait_fair_turn(&self, waiter: &FairWaiter, max_wait: Duration) {
        match self.inner.wake.as_ref().filter(|w| w.usable()) {
            Some(wake) => {
                let none: Option<std::future::Ready<bool>> = None;
                wake.notifier.wait(self.fair_waiter_id(waiter), max_wait, none).await;
            }
            None => tokio::time::sleep(max_wait).await,
        }
    }
}
