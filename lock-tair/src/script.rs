//! Running a shared Lua script of another lock kind: `EVALSHA`, then `EVAL`
//! after `NOSCRIPT`, routed by the first key's slot.

use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use lock_core::Result;

use crate::TairBackend;
use crate::conn::{Access, OptionsClient, is_no_script, map_error, send};

/// A script and its SHA1, computed once.
pub(crate) struct Script {
    source: &'static str,
    sha: String,
}

impl Script {
    pub(crate) fn new(source: &'static str) -> Self {
        Script {
            source,
            sha: fred::util::sha1_hash(source),
        }
    }
}

impl TairBackend {
    /// `EVALSHA` of `script` on `keys` (one slot) with `args`, `EVAL` after
    /// `NOSCRIPT`. Any failure is outcome-unknown (a script may have written
    /// before failing).
    pub(crate) async fn run_script(
        &self,
        what: &str,
        script: &Script,
        keys: &[&str],
        args: Vec<Value>,
    ) -> Result<Value> {
        let first = keys.first().copied().unwrap_or_default();
        self.run_script_on(self.inner.commands.next(), script, keys, args, false)
            .await
            .map_err(|e| map_error(what, first, Access::Script, e))
    }

    /// As [`TairBackend::run_script`], on `client`, with fred's error.
    /// `source_first`: send `EVAL` at once, for a call that must run even if
    /// its reply never comes (a `NOSCRIPT` answer to a timed-out `EVALSHA`
    /// would leave it unrun).
    pub(crate) async fn run_script_on(
        &self,
        client: &OptionsClient,
        script: &Script,
        keys: &[&str],
        args: Vec<Value>,
        source_first: bool,
    ) -> std::result::Result<Value, fred::error::Error> {
        let first = keys.first().copied().unwrap_or_default();
        let mut tail: Vec<Value> = Vec::with_capacity(1 + keys.len() + args.len());
        tail.push(i64::try_from(keys.len()).unwrap_or(i64::MAX).into());
        tail.extend(keys.iter().map(|&k| Value::from(k)));
        tail.extend(args);
        let slot = ClusterHash::Custom(redis_keyslot(first.as_bytes()));
        if source_first {
            let mut with_source = vec![Value::from(script.source)];
            with_source.extend(tail);
            return send(client, &CustomCommand::new_static("EVAL", slot, false), with_source).await;
        }
        let mut with_sha = vec![Value::from(script.sha.as_str())];
        with_sha.extend(tail.iter().cloned());
        match send(
            client,
            &CustomCommand::new_static("EVALSHA", slot.clone(), false),
            with_sha,
        )
        .await
        {
            Err(e) if is_no_script(&e) => {
                // Not run: the script cache is empty (new or flushed server).
                let mut with_source = vec![Value::from(script.source)];
                with_source.extend(tail);
                send(client, &CustomCommand::new_static("EVAL", slot, false), with_source).await
            }
            other => other,
        }
    }
}
