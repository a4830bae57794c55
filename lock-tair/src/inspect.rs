//! Inspecting a lock key: the Redis family's read-only script
//! ([`lock_redis_family::inspect::INSPECT_LOCK`]).

use std::sync::OnceLock;
use std::time::Duration;

use fred::types::Value;
use fred::util::redis_keyslot;
use lock_core::{FencingToken, LockInfo, Result};
use lock_redis_family::inspect::INSPECT_LOCK;
use lock_redis_family::wake::RESERVED_PREFIX;

use crate::TairBackend;
use crate::conn::{Access, map_error, unexpected_reply};
use crate::keys::fence_key;
use crate::script::Script;

fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(INSPECT_LOCK))
}

impl TairBackend {
    /// The key's value, `PTTL` and (with fencing) fence counter, read in
    /// one script that writes nothing.
    pub(crate) async fn inspect_lock(&self, key: &str) -> Result<LockInfo> {
        let fence = self
            .inner
            .fence_prefix
            .as_deref()
            .map(|prefix| fence_key(prefix, key))
            .filter(|f| !self.inner.clustered || redis_keyslot(f.as_bytes()) == redis_keyslot(key.as_bytes()));
        let mut keys = vec![key];
        if let Some(f) = &fence {
            keys.push(f);
        }
        let args = vec![Value::from_static_str(RESERVED_PREFIX)];
        let reply = self
            .run_script_on(self.inner.commands.next(), script(), &keys, args, false)
            .await
            .map_err(|e| map_error("EVAL (inspect)", key, Access::Read, e))?;
        let bad = || unexpected_reply("EVAL (inspect)", key, Access::Read, &reply);
        let Value::Array(items) = &reply else { return Err(bad()) };
        let int = |i: usize| items.get(i).and_then(Value::as_i64);
        match int(0) {
            Some(0) => Ok(LockInfo::free()),
            Some(1) => {
                // PTTL: -1 no expiry, -2 gone since.
                let remaining = int(1).and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis);
                let token = int(2).and_then(|f| u64::try_from(f).ok()).filter(|f| *f > 0);
                Ok(LockInfo::held(remaining).with_fencing_token(token.map(FencingToken)))
            }
            _ => Err(bad()),
        }
    }
}
