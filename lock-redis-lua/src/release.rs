//! Release (owner-checked; announced to waiters, re-send-safe in a
//! cluster, ordered after an acquire without a reply) and the waiter's
//! marker that makes a release announce itself.

use std::time::Duration;

use deadpool_redis::redis::Value;
use lock_core::ReleaseOutcome;
use lock_core::raw::ttl_millis;
use lock_core::{LockToken, Result};

use crate::connection::Conn;
use crate::error::{Access, command_error, is_acl_refusal, op_timeout, unexpected_reply};
use crate::keys::{self, Helper, WakeKeys};
use crate::notify::WaiterId;
use crate::scripts::LuaScript;
use crate::{Call, Inner, check_key};

impl Inner {
    pub(crate) async fn release(&self, key: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        check_key(key)?;
        let hex = token.hex_bytes();
        let notify = self.notifier.as_ref().map(|_| WakeKeys::new(key));
        let since = notify.as_ref().map(|_| keys::helper(key, Helper::WakeSince));
        // The holder's own registration from its wait, if any: the release
        // takes it out of the wake set.
        let stale = notify.as_ref().and_then(|_| self.waits.take_stale(key));
        let stale: &[u8] = stale.as_ref().map_or(b"", |id| &id[..]);
        let tombstone = self.tombstone(key, Helper::Released);
        let id = tombstone.as_ref().map(|_| self.write_ids.next());
        let mut ms = itoa::Buffer::new();
        let ms = ms.format(ttl_millis(self.resend_window())).as_bytes();
        let notify_keys = notify.as_ref().zip(since.as_deref()).map(|(w, since)| {
            let [m, w, q, e] = w.names();
            [key, m, w, q, e, since]
        });
        let (script, keys, args): (&LuaScript, &[&str], &[&[u8]]) = match (&notify_keys, &tombstone, &id) {
            (Some(keys), _, _) => (
                &self.scripts.release_notify,
                keys,
                &[&hex, self.starving_ms.as_bytes(), self.reservation_ms.as_bytes(), stale],
            ),
            (None, Some(tombstone), Some(id)) => (
                &self.scripts.release_resendable,
                &[key, tombstone.as_str()],
                &[&hex, id.as_bytes(), ms],
            ),
            _ => (&self.scripts.release, &[key], &[&hex]),
        };
        let with_helpers = keys.len() > 1;
        let call = Call::Script { script, keys, args };
        let reply = match self.in_flight.take(token) {
            // Boxed: rare, and it would double the size of every release's future.
            Some(conn) => Box::pin(self.release_after_acquire(key, conn, call)).await,
            None => self.exec("release", key, Access::Write, call).await,
        };
        let reply = match reply {
            // An ACL user who may take `key` but not touch the helper keys
            // (or only write them: EVAL's declared keys need read too). The
            // server checks EVAL's declared keys before the script runs
            // (a NOPERM raised inside a script is an unknown outcome, not
            // this), so nothing was written, and the reply came after any
            // acquire sent before on the same connection: the plain release
            // frees the key, unannounced (such a user's waiters cannot leave
            // markers either and wait on their timers).
            Err(e) if with_helpers && is_acl_refusal(&e) => {
                tracing::debug!(error = %e, "release without helper keys: the ACL user may not touch them");
                let plain = Call::Script {
                    script: &self.scripts.release,
                    keys: &[key],
                    args: &[&hex],
                };
                self.exec("release", key, Access::Write, plain).await?
            }
            reply => reply?,
        };
        match reply {
            Value::Int(1) => Ok(ReleaseOutcome::Released),
            Value::Int(0) => Ok(ReleaseOutcome::Missing),
            Value::Int(2) => Ok(ReleaseOutcome::HeldByOther),
            other => Err(unexpected_reply("release", key, &other)),
        }
    }

    /// In a cluster, `key`'s tombstone of kind `helper`, which lets a
    /// re-sent release or delete recognise itself (see
    /// `scripts::RELEASE_RESENDABLE`); `None` on one server (nothing
    /// re-sends) or when it cannot share `key`'s slot.
    pub(crate) fn tombstone(&self, key: &str, helper: Helper) -> Option<String> {
        if !self.cluster {
            return None;
        }
        let tombstone = keys::helper(key, helper);
        keys::same_slot(key, &tombstone).then_some(tombstone)
    }

    /// How long a tombstone outlives its call: past our own bound on the
    /// call, a re-send's answer is never read.
    pub(crate) fn resend_window(&self) -> Duration {
        (self
            .connect_timeout
            .saturating_add(self.call_budget())
            .saturating_mul(2))
        .max(Duration::from_secs(1))
    }

    /// The clean-up release of an acquire that got no reply, on the
    /// acquire's own connection, so that the server runs it after the
    /// acquire. Sent as EVAL: a queued EVALSHA answered NOSCRIPT after our
    /// timeout would never be re-sent. If that connection is broken (not
    /// merely slow), the server will run nothing more from it: the shared
    /// connection is as good.
    pub(crate) async fn release_after_acquire(&self, key: &str, mut conn: Conn, call: Call<'_>) -> Result<Value> {
        let Call::Script { script, keys, args } = call else {
            return self.exec("release", key, Access::Write, call).await;
        };
        let budget = self.call_budget();
        match tokio::time::timeout(budget, script.cmd(true, keys, args).query_async::<Value>(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.code().is_none() && (e.is_connection_dropped() || e.is_unrecoverable_error()) => {
                self.exec("release", key, Access::Write, call).await
            }
            Ok(Err(e)) => Err(command_error(e, "release", key, Access::Write)),
            Err(_) => Err(op_timeout("release", key, budget, Access::Write)),
        }
    }

    /// Puts waiter `id` in `key`'s wake set for `max_wait` (and leaves the
    /// marker) so that a release wakes it, with how long its acquire has
    /// `waited` before, ms; false when the lock is already free or reserved
    /// for this process (no point waiting). A failure only costs the waiter
    /// its timer.
    pub(crate) async fn mark_waiting(&self, key: &str, id: &WaiterId, max_wait: Duration, waited: u64) -> bool {
        let helpers = WakeKeys::new(key);
        let [marker, wake, _, _] = helpers.names();
        let since = keys::helper(key, Helper::WakeSince);
        let mut waited_ms = itoa::Buffer::new();
        let waited = waited_ms.format(waited).as_bytes();
        let (mut ms, mut wait_ms) = (itoa::Buffer::new(), itoa::Buffer::new());
        // The margin covers the round trips between the waiter and the server.
        let ms = ms
            .format(ttl_millis(max_wait).saturating_add(lock_redis_family::wake::WAITING_MARGIN_MS))
            .as_bytes();
        let wait_ms = wait_ms.format(ttl_millis(max_wait)).as_bytes();
        let call = Call::Script {
            script: &self.scripts.mark_waiting,
            keys: &[key, marker, wake, &since],
            args: &[ms, id, wait_ms, waited],
        };
        match self.exec("wait for release", key, Access::Write, call).await {
            Ok(Value::Int(0)) => false,
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(error = %e, "no waiter marker; waiting on the timer");
                true
            }
        }
    }

    /// Whether `key` is free or reserved for this process's waiters (a
    /// waiter's look after its recheck delay). A failure says no: the
    /// waiter keeps waiting.
    pub(crate) async fn free_or_ours(&self, key: &str) -> bool {
        let mut cmd = deadpool_redis::redis::Cmd::with_capacity(2, 3 + key.len());
        cmd.arg("GET").arg(key);
        match self
            .exec("wait for release", key, Access::Read, Call::Command(cmd))
            .await
        {
            Ok(Value::Nil) => true,
            Ok(Value::BulkString(v)) => self.reserved_for_us(&v),
            _ => false,
        }
    }

    /// Whether a lock key's value is a reservation for this process's waiters.
    pub(crate) fn reserved_for_us(&self, value: &[u8]) -> bool {
        self.reservation.as_ref().is_some_and(|r| value.starts_with(r))
    }
}
