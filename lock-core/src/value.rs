//! The value type of the versioned store, a leaf: errors carry it too
//! ([`crate::Error::Conflict`]).

/// A value with its version.
///
/// Versions of a key change on every write and are not reused for that key,
/// not even after a delete or expiry (no ABA): a compare-and-set against a
/// version read before a delete does not succeed on the recreated key. They are
/// not guaranteed to be consecutive, or ordered across a delete. Backends
/// whose server restarts versions after a delete (Tair) start new keys at a
/// random 62-bit version, so a reuse is possible only with negligible
/// probability; each backend documents its scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The bytes stored.
    pub value: Vec<u8>,
    /// The version of those bytes.
    pub version: u64,
}
