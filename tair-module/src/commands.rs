//! The twelve commands. Each follows TairString's check order exactly
//! (arity, option syntax, key type, numbers, NX/XX, version), because clients
//! can observe which error wins.
//!
//! Every write is replicated in a deterministic form: exString writes as
//! `EXSET key value ABS <version> FLAGS <flags> [PXAT <abs-ms> | KEEPTTL]`,
//! EXGAE as `PEXPIREAT`, CAS as `SET` (+ `PEXPIREAT`), CAD/EXCAD as `DEL`.

use std::ffi::CStr;

use redis_module::{Context, RedisError, RedisResult, RedisString, RedisValue, raw};

use crate::args::{self, err};
use crate::exstr::ExStr;
use crate::key::{Key, Slot, api, now_ms, replayed};
use crate::ldouble;
use crate::parse::{E_NOT_FLOAT, E_NOT_INT, E_OVERFLOW, E_STALE, Ttl, VerKind, ll_bytes, string2ll};

const OK: RedisValue = RedisValue::SimpleStringStatic("OK");

fn int(v: i64) -> RedisValue {
    RedisValue::Integer(v)
}

/// Versions are stored as u64 and replied as the i64 with the same bits.
fn ver(v: u64) -> RedisValue {
    RedisValue::Integer(v as i64)
}

fn bulk(v: &[u8]) -> RedisValue {
    RedisValue::StringBuffer(v.to_vec())
}

fn slices(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().map(RedisString::as_slice).collect()
}

/// The version after a successful write: ABS n, or +1.
fn next_version(cur: Option<u64>, v: Option<(VerKind, u64)>) -> u64 {
    match v {
        Some((VerKind::Abs, n)) => n,
        _ => cur.unwrap_or(0).wrapping_add(1),
    }
}

/// `VER n` with n != 0 must equal the current version.
fn check_stale(cur: &ExStr, v: Option<(VerKind, u64)>) -> Result<(), RedisError> {
    match v {
        Some((VerKind::Ver, n)) if n != 0 && n != cur.version => Err(err(E_STALE)),
        _ => Ok(()),
    }
}

/// Replicates the key's new state as an absolute EXSET.
fn replicate_exset(ctx: &Context, key: &RedisString, v: &ExStr, ttl: Ttl) {
    let (mut version, mut flags, mut at) = (itoa::Buffer::new(), itoa::Buffer::new(), itoa::Buffer::new());
    let version = version.format(v.version as i64).as_bytes();
    let mut args: Vec<&[u8]> = vec![
        key.as_slice(),
        &v.value,
        b"ABS",
        version,
        b"FLAGS",
        flags.format(v.flags).as_bytes(),
    ];
    match ttl {
        Ttl::At(ms) => {
            args.push(b"PXAT");
            args.push(at.format(ms).as_bytes());
        }
        Ttl::Keep => args.push(b"KEEPTTL"),
        Ttl::Remove => {}
    }
    ctx.replicate("EXSET", args.as_slice());
}

/// Stores `new` (creating the key when `existing` is false), applies the TTL
/// and replicates. Returns the stored version.
fn store(ctx: &Context, name: &RedisString, key: &mut Key, new: ExStr, ttl: Ttl) -> Result<u64, RedisError> {
    let version = new.version;
    match key.slot()? {
        Slot::Ex(cur) => *cur = new,
        Slot::Empty => key.set_new(new)?,
        Slot::Str | Slot::Other => return Err(RedisError::WrongType),
    }
    key.apply_ttl(ttl)?;
    if let Slot::Ex(cur) = key.slot()? {
        replicate_exset(ctx, name, cur, ttl);
    }
    Ok(version)
}

/// `EXSET key value [EX|PX|EXAT|PXAT t | KEEPTTL] [NX|XX] [VER|ABS n] [FLAGS f] [WITHVERSION]`
pub fn exset(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let all = slices(args);
    let args::ExSet {
        opts: o,
        ttl,
        version: v,
        flags,
    } = args::exset(&all, now_ms()?, replayed(ctx))?;

    let mut key = Key::open(ctx, &args[1], true)?;
    let (cur_version, cur_flags) = match key.slot()? {
        Slot::Empty if o.xx => return Ok(RedisValue::Null),
        Slot::Empty => (None, 0),
        Slot::Str | Slot::Other => return Err(RedisError::WrongType),
        Slot::Ex(_) if o.nx => return Ok(RedisValue::Null),
        Slot::Ex(cur) => {
            check_stale(cur, v)?;
            (Some(cur.version), cur.flags)
        }
    };
    let new = ExStr {
        value: all[2].to_vec(),
        version: next_version(cur_version, v),
        flags: flags.unwrap_or(cur_flags),
    };
    let version = store(ctx, &args[1], &mut key, new, ttl)?;
    Ok(if o.withversion { ver(version) } else { OK })
}

/// `EXGET key [WITHFLAGS]`
pub fn exget(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let withflags = args::exget(&slices(args))?;
    let mut key = Key::open(ctx, &args[1], false)?;
    match key.slot()? {
        Slot::Empty => Ok(RedisValue::Null),
        Slot::Ex(v) => {
            let mut out = vec![bulk(&v.value), ver(v.version)];
            if withflags {
                out.push(int(i64::from(v.flags)));
            }
            Ok(RedisValue::Array(out))
        }
        Slot::Str | Slot::Other => Err(RedisError::WrongType),
    }
}

/// `EXINCRBY key num [TTL|KEEPTTL] [NX|XX] [VER|ABS n] [MIN a] [MAX b] [NONEGATIVE] [WITHVERSION] [DEF d]`
pub fn exincrby(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let all = slices(args);
    let o = args::exincrby_opts(&all)?;
    let mut key = Key::open(ctx, &args[1], true)?;
    if matches!(key.slot()?, Slot::Str | Slot::Other) {
        return Err(RedisError::WrongType);
    }
    let args::IncrBy {
        incr,
        def,
        ttl,
        version: v,
        min,
        max,
    } = args::exincrby_numbers(&all, &o, now_ms()?, replayed(ctx))?;

    let (cur_version, flags, start) = match key.slot()? {
        Slot::Empty if o.xx => return Ok(RedisValue::Null),
        Slot::Empty => (None, 0, def.unwrap_or(0)),
        Slot::Ex(_) if o.nx => return Ok(RedisValue::Null),
        Slot::Ex(cur) => {
            let n = string2ll(&cur.value).ok_or(err(E_NOT_INT))?;
            check_stale(cur, v)?;
            (Some(cur.version), cur.flags, n)
        }
        Slot::Str | Slot::Other => return Err(RedisError::WrongType),
    };
    let mut value = start;
    // DEF on a missing key sets the value without applying the increment.
    if !(def.is_some() && cur_version.is_none()) {
        let sum = start.checked_add(incr).ok_or(err(E_OVERFLOW))?;
        if max.is_some_and(|hi| sum > hi) || min.is_some_and(|lo| sum < lo) {
            return Err(err(E_OVERFLOW));
        }
        value = sum;
    }
    if o.nonegative && value < 0 {
        value = 0;
    }
    let new = ExStr {
        value: ll_bytes(value),
        version: next_version(cur_version, v),
        flags,
    };
    let version = store(ctx, &args[1], &mut key, new, ttl)?;
    Ok(if o.withversion {
        RedisValue::Array(vec![int(value), ver(version)])
    } else {
        int(value)
    })
}

/// `EXINCRBYFLOAT key num [TTL|KEEPTTL] [NX|XX] [VER|ABS n] [MIN a] [MAX b]`
pub fn exincrbyfloat(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let all = slices(args);
    args::at_least(&all, 3, "exincrbyfloat")?;
    let mut key = Key::open(ctx, &args[1], true)?;
    if matches!(key.slot()?, Slot::Str | Slot::Other) {
        return Err(RedisError::WrongType);
    }
    let args::IncrByFloat {
        opts: o,
        ttl,
        version: v,
    } = args::exincrbyfloat(&all, now_ms()?, replayed(ctx))?;

    let (cur_version, flags, result) = match key.slot()? {
        Slot::Empty if o.xx => return Ok(RedisValue::Null),
        Slot::Empty => (None, 0, ldouble::incr(None, all[2], o.min, o.max)),
        Slot::Ex(_) if o.nx => return Ok(RedisValue::Null),
        Slot::Ex(cur) => {
            if !ldouble::valid(&cur.value) {
                return Err(err(E_NOT_FLOAT));
            }
            check_stale(cur, v)?;
            let r = ldouble::incr(Some(&cur.value), all[2], o.min, o.max);
            (Some(cur.version), cur.flags, r)
        }
        Slot::Str | Slot::Other => return Err(RedisError::WrongType),
    };
    let value = match result {
        ldouble::Incr::Value(s) => s,
        ldouble::Incr::Overflow => return Err(err(E_OVERFLOW)),
        ldouble::Incr::NotFloat => return Err(err(E_NOT_FLOAT)),
    };
    let reply = bulk(&value);
    let new = ExStr {
        value,
        version: next_version(cur_version, v),
        flags,
    };
    store(ctx, &args[1], &mut key, new, ttl)?;
    Ok(reply)
}

/// `EXSETVER key version`
pub fn exsetver(ctx: &Context, args: &[RedisString]) -> RedisResult {
    args::exactly(&slices(args), 3, "exsetver")?;
    let mut key = Key::open(ctx, &args[1], true)?;
    match key.slot()? {
        Slot::Empty => Ok(int(0)),
        Slot::Str | Slot::Other => Err(RedisError::WrongType),
        Slot::Ex(cur) => {
            cur.version = args::exsetver_version(args[2].as_slice())?;
            ctx.replicate("EXSETVER", &[args[1].as_slice(), args[2].as_slice()][..]);
            Ok(int(1))
        }
    }
}

/// `EXCAS key newvalue version [EX|PX|EXAT|PXAT t | KEEPTTL]`
pub fn excas(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let all = slices(args);
    let (ttl, expected) = args::excas(&all, now_ms()?)?;
    let mut key = Key::open(ctx, &args[1], true)?;
    let (cur_version, flags) = match key.slot()? {
        Slot::Empty => return Ok(int(-1)),
        Slot::Str | Slot::Other => return Err(RedisError::WrongType),
        Slot::Ex(cur) if cur.version != expected => {
            return Ok(RedisValue::Array(vec![
                RedisValue::SimpleStringStatic("CAS_FAILED"),
                bulk(&cur.value),
                ver(cur.version),
            ]));
        }
        Slot::Ex(cur) => (cur.version, cur.flags),
    };
    let new = ExStr {
        value: all[2].to_vec(),
        version: cur_version.wrapping_add(1),
        flags,
    };
    let version = store(ctx, &args[1], &mut key, new, ttl)?;
    Ok(RedisValue::Array(vec![
        OK,
        RedisValue::SimpleStringStatic(""),
        ver(version),
    ]))
}

/// `EXCAD key version`
pub fn excad(ctx: &Context, args: &[RedisString]) -> RedisResult {
    args::exactly(&slices(args), 3, "excad")?;
    let mut key = Key::open(ctx, &args[1], true)?;
    if matches!(key.slot()?, Slot::Str | Slot::Other) {
        return Err(RedisError::WrongType);
    }
    let expected = args::excad_version(args[2].as_slice())?;
    let matches = match key.slot()? {
        Slot::Ex(cur) => cur.version == expected,
        _ => return Ok(int(-1)),
    };
    if !matches {
        return Ok(int(0));
    }
    key.delete()?;
    ctx.replicate("DEL", &[args[1].as_slice()][..]);
    Ok(int(1))
}

/// Shared body of EXAPPEND / EXPREPEND.
fn exappend_impl(ctx: &Context, args: &[RedisString], name: &str, prepend: bool) -> RedisResult {
    let all = slices(args);
    let (o, v) = args::exappend(&all, name, replayed(ctx))?;
    let mut key = Key::open(ctx, &args[1], true)?;
    let new = match key.slot()? {
        Slot::Empty if o.xx => return Ok(RedisValue::Null),
        Slot::Empty => ExStr {
            value: all[2].to_vec(),
            version: next_version(None, v),
            flags: 0,
        },
        // NX is checked before the type: `EXAPPEND plainkey y NX` is nil.
        _ if o.nx => return Ok(RedisValue::Null),
        Slot::Str | Slot::Other => return Err(RedisError::WrongType),
        Slot::Ex(cur) => {
            check_stale(cur, v)?;
            let mut value = Vec::with_capacity(cur.value.len() + all[2].len());
            if prepend {
                value.extend_from_slice(all[2]);
                value.extend_from_slice(&cur.value);
            } else {
                value.extend_from_slice(&cur.value);
                value.extend_from_slice(all[2]);
            }
            ExStr {
                value,
                version: next_version(Some(cur.version), v),
                flags: cur.flags,
            }
        }
    };
    let version = store(ctx, &args[1], &mut key, new, Ttl::Keep)?;
    Ok(ver(version))
}

/// `EXAPPEND key value [NX|XX] [VER|ABS n]`
pub fn exappend(ctx: &Context, args: &[RedisString]) -> RedisResult {
    exappend_impl(ctx, args, "exappend", false)
}

/// `EXPREPEND key value [NX|XX] [VER|ABS n]`
pub fn exprepend(ctx: &Context, args: &[RedisString]) -> RedisResult {
    exappend_impl(ctx, args, "exprepend", true)
}

/// `EXGAE key EX|PX|EXAT|PXAT t`
pub fn exgae(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let at = args::exgae(&slices(args), now_ms()?)?;
    let mut key = Key::open(ctx, &args[1], true)?;
    let reply = match key.slot()? {
        Slot::Empty => return Ok(RedisValue::Null),
        Slot::Str | Slot::Other => return Err(RedisError::WrongType),
        Slot::Ex(cur) => RedisValue::Array(vec![bulk(&cur.value), ver(cur.version), int(i64::from(cur.flags))]),
    };
    key.apply_ttl(Ttl::At(at))?;
    let mut buf = itoa::Buffer::new();
    ctx.replicate("PEXPIREAT", &[args[1].as_slice(), buf.format(at).as_bytes()][..]);
    Ok(reply)
}

/// Reads a native string's bytes through `GET` (no side effect on its encoding).
fn get_string(ctx: &Context, name: &RedisString) -> Result<Option<Vec<u8>>, RedisError> {
    let call = api!(RedisModule_Call)?;
    let reply_type = api!(RedisModule_CallReplyType)?;
    let string_ptr = api!(RedisModule_CallReplyStringPtr)?;
    let free = api!(RedisModule_FreeCallReply)?;
    const GET: &CStr = c"GET";
    const FMT: &CStr = c"s";
    // SAFETY: the format "s" takes one RedisModuleString*, which is live.
    let reply = unsafe { call(ctx.ctx, GET.as_ptr(), FMT.as_ptr(), name.inner) };
    if reply.is_null() {
        return Ok(None);
    }
    // SAFETY: `reply` is a live call reply until freed below; the string
    // pointer and length are copied out before freeing.
    let out = unsafe {
        if reply_type(reply) == raw::REDISMODULE_REPLY_STRING as i32 {
            let mut len = 0usize;
            let p = string_ptr(reply, &mut len);
            if p.is_null() {
                Some(Vec::new())
            } else {
                Some(std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec())
            }
        } else {
            None
        }
    };
    // SAFETY: freed exactly once.
    unsafe { free(reply) };
    Ok(out)
}

/// `CAS key old new [EX|PX|EXAT|PXAT t | KEEPTTL]` on native strings.
pub fn cas(ctx: &Context, args: &[RedisString]) -> RedisResult {
    let all = slices(args);
    let ttl = args::cas(&all, now_ms()?)?;
    let mut key = Key::open(ctx, &args[1], true)?;
    match key.slot()? {
        Slot::Empty => return Ok(int(-1)),
        Slot::Str => {}
        Slot::Ex(_) | Slot::Other => return Err(RedisError::WrongType),
    }
    match get_string(ctx, &args[1])? {
        Some(cur) if cur == all[2] => {}
        _ => return Ok(int(0)),
    }
    key.string_set(&args[3])?;
    key.apply_ttl(ttl)?;
    ctx.replicate("SET", &[all[1], all[3]][..]);
    if let Ttl::At(ms) = ttl {
        let mut buf = itoa::Buffer::new();
        ctx.replicate("PEXPIREAT", &[all[1], buf.format(ms).as_bytes()][..]);
    }
    Ok(int(1))
}

/// `CAD key value` on native strings.
pub fn cad(ctx: &Context, args: &[RedisString]) -> RedisResult {
    args::exactly(&slices(args), 3, "cad")?;
    let mut key = Key::open(ctx, &args[1], true)?;
    match key.slot()? {
        Slot::Empty => return Ok(int(-1)),
        Slot::Str => {}
        Slot::Ex(_) | Slot::Other => return Err(RedisError::WrongType),
    }
    match get_string(ctx, &args[1])? {
        Some(cur) if cur == args[2].as_slice() => {}
        _ => return Ok(int(0)),
    }
    key.delete()?;
    ctx.replicate("DEL", &[args[1].as_slice()][..]);
    Ok(int(1))
}
