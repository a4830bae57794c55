//! A TairString-compatible Redis module written in Rust.
//!
//! Load the built `libtair_module.so` into `redis-server` (7.x) or Valkey with
//! `--loadmodule` or `MODULE LOAD`. It registers the exString type
//! (`exstrtype`: value + u64 version + u32 flags) and twelve commands:
//! `CAS CAD` on native strings, and `EXSET EXGET EXCAS EXCAD EXSETVER
//! EXINCRBY EXINCRBYFLOAT EXAPPEND EXPREPEND EXGAE` on exString keys. Replies,
//! error strings, TTL and version rules follow the observed behaviour of
//! Alibaba's open-source TairString module (see the crate README).
//!
//! No panic crosses into the server: every command body runs under
//! `catch_unwind` and a panic becomes an error reply.

// Under `cargo test` the module entry points are compiled out (the Redis
// allocator is unavailable outside a server), leaving the handlers unused.
#![cfg_attr(test, allow(dead_code))]

mod args;
mod commands;
mod exstr;
mod key;
mod ldouble;
mod parse;

use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::{Context, RedisError, RedisResult, RedisString, Status};

/// Runs a command body, turning a panic into an error reply.
fn guard(ctx: &Context, args: &[RedisString], f: fn(&Context, &[RedisString]) -> RedisResult) -> RedisResult {
    catch_unwind(AssertUnwindSafe(|| f(ctx, args))).unwrap_or(Err(RedisError::Str("ERR tair-module: internal error")))
}

macro_rules! entry_points {
    ($($name:ident),* $(,)?) => {
        /// The functions handed to the registration macro.
        mod entry {
            use super::*;
            $(
                pub fn $name(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
                    guard(ctx, &args, commands::$name)
                }
            )*
        }
    };
}

entry_points!(
    cas,
    cad,
    exset,
    exget,
    excas,
    excad,
    exsetver,
    exincrby,
    exincrbyfloat,
    exappend,
    exprepend,
    exgae,
);

/// Refuses to load on a server that lacks any module API we call, so that no
/// command can later find one missing.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    let present = [
        key::api!(RedisModule_OpenKey).is_ok(),
        key::api!(RedisModule_CloseKey).is_ok(),
        key::api!(RedisModule_KeyType).is_ok(),
        key::api!(RedisModule_ModuleTypeGetType).is_ok(),
        key::api!(RedisModule_ModuleTypeGetValue).is_ok(),
        key::api!(RedisModule_ModuleTypeSetValue).is_ok(),
        key::api!(RedisModule_StringSet).is_ok(),
        key::api!(RedisModule_DeleteKey).is_ok(),
        key::api!(RedisModule_SetExpire).is_ok(),
        key::api!(RedisModule_SetAbsExpire).is_ok(),
        key::api!(RedisModule_Milliseconds).is_ok(),
        key::api!(RedisModule_GetContextFlags).is_ok(),
        key::api!(RedisModule_Replicate).is_ok(),
        key::api!(RedisModule_Call).is_ok(),
        key::api!(RedisModule_CallReplyType).is_ok(),
        key::api!(RedisModule_CallReplyStringPtr).is_ok(),
        key::api!(RedisModule_FreeCallReply).is_ok(),
        key::api!(RedisModule_EmitAOF).is_ok(),
        key::api!(RedisModule_CreateString).is_ok(),
        key::api!(RedisModule_FreeString).is_ok(),
    ];
    if present.iter().all(|&p| p) {
        Status::Ok
    } else {
        ctx.log_warning("tair-module: this server lacks module APIs it needs (Redis >= 6.2 required)");
        Status::Err
    }
}

/// The module's entry point (`RedisModule_OnLoad`), global allocator (Redis'
/// own, so `used_memory` and `maxmemory` see our allocations), data type and
/// command table. Compiled out of unit tests, which run without a server.
#[cfg(not(test))]
mod registration {
    use super::{entry, init};
    use crate::exstr::EXSTR_TYPE;

    redis_module::redis_module! {
        name: "exstrtype",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [EXSTR_TYPE],
        init: init,
        commands: [
            ["exset", entry::exset, "write deny-oom", 1, 1, 1, ""],
            ["exget", entry::exget, "readonly fast", 1, 1, 1, ""],
            ["exincrby", entry::exincrby, "write deny-oom", 1, 1, 1, ""],
            ["exincrbyfloat", entry::exincrbyfloat, "write deny-oom", 1, 1, 1, ""],
            ["exsetver", entry::exsetver, "write deny-oom", 1, 1, 1, ""],
            ["excas", entry::excas, "write deny-oom", 1, 1, 1, ""],
            ["excad", entry::excad, "write deny-oom", 1, 1, 1, ""],
            ["exprepend", entry::exprepend, "write deny-oom", 1, 1, 1, ""],
            ["exappend", entry::exappend, "write deny-oom", 1, 1, 1, ""],
            ["exgae", entry::exgae, "write deny-oom", 1, 1, 1, ""],
            ["cas", entry::cas, "write deny-oom", 1, 1, 1, ""],
            ["cad", entry::cad, "write deny-oom", 1, 1, 1, ""],
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::panic)] // the point: a panicking body must become an error reply
    fn a_panic_becomes_an_error_reply() {
        let ctx = Context::dummy();
        let r = guard(&ctx, &[], |_, _| panic!("boom"));
        assert!(matches!(r, Err(RedisError::Str(m)) if m.starts_with("ERR ")));
        let ok = guard(&ctx, &[], |_, _| Ok(redis_module::RedisValue::Integer(1)));
        assert!(matches!(ok, Ok(redis_module::RedisValue::Integer(1))));
    }
}
