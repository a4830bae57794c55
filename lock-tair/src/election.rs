//! [`ElectionBackend`] on Tair: the shared scripts of
//! `lock_redis_family::kinds::election`, run by [`crate::kinds`]; `leader` is
//! one `HMGET`. With [`crate::ReplicaAck`], wins and renewals WAIT as the
//! mutex's do (a renewal counts only once confirmed).

use std::time::Duration;

use async_trait::async_trait;
use fred::types::{ClusterHash, CustomCommand, Value};
use lock_core::{AcquireOutcome, ElectionBackend, LeaderInfo, LockToken, ReleaseOutcome, RenewOutcome, Result};
use lock_redis_family::kinds::election as election_lua;

use crate::TairBackend;
use crate::conn::{Access, map_error, send, unexpected_reply};

#[async_trait]
impl ElectionBackend for TairBackend {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        election_lua::try_lead(self, name, token, identity, ttl).await
    }

    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        election_lua::resign(self, name, token).await
    }

    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        election_lua::renew(self, name, token, ttl).await
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let keys = election_lua::keys_on(self, name)?;
        let what = "HMGET (leader)";
        let hmget = CustomCommand::new_static("HMGET", ClusterHash::FirstKey, false);
        let args = vec![Value::from(keys.lead.as_str()), "id".into(), "term".into()];
        let reply = send(self.inner.commands.next(), &hmget, args)
            .await
            .map_err(|e| map_error(what, name, Access::Read, e))?;
        let bad = || unexpected_reply(what, name, Access::Read, &reply);
        let Value::Array(items) = &reply else {
            return Err(bad());
        };
        match items.as_slice() {
            [Value::Null, _] => Ok(None),
            [id, term] => {
                let identity = id.as_bytes().map(<[u8]>::to_vec).ok_or_else(bad)?;
                let term = term.as_u64().ok_or_else(bad)?;
                Ok(Some(LeaderInfo::new(identity, term)))
            }
            _ => Err(bad()),
        }
    }
}
