//! [`ElectionBackend`] on Tair: the shared scripts of
//! `lock_core::kinds::election_lua`; `leader` is one `HMGET`. Refused under
//! [`crate::ReplicaAck`] (grants are not followed by `WAIT` here).

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use fred::types::{ClusterHash, CustomCommand, Value};
use lock_core::kinds::election::validate_identity;
use lock_core::kinds::election_lua::{self, ElectionKeys};
use lock_core::options::{validate_key, validate_ttl};
use lock_core::{
    AcquireOutcome, ElectionBackend, Error, FencingToken, LeaderInfo, Lease, LockToken, ReleaseOutcome, RenewOutcome,
    Result,
};

use crate::conn::{Access, NAME, map_error, send, unexpected_reply};
use crate::script::Script;
use crate::{TairBackend, px, token_arg};

struct Scripts {
    lead: Script,
    resign: Script,
    renew: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        lead: Script::new(election_lua::LEAD),
        resign: Script::new(election_lua::RESIGN),
        renew: Script::new(election_lua::RENEW),
    })
}

impl TairBackend {
    fn election_keys(&self, name: &str) -> Result<ElectionKeys> {
        if self.inner.ack.is_some() {
            return Err(Error::Unsupported {
                backend: NAME.into(),
                what: "leader election with replica acknowledgement".to_owned(),
            });
        }
        validate_key(name)?;
        ElectionKeys::prefixed(crate::keys::KIND_PREFIX, name)
    }
}

fn owner_code(what: &str, name: &str, reply: &Value) -> Result<i64> {
    match reply {
        Value::Integer(n @ 0..=2) => Ok(*n),
        other => Err(unexpected_reply(what, name, Access::Script, other)),
    }
}

#[async_trait]
impl ElectionBackend for TairBackend {
    async fn try_lead(&self, name: &str, token: &LockToken, identity: &[u8], ttl: Duration) -> Result<AcquireOutcome> {
        let keys = self.election_keys(name)?;
        validate_ttl(ttl)?;
        validate_identity(identity)?;
        let what = "EVAL (campaign)";
        let args = vec![token_arg(token), Value::Bytes(identity.to_vec().into()), px(ttl).into()];
        let reply = self
            .run_script(what, &scripts().lead, &[&keys.lead, &keys.term], args)
            .await?;
        match &reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Integer(1), Value::Integer(term)] => Ok(AcquireOutcome::Acquired(
                    Lease::new().with_fencing_token(Some(FencingToken(term.unsigned_abs()))),
                )),
                [Value::Integer(0), Value::Integer(pttl)] => Ok(AcquireOutcome::Held {
                    retry_after: u64::try_from(*pttl).ok().map(Duration::from_millis),
                }),
                _ => Err(unexpected_reply(what, name, Access::Script, &reply)),
            },
            _ => Err(unexpected_reply(what, name, Access::Script, &reply)),
        }
    }

    async fn resign(&self, name: &str, token: &LockToken) -> Result<ReleaseOutcome> {
        let keys = self.election_keys(name)?;
        let what = "EVAL (resign)";
        let reply = self
            .run_script(what, &scripts().resign, &[&keys.lead], vec![token_arg(token)])
            .await?;
        Ok(match owner_code(what, name, &reply)? {
            1 => ReleaseOutcome::Released,
            2 => ReleaseOutcome::HeldByOther,
            _ => ReleaseOutcome::Missing,
        })
    }

    async fn renew_lead(&self, name: &str, token: &LockToken, ttl: Duration) -> Result<RenewOutcome> {
        let keys = self.election_keys(name)?;
        validate_ttl(ttl)?;
        let what = "EVAL (leadership renew)";
        let reply = self
            .run_script(
                what,
                &scripts().renew,
                &[&keys.lead],
                vec![token_arg(token), px(ttl).into()],
            )
            .await?;
        Ok(match owner_code(what, name, &reply)? {
            1 => RenewOutcome::Renewed,
            2 => RenewOutcome::HeldByOther,
            _ => RenewOutcome::Missing,
        })
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let keys = self.election_keys(name)?;
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
