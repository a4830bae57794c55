//! EXINCRBYFLOAT arithmetic in C `long double` (see `csrc/ldouble.c`), so that
//! parsing, rounding and the `%.17Lf` output match Redis/TairString exactly
//! (`0.1 + 0.2` prints `0.3`, as with Redis' INCRBYFLOAT).

use std::os::raw::{c_char, c_int};

unsafe extern "C" {
    fn verrou_ld_valid(s: *const c_char, len: usize) -> c_int;
    fn verrou_ld_less(a: *const c_char, alen: usize, b: *const c_char, blen: usize) -> c_int;
    #[allow(clippy::too_many_arguments)] // mirrors the C signature
    fn verrou_ld_incr(
        cur: *const c_char,
        cur_len: usize,
        incr: *const c_char,
        incr_len: usize,
        min: *const c_char,
        min_len: usize,
        max: *const c_char,
        max_len: usize,
        out: *mut c_char,
        out_cap: usize,
        out_len: *mut usize,
    ) -> c_int;
}

/// Size of the output buffer (Redis' MAX_LONG_DOUBLE_CHARS).
const OUT_CAP: usize = 5120;

/// True when `s` is a number Redis' `string2ld` accepts.
#[must_use]
pub fn valid(s: &[u8]) -> bool {
    // SAFETY: pointer and length describe a live slice; the C side only reads it.
    unsafe { verrou_ld_valid(s.as_ptr().cast(), s.len()) == 1 }
}

/// True when both parse and `b < a` (used for "MAX below MIN").
#[must_use]
pub fn less(a: &[u8], b: &[u8]) -> bool {
    // SAFETY: as in `valid`.
    unsafe { verrou_ld_less(a.as_ptr().cast(), a.len(), b.as_ptr().cast(), b.len()) == 1 }
}

/// Outcome of [`incr`].
#[derive(Debug, PartialEq, Eq)]
pub enum Incr {
    /// The formatted new value.
    Value(Vec<u8>),
    /// An operand does not parse as a float.
    NotFloat,
    /// inf/nan or outside the bounds.
    Overflow,
}

fn opt_ptr(s: Option<&[u8]>) -> (*const c_char, usize) {
    match s {
        Some(s) => (s.as_ptr().cast(), s.len()),
        None => (std::ptr::null(), 0),
    }
}

/// `cur + incr` with optional `[min, max]` bounds; `cur == None` is a missing key (0).
#[must_use]
pub fn incr(cur: Option<&[u8]>, by: &[u8], min: Option<&[u8]>, max: Option<&[u8]>) -> Incr {
    let mut out = vec![0u8; OUT_CAP];
    let mut out_len = 0usize;
    let (cp, cl) = opt_ptr(cur);
    let (lp, ll) = opt_ptr(min);
    let (hp, hl) = opt_ptr(max);
    // SAFETY: every pointer is either null (documented as "absent") or a live
    // slice with its length; `out` has `OUT_CAP` writable bytes and the C side
    // never writes past `out_cap`.
    let rc = unsafe {
        verrou_ld_incr(
            cp,
            cl,
            by.as_ptr().cast(),
            by.len(),
            lp,
            ll,
            hp,
            hl,
            out.as_mut_ptr().cast(),
            OUT_CAP,
            &mut out_len,
        )
    };
    match rc {
        0 => {
            out.truncate(out_len.min(OUT_CAP));
            Incr::Value(out)
        }
        2 => Incr::Overflow,
        _ => Incr::NotFloat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(cur: Option<&str>, by: &str) -> Incr {
        incr(cur.map(str::as_bytes), by.as_bytes(), None, None)
    }

    #[test]
    fn formats_like_redis() {
        assert_eq!(v(None, "1.5"), Incr::Value(b"1.5".to_vec()));
        assert_eq!(v(Some("100"), "1.5"), Incr::Value(b"101.5".to_vec()));
        assert_eq!(v(Some("0.1"), "0.2"), Incr::Value(b"0.3".to_vec()));
        assert_eq!(v(Some("10.5"), "0.1"), Incr::Value(b"10.6".to_vec()));
        assert_eq!(v(Some("5"), "-5"), Incr::Value(b"0".to_vec()));
        assert_eq!(v(Some("1e3"), "0"), Incr::Value(b"1000".to_vec()));
        assert_eq!(v(None, "abc"), Incr::NotFloat);
        assert_eq!(v(None, "inf"), Incr::Overflow);
        assert_eq!(v(None, "nan"), Incr::NotFloat);
        assert_eq!(v(None, " 1"), Incr::NotFloat);
        assert_eq!(incr(None, b"5", None, Some(b"4")), Incr::Overflow);
        assert_eq!(incr(None, b"5", Some(b"6"), None), Incr::Overflow);
        assert!(valid(b"1.5") && valid(b"-3") && valid(b"") && !valid(b"x"));
        assert!(less(b"2", b"1") && !less(b"1", b"2"));
    }
}
