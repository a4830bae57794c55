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
