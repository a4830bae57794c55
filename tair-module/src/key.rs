//! A thin owner of a `RedisModuleKey*` (closed on drop) with the handful of
//! key operations the commands need, each mapping a missing server API to an
//! error reply instead of a panic.

use std::os::raw::c_int;

use redis_module::{Context, RedisError, RedisString, raw};

use crate::exstr::{self, ExStr};

/// Error for a server that lacks a module API we rely on (never on Redis >= 6.2).
pub const E_API: &str = "ERR tair-module: the server lacks a required module API";

/// Reads one of the server's API function pointers.
macro_rules! api {
    ($name:ident) => {
        // SAFETY: the pointer table is written once by RedisModule_Init, before
        // any command runs; reading a copy of an Option<fn> is then race-free.
        unsafe { redis_module::raw::$name }.ok_or(redis_module::RedisError::Str($crate::key::E_API))
    };
}
pub(crate) use api;

/// What the key currently holds.
pub enum Slot<'k> {
    /// No such key (or logically expired).
    Empty,
    /// An exString value, borrowed mutably from the keyspace.
    Ex(&'k mut ExStr),
    /// A native Redis string.
    Str,
    /// Anything else (list, hash, another module's type...).
    Other,
}

/// An open key.
pub struct Key {
    ptr: *mut raw::RedisModuleKey,
}

impl Key {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(ctx: &Context, name: &RedisString, write: bool) -> Result<Self, RedisError> {
        let open = api!(RedisModule_OpenKey)?;
        let mut mode = raw::REDISMODULE_READ as c_int;
        if write {
            mode |= raw::REDISMODULE_WRITE as c_int;
        }
        // SAFETY: ctx and the key name are live for the command's duration.
        let ptr = unsafe { open(ctx.ctx, name.inner, mode) };
        Ok(Self { ptr })
    }

    /// Classifies the key's value.
    pub fn slot(&mut self) -> Result<Slot<'_>, RedisError> {
        if self.ptr.is_null() {
            return Ok(Slot::Empty);
        }
        let key_type = api!(RedisModule_KeyType)?;
        // SAFETY: self.ptr is an open key.
        let t = unsafe { key_type(self.ptr) } as isize;
        if t == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(Slot::Empty);
        }
        if t == raw::REDISMODULE_KEYTYPE_STRING {
            return Ok(Slot::Str);
        }
        if t != raw::REDISMODULE_KEYTYPE_MODULE {
            return Ok(Slot::Other);
        }
        let get_type = api!(RedisModule_ModuleTypeGetType)?;
        let get_value = api!(RedisModule_ModuleTypeGetValue)?;
        let ours = exstr::raw_type();
        // SAFETY: self.ptr is an open module key.
        if ours.is_null() || unsafe { get_type(self.ptr) } != ours {
            return Ok(Slot::Other);
        }
        // SAFETY: the value of a key of our type is an ExStr we boxed; the
        // borrow is tied to &mut self, and the key stays open meanwhile.
        match unsafe { get_value(self.ptr).cast::<ExStr>().as_mut() } {
            Some(v) => Ok(Slot::Ex(v)),
            None => Ok(Slot::Empty),
        }
    }

    /// Stores a new exString value in an empty key (the key takes ownership).
    pub fn set_new(&mut self, v: ExStr) -> Result<(), RedisError> {
        let set = api!(RedisModule_ModuleTypeSetValue)?;
        let p = exstr::into_raw(v);
        // SAFETY: self.ptr is open for writing; on success Redis owns `p`.
        let rc = unsafe { set(self.ptr, exstr::raw_type(), p) };
        if rc == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so it is still ours.
            unsafe { exstr::drop_raw(p) };
            Err(RedisError::Str("ERR tair-module: could not store the value"))
        }
    }

    /// Replaces a native string's value (drops its TTL, like SET).
    pub fn string_set(&mut self, value: &RedisString) -> Result<(), RedisError> {
        let set = api!(RedisModule_StringSet)?;
        // SAFETY: self.ptr is open for writing; the string is live.
        let rc = unsafe { set(self.ptr, value.inner) };
        if rc == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err(RedisError::Str("ERR tair-module: could not set the string"))
        }
    }

    /// Deletes the key.
    pub fn delete(&mut self) -> Result<(), RedisError> {
        let del = api!(RedisModule_DeleteKey)?;
        // SAFETY: self.ptr is open for writing.
        unsafe { del(self.ptr) };
        Ok(())
    }

    /// Applies a TTL decision after a successful write.
    pub fn apply_ttl(&mut self, ttl: crate::parse::Ttl) -> Result<(), RedisError> {
        match ttl {
            crate::parse::Ttl::Keep => Ok(()),
            crate::parse::Ttl::Remove => {
                let set = api!(RedisModule_SetExpire)?;
                // SAFETY: self.ptr is open for writing and holds a value.
                unsafe { set(self.ptr, raw::REDISMODULE_NO_EXPIRE as i64) };
                Ok(())
            }
            crate::parse::Ttl::At(ms) => {
                let set = api!(RedisModule_SetAbsExpire)?;
                // SAFETY: self.ptr is open for writing and holds a value.
                unsafe { set(self.ptr, ms) };
                Ok(())
            }
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        // SAFETY: see `api!`; the key was opened by us and is closed once.
        if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
            unsafe { close(self.ptr) };
        }
    }
}

/// The server's clock in unix milliseconds (the clock TTLs are measured with).
pub fn now_ms() -> Result<i64, RedisError> {
    let ms = api!(RedisModule_Milliseconds)?;
    // SAFETY: no arguments; returns the current time.
    Ok(unsafe { ms() })
}

/// True when the command is being replayed from a primary or from the AOF/RDB load.
pub fn replayed(ctx: &Context) -> bool {
    let Ok(flags) = api!(RedisModule_GetContextFlags) else {
        return false;
    };
    // SAFETY: ctx is live for the command's duration.
    let f = unsafe { flags(ctx.ctx) };
    let mask = (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) as c_int;
    f & mask != 0
}
