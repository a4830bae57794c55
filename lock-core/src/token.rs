//! Lock tokens (who owns a lease) and fencing tokens (which grant came first).

use std::fmt;

use crate::error::{Error, Result};

/// A 128-bit random owner token, fresh from the OS CSPRNG for every
/// acquisition. Never reused, never derived from time or a counter, so a
/// stale holder can never match a newer holder's token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockToken([u8; 16]);

impl LockToken {
    /// Draw a fresh token from the operating system's CSPRNG.
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::backend("os-rng", format!("cannot read the OS random source: {e}")))?;
        Ok(LockToken(bytes))
    }

    /// Build a token from raw bytes (tests, or tokens read back from a server).
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        LockToken(bytes)
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Lower-case hex, 32 characters: the form stored on servers.
    pub fn to_hex(&self) -> String {
        self.hex_bytes().iter().map(|&c| char::from(c)).collect()
    }

    /// [`LockToken::to_hex`] as ASCII bytes, without allocating (hot paths).
    pub fn hex_bytes(&self) -> [u8; 32] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 32];
        for (pair, b) in out.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0x0f)];
        }
        out
    }
}

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockToken({})", self.to_hex())
    }
}

/// A number that strictly increases with every grant of the same key, on
/// backends that support it ([`crate::Capabilities::fencing_tokens`]). Pass it
/// to the protected resource so it can reject writes from stale holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub u64);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_and_hex() -> Result<()> {
        let a = LockToken::generate()?;
        let b = LockToken::generate()?;
        assert_ne!(a, b);
        assert_eq!(a.to_hex().len(), 32);
        assert!(a.to_hex().bytes().all(|c| c.is_ascii_hexdigit()));
        Ok(())
    }
}
