//! The versioned store on the bucket's revisions: a value's version is the
//! stream sequence that wrote it (bucket-wide, only growing, never reused
//! after a delete), and every write is one publish expecting the version
//! it replaces. Values live under their own subjects (`v.<key>`), apart
//! from locks.
//!
//! TTLs are whole seconds, rounded up. [`Expiry::Keep`] writes the time the
//! replaced value had left, rounded up to a whole second (so a value may
//! outlive its first TTL by up to a second per kept write); the value's TTL
//! and age come from the read that gave the version (`get`, or the failed
//! write's read), else from one more read.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use lock_core::{CasOutcome, CreateOutcome, DeleteOutcome, Expiry, Result, Versioned, VersionedStore};

use crate::error::NotStored;
use crate::kv::{Entry, Op, busy, ttl_secs};
use crate::{Inner, NatsBackend};

/// What [`Expiry::Keep`] needs of a value read: its TTL and when it was
/// stored, by (subject, version).
#[derive(Default)]
pub(crate) struct Kept {
    map: std::sync::Mutex<KeptMap>,
}

/// (subject, version) → (TTL in seconds, when stored).
type KeptMap = HashMap<(String, u64), (Option<u64>, time::OffsetDateTime)>;

/// Versions remembered at most (the map is emptied when full: a miss costs
/// one read).
const KEPT_MAX: usize = 4096;

impl Kept {
    fn lock(&self) -> std::sync::MutexGuard<'_, KeptMap> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, subject: &str, e: &Entry) {
        let mut map = self.lock();
        if map.len() >= KEPT_MAX {
            map.clear();
        }
        map.insert((subject.to_owned(), e.revision), (e.ttl_secs, e.stored_at));
    }

    fn take(&self, subject: &str, version: u64) -> Option<(Option<u64>, time::OffsetDateTime)> {
        self.lock().remove(&(subject.to_owned(), version))
    }
}

/// The TTL a `Keep` write sends: what is left of `ttl` since `stored_at`,
/// rounded up, at least one second; none for a value without a TTL.
fn kept_ttl(ttl: Option<u64>, stored_at: time::OffsetDateTime) -> Option<u64> {
    let ttl = ttl?;
    let age = (time::OffsetDateTime::now_utc() - stored_at).as_seconds_f64().max(0.0);
    // Whole seconds left, rounded up (the age only shortens it).
    let left = (ttl as f64 - age).ceil();
    Some(if left < 1.0 { 1 } else { left as u64 })
}

impl Inner {
    fn value_subject(&self, key: &str) -> Result<String> {
        self.subject_of("v", key)
    }

    fn versioned(e: Entry) -> Versioned {
        Versioned {
            value: e.value.to_vec(),
            version: e.revision,
        }
    }

    /// The live value of `subject`, remembered for a later `Keep` write.
    async fn read_value(&self, subject: &str) -> Result<Option<Entry>> {
        let e = self.last(subject).await?.filter(|e| e.live);
        if let Some(e) = &e {
            self.kept.note(subject, e);
        }
        Ok(e)
    }
}

#[async_trait]
impl VersionedStore for NatsBackend {
    async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        let subject = self.inner.value_subject(key)?;
        Ok(self.inner.read_value(&subject).await?.map(Inner::versioned))
    }

    async fn create(&self, key: &str, value: &[u8], expiry: Expiry) -> Result<CreateOutcome> {
        let subject = self.inner.value_subject(key)?;
        expiry.validate()?;
        let ttl = match expiry {
            Expiry::After(t) => Some(ttl_secs(t, "expiry")?),
            _ => None,
        };
        let value = Bytes::copy_from_slice(value);
        let mut expected = 0;
        for round in 0..12 {
            match self
                .inner
                .write(&subject, Op::Put, value.clone(), expected, ttl, "create")
                .await
            {
                Ok(version) => return Ok(CreateOutcome::Created { version }),
                Err(NotStored::Failed(e)) => return Err(e),
                Err(NotStored::WrongLast) => {}
            }
            // Refused while the key is as expected: other writes of it in
            // flight on a replicated stream (see `lock::ROUNDS`).
            match self.inner.last(&subject).await? {
                None if expected == 0 => crate::lock::back_off(round).await,
                None => expected = 0,
                Some(e) if !e.live && e.revision == expected => crate::lock::back_off(round).await,
                Some(e) if !e.live => expected = e.revision,
                Some(e) => {
                    self.inner.kept.note(&subject, &e);
                    return Ok(CreateOutcome::Exists);
                }
            }
        }
        Err(busy("create"))
    }

    async fn compare_and_set(&self, key: &str, expected: u64, value: &[u8], expiry: Expiry) -> Result<CasOutcome> {
        let subject = self.inner.value_subject(key)?;
        expiry.validate()?;
        if expected == 0 {
            // No value has version 0 (and expecting 0 would create one).
            return Ok(match self.inner.read_value(&subject).await? {
                Some(e) => CasOutcome::Conflict(Inner::versioned(e)),
                None => CasOutcome::Missing,
            });
        }
        let ttl = match expiry {
            Expiry::After(t) => Some(ttl_secs(t, "expiry")?),
            Expiry::Persist => None,
            _ => {
                let known = match self.inner.kept.take(&subject, expected) {
                    Some(k) => Some(k),
                    None => match self.inner.read_value(&subject).await? {
                        Some(e) if e.revision == expected => Some((e.ttl_secs, e.stored_at)),
                        Some(e) => return Ok(CasOutcome::Conflict(Inner::versioned(e))),
                        None => return Ok(CasOutcome::Missing),
                    },
                };
                known.and_then(|(ttl, at)| kept_ttl(ttl, at))
            }
        };
        let value = Bytes::copy_from_slice(value);
        for round in 0..crate::lock::ROUNDS {
            match self
                .inner
                .write(&subject, Op::Put, value.clone(), expected, ttl, "compare-and-set")
                .await
            {
                Ok(version) => return Ok(CasOutcome::Written { version }),
                Err(NotStored::Failed(e)) => return Err(e),
                Err(NotStored::WrongLast) => match self.inner.read_value(&subject).await? {
                    // Refused by another write in flight (see `lock::ROUNDS`).
                    Some(e) if e.revision == expected => crate::lock::back_off(round).await,
                    Some(e) => return Ok(CasOutcome::Conflict(Inner::versioned(e))),
                    None => return Ok(CasOutcome::Missing),
                },
            }
        }
        Err(busy("compare-and-set"))
    }

    async fn delete(&self, key: &str, expected: u64) -> Result<DeleteOutcome> {
        let subject = self.inner.value_subject(key)?;
        if expected == 0 {
            // No value has version 0.
            return Ok(match self.inner.read_value(&subject).await? {
                Some(e) => DeleteOutcome::Conflict {
                    current_version: e.revision,
                },
                None => DeleteOutcome::Missing,
            });
        }
        for round in 0..crate::lock::ROUNDS {
            match self.inner.delete_marker(&subject, expected, "delete").await {
                Ok(_) => return Ok(DeleteOutcome::Deleted),
                Err(NotStored::Failed(e)) => return Err(e),
                Err(NotStored::WrongLast) => match self.inner.read_value(&subject).await? {
                    Some(e) if e.revision == expected => crate::lock::back_off(round).await,
                    Some(e) => {
                        return Ok(DeleteOutcome::Conflict {
                            current_version: e.revision,
                        });
                    }
                    None => return Ok(DeleteOutcome::Missing),
                },
            }
        }
        Err(busy("delete"))
    }

    fn name(&self) -> &str {
        crate::error::NAME
    }
}
