//! Each command's argument checks that need no key, as the commands call
//! them (`commands.rs`), so they can also run without a server: the fuzz
//! target `tair_args` and its corpus replay ([`every_command`]). Where
//! TairString checks the key's type between two argument checks, the
//! command calls two functions here with the key check between them.

use redis_module::RedisError;

use crate::ldouble;
use crate::parse::{
    Allow, E_MIN_MAX, E_NOT_FLOAT, E_NOT_INT, E_SYNTAX, E_VER_INT, Opts, Ttl, VerKind, parse_opts, resolve_flags,
    resolve_ttl, resolve_version, string2ll,
};

/// `ERR wrong number of arguments for '<cmd>' command`.
pub fn arity(cmd: &str) -> RedisError {
    RedisError::String(format!("ERR wrong number of arguments for '{cmd}' command"))
}

/// A static error reply.
pub fn err(msg: &'static str) -> RedisError {
    RedisError::Str(msg)
}

fn opts<'a>(tail: &'a [&'a [u8]], allow: Allow) -> Result<Opts<'a>, RedisError> {
    parse_opts(tail, allow).map_err(err)
}

/// At least `min` arguments (the command name included).
pub fn at_least(all: &[&[u8]], min: usize, cmd: &str) -> Result<(), RedisError> {
    if all.len() < min { Err(arity(cmd)) } else { Ok(()) }
}

/// Exactly `n` arguments (the command name included).
pub fn exactly(all: &[&[u8]], n: usize, cmd: &str) -> Result<(), RedisError> {
    if all.len() == n { Ok(()) } else { Err(arity(cmd)) }
}

/// EXSET's options, resolved.
#[derive(Debug)]
pub struct ExSet<'a> {
    /// The raw options (NX/XX, WITHVERSION).
    pub opts: Opts<'a>,
    /// The TTL to apply.
    pub ttl: Ttl,
    /// VER/ABS.
    pub version: Option<(VerKind, u64)>,
    /// FLAGS.
    pub flags: Option<u32>,
}

/// `EXSET key value [options]`: everything before the key.
pub fn exset<'a>(all: &'a [&'a [u8]], now_ms: i64, replayed: bool) -> Result<ExSet<'a>, RedisError> {
    at_least(all, 3, "exset")?;
    let opts = opts(&all[3..], Allow::EXSET)?;
    let ttl = resolve_ttl(&opts, now_ms).map_err(err)?;
    let version = resolve_version(&opts, replayed).map_err(err)?;
    let flags = resolve_flags(&opts).map_err(err)?;
    Ok(ExSet {
        opts,
        ttl,
        version,
        flags,
    })
}

/// `EXGET key [WITHFLAGS]`: whether WITHFLAGS was given.
pub fn exget(all: &[&[u8]]) -> Result<bool, RedisError> {
    if all.len() < 2 || all.len() > 3 {
        return Err(arity("exget"));
    }
    let withflags = all.len() == 3;
    if withflags && !all[2].eq_ignore_ascii_case(b"withflags") {
        return Err(err(E_SYNTAX));
    }
    Ok(withflags)
}

/// `EXINCRBY key num [options]`: the options, checked before the key.
pub fn exincrby_opts<'a>(all: &'a [&'a [u8]]) -> Result<Opts<'a>, RedisError> {
    at_least(all, 3, "exincrby")?;
    opts(&all[3..], Allow::EXINCRBY)
}

/// EXINCRBY's numbers, resolved.
#[derive(Debug)]
pub struct IncrBy {
    /// The increment.
    pub incr: i64,
    /// DEF: the value of a missing key.
    pub def: Option<i64>,
    /// The TTL to apply.
    pub ttl: Ttl,
    /// VER/ABS.
    pub version: Option<(VerKind, u64)>,
    /// MIN.
    pub min: Option<i64>,
    /// MAX.
    pub max: Option<i64>,
}

/// EXINCRBY's numbers, checked after the key's type.
pub fn exincrby_numbers(all: &[&[u8]], o: &Opts<'_>, now_ms: i64, replayed: bool) -> Result<IncrBy, RedisError> {
    let incr = string2ll(all[2]).ok_or(err(E_NOT_INT))?;
    let def = match o.def {
        Some(d) => Some(string2ll(d).ok_or(err(E_NOT_INT))?),
        None => None,
    };
    let ttl = resolve_ttl(o, now_ms).map_err(err)?;
    let version = resolve_version(o, replayed).map_err(err)?;
    let bound = |b: Option<&[u8]>| match b {
        Some(b) => string2ll(b).map(Some).ok_or(err(E_MIN_MAX)),
        None => Ok(None),
    };
    let min = bound(o.min)?;
    let max = bound(o.max)?;
    if let (Some(lo), Some(hi)) = (min, max)
        && hi < lo
    {
        return Err(err(E_MIN_MAX));
    }
    Ok(IncrBy {
        incr,
        def,
        ttl,
        version,
        min,
        max,
    })
}

/// EXINCRBYFLOAT's options, resolved.
#[derive(Debug)]
pub struct IncrByFloat<'a> {
    /// The raw options (NX/XX, MIN/MAX).
    pub opts: Opts<'a>,
    /// The TTL to apply.
    pub ttl: Ttl,
    /// VER/ABS.
    pub version: Option<(VerKind, u64)>,
}

/// `EXINCRBYFLOAT key num [options]`: everything after the key's type.
pub fn exincrbyfloat<'a>(all: &'a [&'a [u8]], now_ms: i64, replayed: bool) -> Result<IncrByFloat<'a>, RedisError> {
    if !ldouble::valid(all[2]) {
        return Err(err(E_NOT_FLOAT));
    }
    let opts = opts(&all[3..], Allow::EXINCRBYFLOAT)?;
    let ttl = resolve_ttl(&opts, now_ms).map_err(err)?;
    let version = resolve_version(&opts, replayed).map_err(err)?;
    for b in [opts.min, opts.max].into_iter().flatten() {
        if !ldouble::valid(b) {
            return Err(err(E_MIN_MAX));
        }
    }
    if let (Some(lo), Some(hi)) = (opts.min, opts.max)
        && ldouble::less(lo, hi)
    {
        return Err(err(E_MIN_MAX));
    }
    Ok(IncrByFloat { opts, ttl, version })
}

/// `EXSETVER key version`: the version, checked after the key.
pub fn exsetver_version(raw: &[u8]) -> Result<u64, RedisError> {
    match string2ll(raw) {
        Some(n) if n > 0 => Ok(n as u64),
        _ => Err(err(E_SYNTAX)),
    }
}

/// `EXCAS key newvalue version [TTL]`: the TTL and the expected version.
pub fn excas(all: &[&[u8]], now_ms: i64) -> Result<(Ttl, u64), RedisError> {
    at_least(all, 4, "excas")?;
    let o = opts(&all[4..], Allow::CAS)?;
    // TairString's order: TTL not a number (syntax), version not a number
    // (its own error), then TTL <= 0 or version < 0 (syntax).
    if let Some((_, raw)) = o.ttl {
        string2ll(raw).ok_or(err(E_SYNTAX))?;
    }
    let expected = string2ll(all[3]).ok_or(err(E_VER_INT))?;
    let ttl = resolve_ttl(&o, now_ms).map_err(err)?;
    if expected < 0 {
        return Err(err(E_SYNTAX));
    }
    Ok((ttl, expected as u64))
}

/// `EXCAD key version`: the version, checked after the key's type (any
/// integer: a negative one matches no version).
pub fn excad_version(raw: &[u8]) -> Result<u64, RedisError> {
    string2ll(raw).map(|n| n as u64).ok_or(err(E_SYNTAX))
}

/// `EXAPPEND`/`EXPREPEND key value [NX|XX] [VER|ABS n]`: the options and
/// the version, before the key.
pub fn exappend<'a>(
    all: &'a [&'a [u8]],
    cmd: &str,
    replayed: bool,
) -> Result<(Opts<'a>, Option<(VerKind, u64)>), RedisError> {
    at_least(all, 3, cmd)?;
    let o = opts(&all[3..], Allow::APPEND)?;
    let v = resolve_version(&o, replayed).map_err(err)?;
    Ok((o, v))
}

/// `EXGAE key EX|PX|EXAT|PXAT t`: the absolute deadline in unix ms.
pub fn exgae(all: &[&[u8]], now_ms: i64) -> Result<i64, RedisError> {
    at_least(all, 4, "exgae")?;
    let o = opts(&all[2..], Allow::EXGAE)?;
    match resolve_ttl(&o, now_ms).map_err(err)? {
        Ttl::At(at) => Ok(at),
        _ => Err(err(E_SYNTAX)),
    }
}

/// `CAS key old new [TTL]`: the TTL the replacement gets.
pub fn cas(all: &[&[u8]], now_ms: i64) -> Result<Ttl, RedisError> {
    at_least(all, 4, "cas")?;
    let o = opts(&all[4..], Allow::CAS)?;
    Ok(match resolve_ttl(&o, now_ms).map_err(err)? {
        // SET-style replacement drops the TTL; KEEPTTL is accepted but, as in
        // TairString on Redis 7, does not keep it.
        Ttl::Keep => Ttl::Remove,
        t => t,
    })
}

/// Splits a fuzz input: the key's current value, then the arguments (the
/// command name first), separated by NUL bytes.
#[cfg_attr(not(test), allow(dead_code))] // the fuzz target and the tests
pub fn split_input(data: &[u8]) -> (&[u8], Vec<&[u8]>) {
    let mut parts = data.split(|&b| b == 0);
    let value = parts.next().unwrap_or_default();
    (value, parts.collect())
}

/// Every key-independent step of the command `all[0]` names (any case),
/// in the command's order, with `value` standing for the key's current
/// value where a command computes from it: what the server runs on these
/// arguments short of the key. For the fuzz target and its corpus replay;
/// an unknown command does nothing.
#[cfg_attr(not(test), allow(dead_code))] // the fuzz target and the tests
pub fn every_command(all: &[&[u8]], value: &[u8], now_ms: i64, replayed: bool) {
    let Some(name) = all.first() else { return };
    let name = name.to_ascii_lowercase();
    let _ = match name.as_slice() {
        b"exset" => exset(all, now_ms, replayed).map(drop),
        b"exget" => exget(all).map(drop),
        b"exincrby" => exincrby_opts(all).and_then(|o| {
            let n = exincrby_numbers(all, &o, now_ms, replayed)?;
            let start = string2ll(value).ok_or(err(E_NOT_INT))?;
            let _ = start.checked_add(n.incr);
            Ok(())
        }),
        b"exincrbyfloat" => at_least(all, 3, "exincrbyfloat").and_then(|()| {
            let a = exincrbyfloat(all, now_ms, replayed)?;
            let _ = ldouble::valid(value);
            let _ = ldouble::incr(Some(value), all[2], a.opts.min, a.opts.max);
            let _ = ldouble::incr(None, all[2], a.opts.min, a.opts.max);
            Ok(())
        }),
        b"exsetver" => exactly(all, 3, "exsetver").and_then(|()| exsetver_version(all[2]).map(drop)),
        b"excas" => excas(all, now_ms).map(drop),
        b"excad" => exactly(all, 3, "excad").and_then(|()| excad_version(all[2]).map(drop)),
        b"exappend" | b"exprepend" => exappend(all, "exappend", replayed).map(drop),
        b"exgae" => exgae(all, now_ms).map(drop),
        b"cas" => cas(all, now_ms).map(drop),
        b"cad" => exactly(all, 3, "cad"),
        _ => Ok(()),
    };
}

#[cfg(test)]
#[allow(clippy::panic)] // test set-up
mod tests {
    use super::*;

    /// The fuzz target's corpus (`fuzz/corpus/tair_args`, minimized), and
    /// the inputs its runs found, replayed on the stable toolchain: none
    /// may panic.
    #[test]
    fn the_fuzz_corpus_replays_without_a_panic() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/tair_args");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.map(|e| e.path()).unwrap_or_else(|e| panic!("{e}"));
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let (value, all) = split_input(&data);
            every_command(&all, value, 1_700_000_000_000, false);
            every_command(&all, value, i64::MAX, true);
            n += 1;
        }
        assert!(n > 0, "empty corpus in {}", dir.display());
    }
}
