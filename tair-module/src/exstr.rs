//! The `exstrtype` module data type: a binary-safe value with a u64 version and
//! u32 flags. Its RDB layout (encver 0: version as unsigned, flags as unsigned,
//! value as string) is the one TairString writes, so RDB files are
//! interchangeable with the C module.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::native_types::RedisType;
use redis_module::raw;

/// Module type name (exactly 9 characters, as Redis requires).
pub const TYPE_NAME: &str = "exstrtype";
/// RDB encoding version.
pub const ENCVER: i32 = 0;

/// One exString value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExStr {
    /// The bytes.
    pub value: Vec<u8>,
    /// Version: 1 on create, +1 per write, or set by ABS / EXSETVER.
    pub version: u64,
    /// Opaque user flags (memcached style).
    pub flags: u32,
}

/// The registered type. `raw_type` is filled in by `create_data_type` at load.
pub static EXSTR_TYPE: RedisType = RedisType::new(
    TYPE_NAME,
    ENCVER,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: None,
    },
);

/// The raw type handle (null before the module is loaded).
pub fn raw_type() -> *mut raw::RedisModuleType {
    EXSTR_TYPE.raw_type.try_borrow().map_or(std::ptr::null_mut(), |t| *t)
}

/// Moves a value to the heap for Redis to own.
pub fn into_raw(v: ExStr) -> *mut c_void {
    Box::into_raw(Box::new(v)).cast()
}

/// Takes back a value previously given by [`into_raw`] that Redis did not keep.
///
/// # Safety
/// `p` must come from [`into_raw`] and must not be owned by Redis.
pub unsafe fn drop_raw(p: *mut c_void) {
    if !p.is_null() {
        // SAFETY: guaranteed by the caller.
        drop(unsafe { Box::from_raw(p.cast::<ExStr>()) });
    }
}

/// Runs `f`, turning a panic into `fallback` (callbacks are called from C).
fn no_unwind<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    no_unwind(std::ptr::null_mut(), || {
        if encver != ENCVER {
            return std::ptr::null_mut();
        }
        let Ok(version) = raw::load_unsigned(rdb) else {
            return std::ptr::null_mut();
        };
        let Ok(flags) = raw::load_unsigned(rdb) else {
            return std::ptr::null_mut();
        };
        let Ok(flags) = u32::try_from(flags) else {
            return std::ptr::null_mut();
        };
        let Ok(buf) = raw::load_string_buffer(rdb) else {
            return std::ptr::null_mut();
        };
        into_raw(ExStr {
            value: buf.as_ref().to_vec(),
            version,
            flags,
        })
    })
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value created by this module.
    let Some(v) = (unsafe { value.cast::<ExStr>().as_ref() }) else {
        return;
    };
    no_unwind((), || {
        raw::save_unsigned(rdb, v.version);
        raw::save_unsigned(rdb, u64::from(v.flags));
        raw::save_slice(rdb, &v.value);
    });
}

/// Emits `EXSET key value ABS version FLAGS flags`; Redis appends the PEXPIREAT.
unsafe extern "C" fn aof_rewrite(aof: *mut raw::RedisModuleIO, key: *mut raw::RedisModuleString, value: *mut c_void) {
    // SAFETY: Redis passes a value created by this module.
    let Some(v) = (unsafe { value.cast::<ExStr>().as_ref() }) else {
        return;
    };
    // SAFETY: reading a function pointer the server filled in at load.
    let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
        return;
    };
    const CMD: &CStr = c"EXSET";
    const FMT: &CStr = c"sbclcl";
    // The version is sent as the signed number with the same bits; EXSET
    // accepts a negative ABS when it is replayed from the AOF.
    let version = v.version as i64;
    // SAFETY: the format string matches the arguments: s = RedisModuleString*,
    // b = (char*, size_t), c = C string, l = long long.
    unsafe {
        emit(
            aof,
            CMD.as_ptr(),
            FMT.as_ptr(),
            key,
            v.value.as_ptr(),
            v.value.len(),
            c"ABS".as_ptr(),
            version,
            c"FLAGS".as_ptr(),
            i64::from(v.flags),
        );
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a value created by this module.
    match unsafe { value.cast::<ExStr>().as_ref() } {
        Some(v) => std::mem::size_of::<ExStr>() + v.value.capacity(),
        None => 0,
    }
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: Redis passes a value created by this module.
    let Some(v) = (unsafe { value.cast::<ExStr>().as_ref() }) else {
        return;
    };
    // SAFETY: reading function pointers the server filled in at load.
    let (Some(add_ll), Some(add_buf), Some(end)) = (unsafe {
        (
            raw::RedisModule_DigestAddLongLong,
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestEndSequence,
        )
    }) else {
        return;
    };
    // SAFETY: `md` is the digest handle Redis gave us; the buffer is live.
    unsafe {
        add_ll(md, v.version as i64);
        add_ll(md, i64::from(v.flags));
        add_buf(md, v.value.as_ptr().cast(), v.value.len());
        end(md);
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: Redis hands back ownership of a value created by `into_raw`.
    unsafe { drop_raw(value) }
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    no_unwind(std::ptr::null_mut(), || {
        // SAFETY: Redis passes a value created by this module.
        match unsafe { value.cast::<ExStr>().as_ref() } {
            Some(v) => into_raw(v.clone()),
            None => std::ptr::null_mut(),
        }
    })
}
