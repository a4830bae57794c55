//! Running a shared Lua script of another lock kind: `EVALSHA`, then `EVAL`
//! after `NOSCRIPT`, routed by the first key's slot.

use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;
use lock_core::Result;

use crate::TairBackend;
use crate::conn::{Access, OptionsClient, is_no_script, map_error, send};

/// A script and its SHA1, computed once, as command arguments (cloning a
/// `Value` string shares its bytes).
pub(crate) struct Script {
    source: Value,
    sha: Value,
}

impl Script {
    pub(crate) fn new(source: &'static str) -> Self {
        Script {
            source: Value::from_static_str(source),
            sha: Value::from(fred::util::sha1_hash(source)),
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
        let slot = ClusterHash::Custom(redis_keyslot(first.as_bytes()));
        // `EVALSHA sha numkeys keys… args…`; after NOSCRIPT the same with
        // the source (only then is anything copied).
        let mut call: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
        call.push(if source_first {
            script.source.clone()
        } else {
            script.sha.clone()
        });
        call.push(i64::try_from(keys.len()).unwrap_or(i64::MAX).into());
        call.extend(keys.iter().map(|&k| Value::from(k)));
        call.extend(args);
        if source_first {
            return send(client, &CustomCommand::new_static("EVAL", slot, false), call).await;
        }
        match send(
            client,
            &CustomCommand::new_static("EVALSHA", slot.clone(), false),
            call.clone(),
        )
        .await
        {
            Err(e) if is_no_script(&e) => {
                // Not run: the script cache is empty (new or flushed server).
                call[0] = script.source.clone();
                send(client, &CustomCommand::new_static("EVAL", slot, false), call).await
            }
            other => other,
        }
    }
}
