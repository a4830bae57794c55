//! The fair (FIFO) queue: acquire as the queue's head, leave the queue.
//! The scripts (`lock_redis_family::wake::ACQUIRE_FAIR`, `LEAVE_QUEUE`) keep a
//! ticket and a deadline per waiter beside the lock key; the release script
//! wakes the queue's head.

use std::time::Duration;

use deadpool_redis::redis::Value;
use lock_core::AcquireOutcome;
use lock_core::raw::FairWaiter;
use lock_core::raw::ttl_millis;
use lock_core::{Error, LockToken, Result};
use lock_redis_family::board::{self, Subscriber};
use lock_redis_family::wake::FairReply;

use crate::error::{Access, BACKEND, unexpected_reply};
use crate::keys::{self, Helper, WakeKeys};
use crate::notify::WaiterId;
use crate::replies::{array, int_at};
use crate::{Call, Inner};

impl Inner {
    /// `waiter`'s id in the queue: this backend's process id (zeros without
    /// notifications: nobody listens) followed by the waiter's own.
    pub(crate) fn waiter_id(&self, waiter: &FairWaiter) -> WaiterId {
        board::queue_waiter_id(self.notifier.as_ref().map(|n| n.process()), waiter)
    }

    /// One fair attempt (see `LockBackend::try_acquire_fair`).
    pub(crate) async fn acquire_fair(
        &self,
        key: &str,
        token: &LockToken,
        ttl: Duration,
        waiter: &FairWaiter,
    ) -> Result<AcquireOutcome> {
        if self.replica_ack.is_some() {
            return Err(Error::unsupported(BACKEND, "fair locking with replica acknowledgement"));
        }
        let helpers = WakeKeys::new(key);
        let [marker, _, queue, deadlines] = helpers.names();
        let fence = self.fencing.then(|| keys::helper(key, Helper::Fence));
        if self.cluster && !keys::same_slot(key, queue) {
            return Err(Error::invalid(format!(
                "key {key:?} contains '}}' but no hash tag, so its fair queue cannot share its cluster slot; \
                 give it a hash tag, e.g. {{tag}}:rest"
            )));
        }
        let hex = token.hex_bytes();
        let id = self.waiter_id(waiter);
        let (mut ttl_ms, mut claim_ms) = (itoa::Buffer::new(), itoa::Buffer::new());
        let args: [&[u8]; 4] = [
            &hex,
            ttl_ms.format(ttl_millis(ttl)).as_bytes(),
            &id,
            claim_ms.format(ttl_millis(waiter.claim)).as_bytes(),
        ];
        let mut keys: Vec<&str> = vec![key, &marker, &queue, &deadlines];
        if let Some(f) = &fence {
            keys.push(f);
        }
        let call = Call::Script {
            script: &self.scripts.acquire_fair,
            keys: &keys,
            args: &args,
        };
        let value = self
            .exec_tracked("acquire", key, Access::Write, call, Some((token, ttl)))
            .await?;
        let reply =
            array(&value).and_then(|items| FairReply::read(int_at(items, 0), int_at(items, 1), fence.is_some()));
        match reply.ok_or_else(|| unexpected_reply("acquire", key, &value))? {
            FairReply::Granted(fencing_token) => self.granted(key, token, fencing_token, None).await,
            FairReply::Held(retry_after) => Ok(AcquireOutcome::Held { retry_after }),
        }
    }

    /// Takes `waiter` out of `key`'s queue, waking the next head if the
    /// key is free.
    pub(crate) async fn leave_queue(&self, key: &str, waiter: &FairWaiter) -> Result<()> {
        let helpers = WakeKeys::new(key);
        let [marker, _, queue, deadlines] = helpers.names();
        if self.cluster && !keys::same_slot(key, queue) {
            return Ok(()); // it never queued
        }
        let id = self.waiter_id(waiter);
        let call = Call::Script {
            script: &self.scripts.leave_queue,
            keys: &[key, marker, queue, deadlines],
            args: &[&id],
        };
        match self.exec("leave queue", key, Access::Write, call).await? {
            Value::Int(1) => Ok(()),
            other => Err(unexpected_reply("leave queue", key, &other)),
        }
    }
}
