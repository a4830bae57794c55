//! Pure parsing helpers: Redis' strict integer syntax and the option grammar
//! shared by the exString commands. Nothing here touches the server, so it is
//! unit-tested directly.

/// `ERR syntax error`.
pub const E_SYNTAX: &str = "ERR syntax error";
/// `ERR update version is stale`.
pub const E_STALE: &str = "ERR update version is stale";
/// `ERR value is not an integer`.
pub const E_NOT_INT: &str = "ERR value is not an integer";
/// `ERR value is not a float`.
pub const E_NOT_FLOAT: &str = "ERR value is not a float";
/// `ERR increment or decrement would overflow`.
pub const E_OVERFLOW: &str = "ERR increment or decrement would overflow";
/// `ERR min or max is specified, but not valid`.
pub const E_MIN_MAX: &str = "ERR min or max is specified, but not valid";
/// `ERR version should be integer`.
pub const E_VER_INT: &str = "ERR version should be integer";

/// Parses a signed 64-bit integer with Redis' strict rules (`string2ll`):
/// an optional `-`, no `+`, no spaces, no leading zeros (except `"0"` itself),
/// no `-0`, and no overflow.
#[must_use]
pub fn string2ll(s: &[u8]) -> Option<i64> {
    match s {
        [] => None,
        [b'0'] => Some(0),
        [b'-', digits @ ..] => {
            let v = parse_digits(digits)?;
            if v <= 1u64 << 63 {
                // -(2^63) is i64::MIN; everything smaller in magnitude fits.
                Some((v as i64).wrapping_neg())
            } else {
                None
            }
        }
        digits => i64::try_from(parse_digits(digits)?).ok(),
    }
}

/// Digits of a non-zero number: first digit 1-9, then 0-9, no overflow of u64.
fn parse_digits(d: &[u8]) -> Option<u64> {
    let (&first, rest) = d.split_first()?;
    if !(b'1'..=b'9').contains(&first) {
        return None;
    }
    let mut v = u64::from(first - b'0');
    for &c in rest {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// Which TTL keyword was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TtlKind {
    /// `EX seconds`
    Ex,
    /// `PX milliseconds`
    Px,
    /// `EXAT unix-seconds`
    ExAt,
    /// `PXAT unix-milliseconds`
    PxAt,
}

/// Which version keyword was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerKind {
    /// `VER n`: compare-and-set (0 = no check).
    Ver,
    /// `ABS n`: set the version to exactly n.
    Abs,
}

/// The options a command accepts (anything else is `ERR syntax error`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Allow {
    /// `EX/PX/EXAT/PXAT`.
    pub ttl: bool,
    /// `KEEPTTL`.
    pub keepttl: bool,
    /// `NX/XX`.
    pub nx_xx: bool,
    /// `VER/ABS`.
    pub version: bool,
    /// `FLAGS`.
    pub flags: bool,
    /// `DEF`.
    pub def: bool,
    /// `MIN/MAX`.
    pub bounds: bool,
    /// `NONEGATIVE`.
    pub nonegative: bool,
    /// `WITHVERSION`.
    pub withversion: bool,
}

impl Allow {
    /// EXSET.
    pub const EXSET: Allow = Allow {
        ttl: true,
        keepttl: true,
        nx_xx: true,
        version: true,
        flags: true,
        def: false,
        bounds: false,
        nonegative: false,
        withversion: true,
    };
    /// EXINCRBY.
    pub const EXINCRBY: Allow = Allow {
        ttl: true,
        keepttl: true,
        nx_xx: true,
        version: true,
        flags: false,
        def: true,
        bounds: true,
        nonegative: true,
        withversion: true,
    };
    /// EXINCRBYFLOAT.
    pub const EXINCRBYFLOAT: Allow = Allow {
        ttl: true,
        keepttl: true,
        nx_xx: true,
        version: true,
        flags: false,
        def: false,
        bounds: true,
        nonegative: false,
        withversion: false,
    };
    /// EXCAS and CAS.
    pub const CAS: Allow = Allow {
        ttl: true,
        keepttl: true,
        nx_xx: false,
        version: false,
        flags: false,
        def: false,
        bounds: false,
        nonegative: false,
        withversion: false,
    };
    /// EXAPPEND and EXPREPEND.
    pub const APPEND: Allow = Allow {
        ttl: false,
        keepttl: false,
        nx_xx: true,
        version: true,
        flags: false,
        def: false,
        bounds: false,
        nonegative: false,
        withversion: false,
    };
    /// EXGAE.
    pub const EXGAE: Allow = Allow {
        ttl: true,
        keepttl: false,
        nx_xx: false,
        version: false,
        flags: false,
        def: false,
        bounds: false,
        nonegative: false,
        withversion: false,
    };
}

/// Raw (not yet validated) option values, borrowed from the arguments.
#[derive(Clone, Debug, Default)]
pub struct Opts<'a> {
    /// NX given.
    pub nx: bool,
    /// XX given.
    pub xx: bool,
    /// TTL keyword and its raw argument.
    pub ttl: Option<(TtlKind, &'a [u8])>,
    /// KEEPTTL given.
    pub keepttl: bool,
    /// VER/ABS and its raw argument.
    pub version: Option<(VerKind, &'a [u8])>,
    /// FLAGS raw argument.
    pub flags: Option<&'a [u8]>,
    /// DEF raw argument.
    pub def: Option<&'a [u8]>,
    /// MIN raw argument.
    pub min: Option<&'a [u8]>,
    /// MAX raw argument.
    pub max: Option<&'a [u8]>,
    /// NONEGATIVE given.
    pub nonegative: bool,
    /// WITHVERSION given.
    pub withversion: bool,
}

/// Parses the option tail of a command. Keywords are case-insensitive; a
/// keyword that takes a value consumes the next argument whatever it is.
/// Structural problems (unknown or disallowed keyword, missing value,
/// conflicting or repeated group) all give `ERR syntax error`. As in
/// TairString, repeating a flag-only keyword of the same kind (`NX NX`,
/// `KEEPTTL KEEPTTL`, `WITHVERSION WITHVERSION`) is accepted.
pub fn parse_opts<'a, S: AsRef<[u8]>>(args: &'a [S], allow: Allow) -> Result<Opts<'a>, &'static str> {
    let mut o = Opts::default();
    let mut i = 0;
    while i < args.len() {
        let kw = args[i].as_ref();
        let next = args.get(i + 1).map(AsRef::as_ref);
        let is = |name: &str| kw.eq_ignore_ascii_case(name.as_bytes());
        let mut consumed = 1;
        if allow.nx_xx && is("nx") {
            if o.xx {
                return Err(E_SYNTAX);
            }
            o.nx = true;
        } else if allow.nx_xx && is("xx") {
            if o.nx {
                return Err(E_SYNTAX);
            }
            o.xx = true;
        } else if let (true, Some(v), Some(kind)) = (allow.ttl, next, ttl_kind(kw)) {
            if o.ttl.is_some() || o.keepttl {
                return Err(E_SYNTAX);
            }
            o.ttl = Some((kind, v));
            consumed = 2;
        } else if let (true, Some(v), Some(kind)) = (allow.version, next, ver_kind(kw)) {
            if o.version.is_some() {
                return Err(E_SYNTAX);
            }
            o.version = Some((kind, v));
            consumed = 2;
        } else if let (true, Some(v), true) = (allow.flags, next, is("flags")) {
            if o.flags.replace(v).is_some() {
                return Err(E_SYNTAX);
            }
            consumed = 2;
        } else if let (true, Some(v), true) = (allow.def, next, is("def")) {
            if o.def.replace(v).is_some() {
                return Err(E_SYNTAX);
            }
            consumed = 2;
        } else if let (true, Some(v), true) = (allow.bounds, next, is("min")) {
            if o.min.replace(v).is_some() {
                return Err(E_SYNTAX);
            }
            consumed = 2;
        } else if let (true, Some(v), true) = (allow.bounds, next, is("max")) {
            if o.max.replace(v).is_some() {
                return Err(E_SYNTAX);
            }
            consumed = 2;
        } else if allow.nonegative && is("nonegative") {
            o.nonegative = true;
        } else if allow.withversion && is("withversion") {
            o.withversion = true;
        } else if allow.keepttl && is("keepttl") {
            if o.ttl.is_some() {
                return Err(E_SYNTAX);
            }
            o.keepttl = true;
        } else {
            return Err(E_SYNTAX);
        }
        i += consumed;
    }
    Ok(o)
}

fn ttl_kind(kw: &[u8]) -> Option<TtlKind> {
    [
        ("ex", TtlKind::Ex),
        ("px", TtlKind::Px),
        ("exat", TtlKind::ExAt),
        ("pxat", TtlKind::PxAt),
    ]
    .into_iter()
    .find(|(n, _)| kw.eq_ignore_ascii_case(n.as_bytes()))
    .map(|(_, k)| k)
}

fn ver_kind(kw: &[u8]) -> Option<VerKind> {
    if kw.eq_ignore_ascii_case(b"ver") {
        Some(VerKind::Ver)
    } else if kw.eq_ignore_ascii_case(b"abs") {
        Some(VerKind::Abs)
    } else {
        None
    }
}

/// What a successful write does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// No TTL option: the key becomes persistent.
    Remove,
    /// `KEEPTTL` (or a command that never touches the TTL).
    Keep,
    /// Expire at this absolute unix time in milliseconds.
    At(i64),
}

/// Validates a TTL option's value (an int64 > 0) and turns it into an
/// absolute unix-ms deadline using `now_ms`. Values that cannot be
/// represented in milliseconds also give `ERR syntax error`.
pub fn resolve_ttl(o: &Opts<'_>, now_ms: i64) -> Result<Ttl, &'static str> {
    let Some((kind, raw)) = o.ttl else {
        return Ok(if o.keepttl { Ttl::Keep } else { Ttl::Remove });
    };
    let n = string2ll(raw).ok_or(E_SYNTAX)?;
    if n <= 0 {
        return Err(E_SYNTAX);
    }
    let at = match kind {
        TtlKind::Ex => n.checked_mul(1000).and_then(|ms| ms.checked_add(now_ms)),
        TtlKind::Px => n.checked_add(now_ms),
        TtlKind::ExAt => n.checked_mul(1000),
        TtlKind::PxAt => Some(n),
    };
    at.map(Ttl::At).ok_or(E_SYNTAX)
}

/// Validates a `VER n` / `ABS n` value: an int64 >= 0. When `allow_negative`
/// is set (commands replayed from a primary or from the AOF, which carry our
/// own `ABS` rewrites) a negative number is read as the u64 with the same bits,
/// so versions past 2^63-1 survive replication.
pub fn resolve_version(o: &Opts<'_>, allow_negative: bool) -> Result<Option<(VerKind, u64)>, &'static str> {
    let Some((kind, raw)) = o.version else {
        return Ok(None);
    };
    let n = string2ll(raw).ok_or(E_SYNTAX)?;
    if n < 0 && !(allow_negative && kind == VerKind::Abs) {
        return Err(E_SYNTAX);
    }
    Ok(Some((kind, n as u64)))
}

/// Validates `FLAGS f`: 0 ..= 4294967295.
pub fn resolve_flags(o: &Opts<'_>) -> Result<Option<u32>, &'static str> {
    match o.flags {
        None => Ok(None),
        Some(raw) => {
            let n = string2ll(raw).ok_or(E_SYNTAX)?;
            u32::try_from(n).map(Some).map_err(|_| E_SYNTAX)
        }
    }
}

/// Formats an i64 the way Redis does.
#[must_use]
pub fn ll_bytes(v: i64) -> Vec<u8> {
    itoa::Buffer::new().format(v).as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_integers() {
        for ok in ["0", "1", "-1", "10", "9223372036854775807", "-9223372036854775808"] {
            assert_eq!(string2ll(ok.as_bytes()), ok.parse::<i64>().ok(), "{ok}");
        }
        for bad in [
            "",
            "-",
            "+1",
            "01",
            "-0",
            "00",
            " 1",
            "1 ",
            "1.0",
            "abc",
            "9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999999",
            "1\0",
        ] {
            assert_eq!(string2ll(bad.as_bytes()), None, "{bad:?}");
        }
    }

    fn p(args: &[&str], allow: Allow) -> Result<Opts<'static>, &'static str> {
        let owned: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let leaked: &'static [Vec<u8>] = Box::leak(owned.into_boxed_slice());
        parse_opts(leaked, allow)
    }

    #[test]
    fn grammar() {
        assert!(p(&["EX", "10", "PX", "10"], Allow::EXSET).is_err());
        assert!(p(&["EX", "10", "KEEPTTL"], Allow::EXSET).is_err());
        assert!(p(&["KEEPTTL", "EX", "10"], Allow::EXSET).is_err());
        assert!(p(&["NX", "XX"], Allow::EXSET).is_err());
        assert!(p(&["NX", "NX"], Allow::EXSET).is_ok());
        assert!(p(&["VER", "1", "ABS", "2"], Allow::EXSET).is_err());
        assert!(p(&["EX"], Allow::EXSET).is_err());
        assert!(p(&["FLAGS", "1", "FLAGS", "2"], Allow::EXSET).is_err());
        assert!(p(&["WITHVERSION"], Allow::EXINCRBYFLOAT).is_err());
        assert!(p(&["NX"], Allow::CAS).is_err());
        assert!(p(&["EX", "1"], Allow::APPEND).is_err());
        assert!(p(&["KEEPTTL"], Allow::EXGAE).is_err());
        assert!(p(&["MIN", "1", "MIN", "2"], Allow::EXINCRBY).is_err());
        let o = p(
            &["ex", "5", "xx", "ver", "3", "flags", "7", "withversion"],
            Allow::EXSET,
        );
        let o = o.unwrap_or_default();
        assert!(o.xx && o.withversion);
        assert_eq!(o.ttl, Some((TtlKind::Ex, &b"5"[..])));
        assert_eq!(resolve_ttl(&o, 1000), Ok(Ttl::At(6000)));
        assert_eq!(resolve_version(&o, false), Ok(Some((VerKind::Ver, 3))));
        assert_eq!(resolve_flags(&o), Ok(Some(7)));
    }

    #[test]
    fn values() {
        let ttl = |a: &[&str]| resolve_ttl(&p(a, Allow::EXSET).unwrap_or_default(), 0);
        assert_eq!(ttl(&["EX", "0"]), Err(E_SYNTAX));
        assert_eq!(ttl(&["EX", "-5"]), Err(E_SYNTAX));
        assert_eq!(ttl(&["PX", "abc"]), Err(E_SYNTAX));
        assert_eq!(ttl(&["EXAT", "1"]), Ok(Ttl::At(1000)));
        assert_eq!(ttl(&["EX", "9223372036854775807"]), Err(E_SYNTAX));
        assert_eq!(ttl(&["KEEPTTL"]), Ok(Ttl::Keep));
        assert_eq!(ttl(&[]), Ok(Ttl::Remove));
        let flags = |a: &[&str]| resolve_flags(&p(a, Allow::EXSET).unwrap_or_default());
        assert_eq!(flags(&["FLAGS", "4294967295"]), Ok(Some(u32::MAX)));
        assert_eq!(flags(&["FLAGS", "4294967296"]), Err(E_SYNTAX));
        assert_eq!(flags(&["FLAGS", "-1"]), Err(E_SYNTAX));
        let ver = |a: &[&str], neg| resolve_version(&p(a, Allow::EXSET).unwrap_or_default(), neg);
        assert_eq!(ver(&["VER", "-1"], false), Err(E_SYNTAX));
        assert_eq!(ver(&["ABS", "-1"], true), Ok(Some((VerKind::Abs, u64::MAX))));
        assert_eq!(ver(&["VER", "-1"], true), Err(E_SYNTAX));
    }
}
