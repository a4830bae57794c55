//! Acquires whose `SET NX` may still run on the server, and the connection
//! each was sent on, so that their clean-up release is ordered after them.
//!
//! A `SET NX` can time out locally while it is still queued: behind another
//! caller's blocking `WAIT` on a shared write connection, or in a slow
//! server's socket buffer. The manager then releases the token to clean up.
//! Sent on another connection, that `CAD` can run first, answer "missing",
//! and the queued `SET NX` then takes the key for a full TTL with nobody
//! holding it. Redis runs one connection's commands in the order sent, so
//! the clean-up goes out on the acquire's own connection. If fred replaced
//! that connection meanwhile (it closes one that does not answer within
//! twice the command timeout plus the `WAIT` timeout), the order is no
//! longer guaranteed: the server may read the old socket's `SET NX` late.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lock_core::LockToken;
use tokio::time::Instant;

use crate::conn::OptionsClient;

/// Fewest entries before expired ones are swept (amortised, as the map
/// doubles).
const MIN_SWEEP: usize = 64;

struct Entry {
    client: OptionsClient,
    /// After this the key has expired whatever happened: forget the entry.
    until: Instant,
}

#[derive(Default)]
struct Entries {
    map: HashMap<LockToken, Entry>,
    sweep_at: usize,
}

/// The registry; one per backend (clones share it). Tokens are 128-bit
/// random values, unique per acquire: the token alone is the key.
#[derive(Default)]
pub(crate) struct Unsettled {
    entries: Mutex<Entries>,
}

impl Unsettled {
    fn entries(&self) -> MutexGuard<'_, Entries> {
        // Every update is a single map operation: a poisoned map is consistent.
        match self.entries.lock() {
            Ok(e) => e,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The acquire of `token` on `client` ended without a known outcome.
    fn insert(&self, token: LockToken, client: OptionsClient, keep_for: Duration) {
        let now = Instant::now();
        let mut entries = self.entries();
        entries.map.insert(
            token,
            Entry {
                client,
                until: now + keep_for,
            },
        );
        if entries.map.len() >= entries.sweep_at {
            entries.map.retain(|_, e| e.until > now);
            entries.sweep_at = (entries.map.len() * 2).max(MIN_SWEEP);
        }
    }

    /// The connection `token`'s unsettled acquire went out on, if any
    /// (forgotten: one release is enough).
    pub(crate) fn take(&self, token: &LockToken) -> Option<OptionsClient> {
        let mut entries = self.entries();
        if entries.map.is_empty() {
            return None;
        }
        entries
            .map
            .remove(token)
            .filter(|e| e.until > Instant::now())
            .map(|e| e.client)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().map.len()
    }
}

/// Held across an acquire's `SET NX`: unless [`Pending::settle`]d (the
/// server answered), dropping it (an error, or the caller cancelled)
/// records the connection for the clean-up.
pub(crate) struct Pending<'a> {
    registry: &'a Unsettled,
    token: LockToken,
    client: &'a OptionsClient,
    keep_for: Duration,
    settled: bool,
}

impl<'a> Pending<'a> {
    /// `keep_for`: how long the `SET NX` could still matter (its TTL plus
    /// the time it may still be queued).
    pub(crate) fn new(
        registry: &'a Unsettled,
        token: LockToken,
        client: &'a OptionsClient,
        keep_for: Duration,
    ) -> Self {
        Pending {
            registry,
            token,
            client,
            keep_for,
            settled: false,
        }
    }

    /// The server answered: the write's outcome is known.
    pub(crate) fn settle(mut self) {
        self.settled = true;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.registry.insert(self.token, self.client.clone(), self.keep_for);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::clients::Client;
    use fred::interfaces::ClientLike;

    fn client() -> OptionsClient {
        Client::default().with_options(&crate::conn::command_options(Duration::from_secs(1)))
    }

    #[tokio::test(start_paused = true)]
    async fn only_unsettled_acquires_are_kept_until_released_or_expired() {
        let registry = Unsettled::default();
        let conn = client();
        let (a, b, c) = (
            LockToken::from_bytes([1; 16]),
            LockToken::from_bytes([2; 16]),
            LockToken::from_bytes([3; 16]),
        );
        Pending::new(&registry, a, &conn, Duration::from_secs(1)).settle();
        drop(Pending::new(&registry, b, &conn, Duration::from_secs(1)));
        drop(Pending::new(&registry, c, &conn, Duration::from_secs(1)));
        assert!(registry.take(&a).is_none(), "settled: any connection will do");
        assert!(registry.take(&b).is_some());
        assert!(registry.take(&b).is_none(), "taken once");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(registry.take(&c).is_none(), "the key has expired by now");
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept() {
        let registry = Unsettled::default();
        let conn = client();
        for i in 0..MIN_SWEEP - 1 {
            let token = LockToken::from_bytes([u8::try_from(i).expect("small"); 16]);
            drop(Pending::new(&registry, token, &conn, Duration::from_secs(1)));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(Pending::new(
            &registry,
            LockToken::from_bytes([255; 16]),
            &conn,
            Duration::from_secs(1),
        ));
        assert_eq!(registry.len(), 1, "only the live entry is left");
    }
}
