//! The redaction property the `redact_url` fuzz target checks, and the
//! facade's tests replay on its corpus: a redacted URL does not depend on any
//! byte of its user-info, however malformed the URL.

use lock_core::raw::redact_url;

/// Read `data` as `USERINFO` and `REST` separated by the first newline and
/// check that `redact_url("redis://USERINFO@REST")` equals the redaction of
/// the same URL with the user-info replaced: no byte of it can be shown.
/// Input that is not UTF-8 or has no newline passes.
///
/// # Errors
/// The two redactions, when they differ.
pub fn user_info_is_hidden(data: &[u8]) -> Result<(), String> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(());
    };
    let Some((user_info, rest)) = text.split_once('\n') else {
        return Ok(());
    };
    let with_secret = redact_url(&format!("redis://{user_info}@{rest}"));
    let without = redact_url(&format!("redis://x@{rest}"));
    if with_secret == without {
        Ok(())
    } else {
        Err(format!(
            "the redaction depends on the user-info {user_info:?}: {with_secret:?} vs {without:?}"
        ))
    }
}

/// The marker [`config_hides_password`] wraps a password in.
const MARK: &str = "Zq9";

/// Read `data` as `PASSWORD` and `REST` separated by the first newline, and
/// parse `SCHEME://user:Zq9PASSWORDZq9@REST` with `C` for each of its
/// schemes: neither the error nor the config's `Debug` and description may
/// show a piece of the password next to a marker (a password holding `/`,
/// `?`, `#` or `@` must not be cut into a "host" or a "path" that a message
/// quotes). Input that is not UTF-8, has no newline, or has the marker in
/// `REST` passes.
///
/// # Errors
/// What was shown, when it holds the marker.
pub fn config_hides_password<C: lock_core::raw::BackendConfig>(data: &[u8]) -> Result<(), String> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(());
    };
    let Some((password, rest)) = text.split_once('\n') else {
        return Ok(());
    };
    if rest.contains(MARK) {
        return Ok(());
    }
    for scheme in C::SCHEMES {
        let url = format!("{scheme}://user:{MARK}{password}{MARK}@{rest}");
        let shown = match C::from_url(&url) {
            Ok(config) => format!("{config:?} {}", config.description()),
            Err(e) => format!("{e} {e:?}"),
        };
        if shown.contains(MARK) {
            return Err(format!("{url:?} shows its password: {shown}"));
        }
    }
    Ok(())
}
