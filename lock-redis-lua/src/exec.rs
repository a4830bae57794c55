//! Running one call on the shared connection: the hot path.

use std::time::Duration;

use deadpool_redis::redis::Value;
use lock_core::{LockToken, Result};

use crate::error::{Access, command_error, op_timeout};
use crate::in_flight;
use crate::replies::answered;
use crate::{Call, Inner};

impl Inner {
    /// Bound of one call on an open connection: a script may take two
    /// round trips (EVALSHA, NOSCRIPT, EVAL).
    pub(crate) fn call_budget(&self) -> Duration {
        self.response_timeout.saturating_mul(2)
    }

    /// Runs `call` on the shared connection.
    pub(crate) async fn exec(&self, op: &str, key: &str, access: Access, call: Call<'_>) -> Result<Value> {
        self.exec_tracked(op, key, access, call, None).await
    }

    /// Runs `call` on the shared connection; an acquire (`acquire`: its
    /// token and TTL) is remembered with its connection until it gets a
    /// reply (see [`in_flight::InFlight`]).
    pub(crate) async fn exec_tracked(
        &self,
        op: &str,
        key: &str,
        access: Access,
        call: Call<'_>,
        acquire: Option<(&LockToken, Duration)>,
    ) -> Result<Value> {
        self.exec_once(op, key, access, call, acquire, true).await
    }

    async fn exec_once(
        &self,
        op: &str,
        key: &str,
        access: Access,
        call: Call<'_>,
        acquire: Option<(&LockToken, Duration)>,
        may_retry: bool,
    ) -> Result<Value> {
        let (checkout, mut conn) = self.shared.get().await?;
        // Registered only if no answer comes (timeout, cancellation, a
        // broken connection): the answered acquire costs no registry work.
        let mut unanswered =
            acquire.map(|(token, ttl)| in_flight::Unanswered::new(&self.in_flight, *token, conn.clone(), ttl));
        let budget = self.call_budget();
        // A connection we configured bounds each request itself (a script
        // is at most two: within `budget`); a second timer per call would
        // only cost a timer-wheel insert and removal.
        let reply = if self.shared.bounds_each_request() {
            Ok(call.run(&mut conn).await)
        } else {
            tokio::time::timeout(budget, call.run(&mut conn)).await
        };
        if let (Some(unanswered), Ok(r)) = (&mut unanswered, &reply)
            && answered(r)
        {
            unanswered.answered();
        }
        drop(unanswered);
        match reply {
            Ok(Ok(value)) => {
                self.shared.succeeded(checkout);
                Ok(value)
            }
            Ok(Err(e)) => {
                self.shared.failed(checkout, Some(&e));
                if may_retry && self.shared.follows_primary() && e.code() == Some("READONLY") {
                    // A demoted primary refused the call before it ran:
                    // once more, on the primary found again.
                    return Box::pin(self.exec_once(op, key, access, call, acquire, false)).await;
                }
                Err(command_error(e, op, key, access))
            }
            Err(_) => {
                self.shared.failed(checkout, None);
                Err(op_timeout(op, key, budget, access))
            }
        }
    }
}
