//! Inspecting a lock key: one read-only script (`scripts::INSPECT`).

use std::time::Duration;

use lock_core::{FencingToken, LockInfo, Result};
use lock_redis_family::wake::RESERVED_PREFIX;

use crate::error::{Access, unexpected_reply};
use crate::keys::{self, Helper};
use crate::replies::{array, int_at};
use crate::{Call, Inner};

impl Inner {
    /// What the server holds for `key`: the value, its `PTTL` and (with
    /// fencing) the fence counter, read atomically; nothing is written.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let fence = self.fencing.then(|| keys::helper(key, Helper::Fence));
        let mut names: Vec<&str> = vec![key];
        if let Some(f) = &fence
            && (!self.cluster || keys::same_slot(key, f))
        {
            names.push(f);
        }
        let call = Call::Script {
            script: &self.scripts.inspect,
            keys: &names,
            args: &[RESERVED_PREFIX.as_bytes()],
        };
        let value = self.exec("inspect", key, Access::Read, call).await?;
        let items = array(&value).ok_or_else(|| unexpected_reply("inspect", key, &value))?;
        match int_at(items, 0) {
            Some(0) => Ok(LockInfo::free()),
            Some(1) => {
                // PTTL: -1 no expiry (not a lock this backend wrote), -2 gone.
                let remaining = int_at(items, 1)
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis);
                let token = int_at(items, 2)
                    .and_then(|f| u64::try_from(f).ok())
                    .filter(|f| *f > 0)
                    .map(FencingToken);
                Ok(LockInfo::held(remaining).with_fencing_token(token))
            }
            _ => Err(unexpected_reply("inspect", key, &value)),
        }
    }
}
