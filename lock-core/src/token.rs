//! Lock tokens (who owns a lease) and fencing tokens (which grant came first).

use std::fmt;

use crate::error::Result;

/// A 128-bit random owner token, fresh from the OS CSPRNG for every
/// acquisition. Never reused, never derived from time or a counter, so a
/// stale holder can never match a newer holder's token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockToken([u8; 16]);

impl LockToken {
    /// Draw a fresh token from the operating system's CSPRNG.
    ///
    /// The OS is read in 4 KiB batches (one system call per 256 tokens)
    /// into a per-thread buffer; each token is 16 bytes of that output
    /// used once and then wiped from the buffer. A forked child discards the
    /// buffer it inherited, so parent and child never share a token.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Backend`] when the OS random source cannot be read.
    pub fn generate() -> Result<Self> {
        pool::draw().map(LockToken)
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
        // ASCII, so never lossy: one allocation and a copy, where collecting
        // chars pushed them one by one (it showed in the Tair profile).
        String::from_utf8_lossy(&self.hex_bytes()).into_owned()
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

/// Batched reads of the OS CSPRNG: a per-thread buffer of its output,
/// refilled when used up or when the process forked since it was filled.
mod pool {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::error::{Error, Result};

    const TOKENS: usize = 256;
    const BYTES: usize = TOKENS * 16;

    struct Pool {
        bytes: [u8; BYTES],
        /// Bytes before this offset were handed out (and wiped).
        used: usize,
        /// The fork generation the buffer was filled in.
        generation: u64,
    }

    thread_local! {
        static POOL: RefCell<Pool> = const {
            RefCell::new(Pool { bytes: [0; BYTES], used: BYTES, generation: 0 })
        };
    }

    /// Bumped in every forked child: a buffer copied by `fork` is stale.
    static FORKS: AtomicU64 = AtomicU64::new(0);

    #[cfg(unix)]
    fn watch_forks() {
        extern "C" fn in_child() {
            FORKS.fetch_add(1, Ordering::Relaxed);
        }
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        REGISTERED.call_once(|| {
            // SAFETY: `in_child` only touches an atomic, which is
            // async-signal-safe, as a fork handler must be.
            let _ = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        });
    }

    #[cfg(not(unix))]
    fn watch_forks() {}

    pub(super) fn draw() -> Result<[u8; 16]> {
        POOL.with(|pool| {
            let mut pool = pool.borrow_mut();
            let generation = FORKS.load(Ordering::Relaxed);
            if pool.used + 16 > BYTES || pool.generation != generation {
                watch_forks();
                getrandom::fill(&mut pool.bytes)
                    .map_err(|e| Error::backend("os-rng", format!("cannot read the OS random source: {e}")))?;
                pool.used = 0;
                pool.generation = FORKS.load(Ordering::Relaxed);
            }
            let start = pool.used;
            let mut out = [0u8; 16];
            out.copy_from_slice(&pool.bytes[start..start + 16]);
            pool.bytes[start..start + 16].fill(0);
            pool.used = start + 16;
            Ok(out)
        })
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

    #[test]
    fn tokens_stay_unique_across_buffer_refills() -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2_000 {
            let t = LockToken::generate()?;
            assert_ne!(t.as_bytes(), &[0u8; 16], "a wiped slot was handed out");
            assert!(seen.insert(t), "token repeated: {t:?}");
        }
        Ok(())
    }
}
