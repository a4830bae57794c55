//! One operation on one connection: the transaction a write runs in (the
//! isolation level and durability it needs, whatever the session's
//! defaults), and what becomes of a connection whose reply did not come.
//!
//! A connection with a reply still pending is never handed to another
//! caller: on a timeout, or when the operation's future is dropped, it
//! leaves the pool and is set aside until its replies come (at most
//! [`DRAIN_LIMIT`], then a cancel request is sent and it is closed). A
//! grant's connection is set aside under its token, and the clean-up of
//! that token (a release, resign, ...) is sent on the same connection: the
//! server runs a connection's statements in order, so the clean-up takes
//! effect only after the grant it cleans up finished.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object};
use lock_core::{Error, Result};
use tokio_postgres::{Client, Row};

use crate::error::{BACKEND, pool_error, statement_error};
use crate::{Param, PostgresBackend};

/// Longest time a set-aside connection waits for its pending replies.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Opens every write's transaction: READ COMMITTED whatever the session's
/// default (the kinds' functions decide after waiting for the name's row
/// lock, and must see what the previous holder of that lock committed: a
/// REPEATABLE READ snapshot is taken before the wait), and a commit that
/// is durable on the server before it is confirmed (`synchronous_commit =
/// off` would confirm a grant that a crash then loses, and hand its fencing
/// token out again). Other values of `synchronous_commit` (`local`, `on`,
/// `remote_write`, `remote_apply`) are kept: each flushes locally.
pub(crate) const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; \
    SELECT set_config('synchronous_commit', 'on', true) WHERE current_setting('synchronous_commit') = 'off'";

/// What an operation is, for its transaction and its connection.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op<'a> {
    /// A read: one statement, no transaction block.
    Read,
    /// A write.
    Write,
    /// A write that may grant `token` (an acquire of any kind): when its
    /// reply does not come, its connection is set aside under the token.
    Grant(&'a [u8]),
    /// A write that cleans `token` up: sent on the connection of the
    /// token's unanswered grant, if there is one (as is a grant re-sent
    /// with the token).
    Cleanup(&'a [u8]),
}

impl Op<'_> {
    fn is_write(self) -> bool {
        !matches!(self, Op::Read)
    }
}

/// Connections of grants whose reply did not come, by token.
pub(crate) type SetAside = Arc<Mutex<HashMap<Vec<u8>, Arc<ClientWrapper>>>>;

fn lock(map: &SetAside) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Arc<ClientWrapper>>> {
    map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

enum Held {
    Pooled(Box<Object>),
    Shared(Arc<ClientWrapper>),
}

/// A connection in use: dropped before [`Busy::finish`] (a timeout, or the
/// operation's future dropped), it is set aside rather than pooled.
pub(crate) struct Busy {
    held: Option<Held>,
    set_aside: SetAside,
    token: Option<Vec<u8>>,
}

impl Busy {
    pub(crate) fn client(&self) -> Option<&Client> {
        let client: &Client = match self.held.as_ref()? {
            Held::Pooled(o) => o,
            Held::Shared(c) => c,
        };
        Some(client)
    }

    /// Every reply came: the connection goes back to the pool (closed if it
    /// broke); a set-aside one is done with and closed.
    pub(crate) fn finish(mut self) {
        match self.held.take() {
            Some(Held::Pooled(o)) if o.is_closed() => drop(Object::take(*o)),
            Some(Held::Pooled(o)) => drop(o),
            Some(Held::Shared(c)) => {
                if let Some(token) = &self.token {
                    let mut map = lock(&self.set_aside);
                    if map.get(token).is_some_and(|c2| Arc::ptr_eq(c2, &c)) {
                        map.remove(token);
                    }
                }
            }
            None => {}
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let client = match self.held.take() {
            Some(Held::Pooled(o)) => Arc::new(Object::take(*o)),
            Some(Held::Shared(c)) => c,
            None => return,
        };
        if let Some(token) = &self.token {
            lock(&self.set_aside).insert(token.clone(), client.clone());
        }
        drain(client, self.set_aside.clone(), self.token.take());
    }
}

/// Keep `client` until its pending replies came (an empty query behind
/// them answers), then forget it; past [`DRAIN_LIMIT`], cancel what runs on
/// it and close it.
fn drain(client: Arc<ClientWrapper>, set_aside: SetAside, token: Option<Vec<u8>>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        if let Some(token) = token {
            lock(&set_aside).remove(&token);
        }
        return;
    };
    handle.spawn(async move {
        if !matches!(
            tokio::time::timeout(DRAIN_LIMIT, client.batch_execute("")).await,
            Ok(Ok(()))
        ) {
            // Broken or too slow: what may still run on it is cancelled.
            cancel(&client).await;
        }
        if let Some(token) = token {
            let mut map = lock(&set_aside);
            if map.get(&token).is_some_and(|c| Arc::ptr_eq(c, &client)) {
                map.remove(&token);
            }
        }
    });
}

/// Ask the server to cancel what runs on `client` (best effort: over TLS
/// the request is not sent without the `tls` feature's connector).
async fn cancel(client: &Client) {
    let token = client.cancel_token();
    let _ = tokio::time::timeout(Duration::from_secs(2), token.cancel_query(tokio_postgres::NoTls)).await;
}

/// Send `sql` on `client`: a read as one statement; a write in its own
/// transaction (see [`BEGIN`]), the three messages pipelined in one round
/// trip, confirmed only once the commit is.
pub(crate) async fn exchange(
    client: &Client,
    sql: &str,
    params: &[Param<'_>],
    write: bool,
) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
    if !write {
        return client.query_typed(sql, params).await;
    }
    let (begin, rows, commit) = futures::join!(
        client.batch_execute(BEGIN),
        client.query_typed(sql, params),
        client.batch_execute("COMMIT")
    );
    begin?;
    let rows = rows?;
    commit?;
    Ok(rows)
}

impl PostgresBackend {
    /// A connection for `op`: the set-aside connection of its token's
    /// unanswered grant (a clean-up, or a grant re-sent with the same token,
    /// runs after it), else one from the pool (within `timeout`).
    pub(crate) async fn busy(&self, op: Op<'_>, timeout: Duration) -> Result<Busy> {
        let set_aside = self.inner.set_aside.clone();
        let token = match op {
            Op::Grant(t) | Op::Cleanup(t) => Some(t.to_vec()),
            Op::Read | Op::Write => None,
        };
        if let Op::Grant(t) | Op::Cleanup(t) = op {
            let found = lock(&set_aside).get(t).cloned();
            if let Some(client) = found {
                if !client.is_closed() {
                    return Ok(Busy {
                        held: Some(Held::Shared(client)),
                        set_aside,
                        token,
                    });
                }
                // Broken: its grant may still run on the server; cancel it
                // before this statement goes out on another connection.
                lock(&set_aside).remove(t);
                cancel(&client).await;
            }
        }
        let pooled = match tokio::time::timeout(timeout, self.inner.pool.get()).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(pool_error(e)),
            Err(_) => return Err(Error::backend(BACKEND, "no connection within the response timeout")),
        };
        Ok(Busy {
            held: Some(Held::Pooled(Box::new(pooled))),
            set_aside,
            token: matches!(op, Op::Grant(_)).then_some(token).flatten(),
        })
    }

    /// Runs one operation within the response timeout (see the module
    /// notes for what becomes of its connection).
    pub(crate) async fn run(&self, sql: &str, params: &[Param<'_>], op: Op<'_>) -> Result<Vec<Row>> {
        let timeout = self.inner.response_timeout;
        let started = tokio::time::Instant::now();
        let busy = self.busy(op, timeout).await?;
        let left = timeout.saturating_sub(started.elapsed()).max(Duration::from_millis(1));
        let write = op.is_write();
        let reply = match busy.client() {
            Some(client) => tokio::time::timeout(left, exchange(client, sql, params, write)).await,
            None => return Err(Error::backend(BACKEND, "no connection")),
        };
        match reply {
            Ok(Ok(rows)) => {
                busy.finish();
                Ok(rows)
            }
            Ok(Err(e)) => {
                busy.finish();
                Err(statement_error(e, write, &self.inner.sql.schema))
            }
            Err(_) => {
                // `busy` is dropped with its reply pending: set aside.
                drop(busy);
                let message = format!("no reply within {timeout:?}");
                Err(if write {
                    Error::outcome_unknown(BACKEND, message)
                } else {
                    Error::backend(BACKEND, message)
                })
            }
        }
    }
}
