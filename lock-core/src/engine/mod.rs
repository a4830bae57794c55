//! The acquire engine: one attempt step, shared by the in-process fast path
//! ([`Engine::acquire_at_once`]) and the loop that waits or talks to a
//! server ([`Engine::acquire`]), and the two ways of waiting between
//! attempts ([`Pace`]).
//!
//! A lock kind hands the engine its attempt explicitly ([`Attempt`]): the
//! engine knows keys and tokens, the kind knows what else its backend call
//! needs (a permit count, an identity). The engine knows nothing of the
//! manager or its guards: it borrows the manager's backend, lanes and
//! options ([`Engine`]) and hands a grant to the caller's `finish` (the
//! manager makes the guard there).

mod cleanup;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;
use tracing::Instrument;

use self::cleanup::{LeaveOnDrop, ReleaseOnDrop};
use crate::backend::{AcquireOutcome, FairWaiter, LockBackend};
use crate::error::{Error, Result};
use crate::lane::{LaneRef, Lanes};
use crate::lease::Grant;
use crate::options::{Fairness, LockOptions};
use crate::token::LockToken;
use crate::validate::validate_key;

/// One attempt at a grant, as a lock kind makes it: the kind's backend call
/// for `key` under `token`. Must be owner-checked and idempotent per token
/// (a repeated call by a holder refreshes its lease), like
/// [`crate::LockBackend::try_acquire`].
#[async_trait]
pub(crate) trait Attempt: Send + Sync {
    async fn attempt(&self, key: &str, token: &LockToken, ttl: Duration) -> Result<AcquireOutcome>;
}

/// Which token the attempts of one call use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Identity {
    /// A fresh token per attempt: the clean-up of an earlier attempt can
    /// never touch a later grant.
    PerAttempt,
    /// One token for the whole call, so what the backend keeps for a waiter
    /// (a read-write writer's intent, a semaphore reservation) survives the
    /// caller's own retries and is refreshed by each of them. An attempt
    /// whose outcome is unknown is settled by the next one (same token); the
    /// token is released once when the call ends without a grant.
    Kept,
    /// [`Identity::Kept`] with a token the caller already holds under (an
    /// upgradeable read's, for its upgrade or downgrade): released once when
    /// the call ends without a grant, which ends that hold as well.
    Given(LockToken),
}

impl Identity {
    /// One token for the whole call.
    fn is_kept(self) -> bool {
        matches!(self, Identity::Kept | Identity::Given(_))
    }
}

/// What one acquire call asks of the engine.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) key: &'a str,
    pub(crate) options: &'a LockOptions,
    /// `lock` (wait up to the acquire timeout) or `try_lock` (one attempt).
    pub(crate) wait: bool,
    /// A kind's attempt; `None` for the mutex.
    pub(crate) attempt: Option<&'a dyn Attempt>,
    pub(crate) identity: Identity,
    /// Spread retry hints (see [`spread`]): many callers refused by the same
    /// holder (readers held back by a writer's intent) come back at
    /// different instants. Off for the mutex, whose waiters retry right at
    /// the holder's expiry (its local line already keeps them from herding).
    pub(crate) spread: bool,
    /// `key` is a kind's internal name built from keys it checked one by
    /// one (a multi-key lock's encoded set): the limit of one key does not
    /// apply to it.
    pub(crate) key_checked: bool,
}

impl<'a> Call<'a> {
    /// The mutex's call.
    pub(crate) fn mutex(key: &'a str, options: &'a LockOptions, wait: bool) -> Self {
        Call {
            key,
            options,
            wait,
            attempt: None,
            identity: Identity::PerAttempt,
            spread: false,
            key_checked: false,
        }
    }

    /// The error of a waiting call that ran out of time.
    pub(crate) fn timed_out(&self) -> Error {
        Error::Timeout {
            key: self.key.to_owned(),
            waited: self.options.acquire_timeout,
        }
    }
}

/// One attempt's answer, sorted.
enum Answer {
    Granted(Grant),
    /// Granted, but too late to be useful (past its local deadline).
    Late,
    Held(Option<Duration>),
    Failed(Error),
}

/// Sort one attempt's reply: the grant's local deadline is `sent_at` plus
/// the validity (the backend's own, when shorter). A grant whose reply came
/// past that deadline is `Late`; `replied` says whether a reply can be late
/// at all (see [`Engine::acquire_at_once`]).
fn sort(
    reply: Result<AcquireOutcome>,
    key: &str,
    token: LockToken,
    sent_at: Instant,
    validity: Duration,
    replied: Replied,
) -> Answer {
    match reply {
        Ok(AcquireOutcome::Acquired(lease)) => {
            let validity = lease.validity.map_or(validity, |v| v.min(validity));
            let deadline = crate::clock::later(sent_at, validity);
            if replied == Replied::Later && Instant::now() >= deadline {
                return Answer::Late;
            }
            Answer::Granted(Grant {
                key: key.to_owned(),
                token,
                lease,
                sent_at,
                deadline,
            })
        }
        Ok(AcquireOutcome::Held { retry_after }) => Answer::Held(retry_after),
        Err(e) => Answer::Failed(e),
    }
}

/// When an attempt's reply came, for [`sort`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Replied {
    /// After an await (a server's reply, a timeout): it may come past the
    /// grant's deadline, and is then checked against the clock.
    Later,
    /// In the same call, with nothing awaited in between: not checked (one
    /// clock read less). The thread can still be held up right after the
    /// grant, as after any check: the guard's deadline counts from
    /// `sent_at` either way, and `is_lost()` reports a passed one.
    AtOnce,
}

/// How long a grant under `options` is valid from its request on: the TTL
/// less the drift allowance.
pub(crate) fn validity(options: &LockOptions) -> Duration {
    options.ttl.saturating_sub(options.drift(options.ttl))
}

/// What [`Engine::acquire_at_once`] made of a call.
pub(crate) enum AtOnce<G> {
    /// The call is decided.
    Done(Result<Option<G>>),
    /// One attempt made; the call waits in the loop.
    Tried,
    /// Not tried here: the loop makes every attempt.
    NotTried,
}

/// How a waiting call spends the time between attempts.
enum Pace {
    /// Queued on the backend under one waiter id: woken when the key frees,
    /// polling within a third of the claim to keep the entry alive; once
    /// the backend says it is next in line (a zero `retry_after`), polling
    /// on the backoff, counted in `next_polls` from then.
    Fair { waiter: FairWaiter, next_polls: u32 },
    /// This manager's FIFO line for the key (only its head polls), with
    /// jittered backoff capped by the holder's remaining TTL.
    Line {
        lane: Option<LaneRef>,
        turn: Option<OwnedMutexGuard<()>>,
    },
}

/// Spread a retry hint over `[hint, 1.25 * hint)`: callers refused by the
/// same holder do not all come back at the same instant.
fn spread(hint: Duration) -> Duration {
    hint.max(Duration::from_millis(1)) + hint.mul_f64(fastrand::f64() / 4.0)
}

/// What the engine borrows from its manager: the backend, the manager's
/// per-key lines, and its options (per-call options other than these are
/// validated before the first attempt).
#[derive(Clone, Copy)]
pub(crate) struct Engine<'a> {
    backend: &'a Arc<dyn LockBackend>,
    lanes: &'a Lanes,
    defaults: &'a LockOptions,
    /// `defaults`' TTL less its drift, worked out once by the manager (the
    /// drift is floating-point arithmetic).
    default_validity: Duration,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(
        backend: &'a Arc<dyn LockBackend>,
        lanes: &'a Lanes,
        defaults: &'a LockOptions,
        default_validity: Duration,
    ) -> Self {
        Engine {
            backend,
            lanes,
            defaults,
            default_validity,
        }
    }

    /// How long a grant under `options` is valid from its request on.
    fn validity(&self, options: &LockOptions) -> Duration {
        if std::ptr::eq(options, self.defaults) {
            self.default_validity
        } else {
            validity(options)
        }
    }

    /// The first attempt on a backend that answers at once
    /// ([`crate::LockBackend::instant`]), made without a future: it decides
    /// an uncontended mutex call (a grant, or `try_lock`'s "busy") on its
    /// own. Fair calls, kinds, and calls that would queue behind this
    /// manager's waiters for the key go to the loop. A grant goes through
    /// `finish`.
    pub(crate) fn acquire_at_once<G>(&self, call: &Call<'_>, finish: impl FnOnce(Grant) -> Result<G>) -> AtOnce<G> {
        let Some(instant) = self.backend.instant() else {
            return AtOnce::NotTried;
        };
        let (key, options, wait) = (call.key, call.options, call.wait);
        if call.attempt.is_some()
            || call.identity.is_kept()
            || options.fairness != Fairness::Barging
            || (wait && self.lanes.is_waited(key))
        {
            return AtOnce::NotTried;
        }
        if let Err(e) = self.validate(call) {
            return AtOnce::Done(Err(e));
        }
        let sent_at = Instant::now();
        let token = match LockToken::generate() {
            Ok(token) => token,
            Err(e) => return AtOnce::Done(Err(e)),
        };
        let validity = self.validity(options);
        match sort(
            // The backend answers as of `sent_at`: one clock read for both.
            instant.try_acquire_at(key, &token, options.ttl, sent_at),
            key,
            token,
            sent_at,
            validity,
            Replied::AtOnce,
        ) {
            Answer::Granted(grant) => AtOnce::Done(finish(grant).map(Some)),
            Answer::Late => {
                // The thread was held up: give the grant back; the loop tries again.
                if let Err(e) = instant.release_now(key, &token) {
                    tracing::debug!(key, error = %e, "giving back a late grant failed; the TTL will free the key");
                }
                if wait { AtOnce::Tried } else { AtOnce::Done(Ok(None)) }
            }
            Answer::Held(_) if wait => AtOnce::Tried,
            Answer::Held(_) => AtOnce::Done(Ok(None)),
            Answer::Failed(e) if wait && e.is_backend() => AtOnce::Tried,
            Answer::Failed(e) => AtOnce::Done(Err(e)),
        }
    }

    fn validate(&self, call: &Call<'_>) -> Result<()> {
        if !call.key_checked {
            validate_key(call.key)?;
        }
        if !std::ptr::eq(call.options, self.defaults) {
            call.options.validate()?;
        }
        Ok(())
    }

    /// Attempts until a grant, a final error, or the acquire timeout
    /// (`Ok(None)`: `lock` turns it into [`Error::Timeout`]). The grant goes
    /// through `finish` while the call still holds its place in the key's
    /// line. `made` counts the backend calls made (the `lock` span's
    /// `attempts`); each runs in its `verrou.attempt` span.
    pub(crate) async fn acquire<G>(
        &self,
        call: &Call<'_>,
        finish: impl FnOnce(Grant) -> Result<G>,
        made: &mut u32,
    ) -> Result<Option<G>> {
        self.validate(call)?;
        let (backend, key, options) = (self.backend, call.key, call.options);
        let started = Instant::now();
        let give_up = crate::clock::later(started, options.acquire_timeout);
        let mut pace = self.pace(call)?;
        let fair = match &pace {
            Pace::Fair { waiter, .. } => Some(*waiter),
            Pace::Line { .. } => None,
        };
        let mut leave = LeaveOnDrop::new(backend, key, fair, options.op_timeout);
        // The first attempt right away counts as sent at `started` (a little
        // early, which only moves the deadline earlier): one clock read less.
        let mut first_sent_at = (!matches!(pace, Pace::Line { lane: Some(_), .. })).then_some(started);
        if !take_turn(&mut pace, give_up).await {
            return Ok(None);
        }
        let kept = match call.identity {
            Identity::Kept => Some(LockToken::generate()?),
            Identity::Given(token) => Some(token),
            Identity::PerAttempt => None,
        };
        let mut kept_cleanup = kept.map(|token| ReleaseOnDrop::new(backend, key, token, options.op_timeout));
        let mut attempt: u32 = 0;
        loop {
            *made = made.saturating_add(1);
            let sent_at = first_sent_at.take().unwrap_or_else(Instant::now);
            let once = self.attempt_once(call, &pace, kept, sent_at);
            let span = crate::observe::attempt_span(attempt);
            let answer = if span.is_disabled() {
                once.await?
            } else {
                once.instrument(span).await?
            };
            let (retry_after, failure) = match answer {
                Answer::Granted(grant) => {
                    leave.disarm();
                    if let Some(cleanup) = &mut kept_cleanup {
                        cleanup.disarm();
                    }
                    return finish(grant).map(Some);
                }
                Answer::Held(hint) => (hint, None),
                Answer::Late => (None, None),
                Answer::Failed(e) => (None, Some(e)),
            };
            let now = Instant::now();
            if !call.wait || now >= give_up {
                return match failure {
                    Some(e) => Err(e),
                    None if call.wait => Err(call.timed_out()),
                    None => Ok(None),
                };
            }
            if self
                .pause(call, &mut pace, attempt, retry_after, failure.is_some(), give_up)
                .await?
            {
                attempt = attempt.saturating_add(1);
            }
        }
    }

    /// One attempt: the backend call with its timeout and its clean-up guard.
    /// A final error (not a backend failure) ends the call.
    async fn attempt_once(
        &self,
        call: &Call<'_>,
        pace: &Pace,
        kept: Option<LockToken>,
        sent_at: Instant,
    ) -> Result<Answer> {
        let (backend, key, options) = (self.backend, call.key, call.options);
        let ttl = options.ttl;
        let validity = self.validity(options);
        let token = match kept {
            Some(token) => token,
            None => LockToken::generate()?,
        };
        // A kept token is cleaned up once, by the call.
        let mut cleanup = kept
            .is_none()
            .then(|| ReleaseOnDrop::new(backend, key, token, options.op_timeout));
        let limit = options.op_timeout.min(validity);
        let reply = match (call.attempt, pace, backend.instant()) {
            (Some(kind), _, _) => tokio::time::timeout(limit, kind.attempt(key, &token, ttl)).await,
            (None, Pace::Fair { waiter, .. }, _) => {
                tokio::time::timeout(limit, backend.try_acquire_fair(key, &token, ttl, waiter)).await
            }
            // Answered at once: no future to box, no timeout to arm.
            (None, Pace::Line { .. }, Some(instant)) => Ok(instant.try_acquire_at(key, &token, ttl, sent_at)),
            (None, Pace::Line { .. }, None) => tokio::time::timeout(limit, backend.try_acquire(key, &token, ttl)).await,
        };
        let reply = reply.unwrap_or_else(|_| {
            Err(Error::outcome_unknown(
                backend.capabilities().name,
                format!("acquire timed out after {limit:?}"),
            ))
        });
        let answer = sort(reply, key, token, sent_at, validity, Replied::Later);
        let settled = match &answer {
            Answer::Granted(_) | Answer::Held(_) => true,
            Answer::Late => false,
            Answer::Failed(e) => !e.is_outcome_unknown(),
        };
        if settled && let Some(cleanup) = &mut cleanup {
            cleanup.disarm();
        }
        match answer {
            Answer::Failed(e) if !e.is_backend() => Err(e),
            answer => Ok(answer),
        }
    }

    /// The wait policy of `call`.
    fn pace(&self, call: &Call<'_>) -> Result<Pace> {
        Ok(match call.options.fairness {
            Fairness::Fifo { .. } if call.attempt.is_some() => {
                return Err(Error::Unsupported {
                    backend: self.backend.capabilities().name,
                    what: "fair mode for lock kinds".to_owned(),
                });
            }
            Fairness::Fifo { claim } => Pace::Fair {
                waiter: FairWaiter::new(LockToken::generate()?, claim),
                next_polls: 0,
            },
            // Waiters of this manager queue per key in FIFO order; only the
            // head polls. A caller that finds no line tries at once (the
            // uncontended path allocates no lane) and joins the line only
            // when it must wait. try_lock skips the line.
            Fairness::Barging => Pace::Line {
                lane: if call.wait { self.lanes.existing(call.key) } else { None },
                turn: None,
            },
        })
    }

    /// Wait before the next attempt, as `pace` says. `false` when the wait
    /// was for this manager's line (the next attempt comes at once and does
    /// not count as a retry).
    async fn pause(
        &self,
        call: &Call<'_>,
        pace: &mut Pace,
        attempt: u32,
        retry_after: Option<Duration>,
        failed: bool,
        give_up: Instant,
    ) -> Result<bool> {
        let (backend, key, options) = (self.backend, call.key, call.options);
        let left = give_up.saturating_duration_since(Instant::now());
        match pace {
            Pace::Fair { waiter, next_polls } => {
                let mut delay = (waiter.claim / 3).min(left);
                if failed {
                    delay = delay.min(options.backoff.delay(attempt));
                }
                match retry_after {
                    // Next in line on a backend that may not wake it: poll
                    // as a barging waiter would, the backoff restarting
                    // when it became the head.
                    Some(Duration::ZERO) => {
                        delay = delay.min(options.backoff.delay(*next_polls));
                        *next_polls = next_polls.saturating_add(1);
                    }
                    Some(hint) => delay = delay.min(hint.max(Duration::from_millis(1))),
                    None => {}
                }
                backend.wait_fair(key, waiter, delay).await;
            }
            Pace::Line { lane, turn } => {
                if lane.is_none() {
                    // First wait: join the line. If others are ahead of us,
                    // our turn comes when they are done: try again at once.
                    let joined = self.lanes.get(key);
                    let queued = match joined.turn.clone().try_lock_owned() {
                        Ok(t) => {
                            *turn = Some(t);
                            false
                        }
                        Err(_) => match tokio::time::timeout_at(give_up, joined.turn.clone().lock_owned()).await {
                            Ok(t) => {
                                *turn = Some(t);
                                true
                            }
                            Err(_) => return Err(call.timed_out()),
                        },
                    };
                    *lane = Some(joined);
                    if queued {
                        return Ok(false);
                    }
                }
                let mut delay = options.backoff.delay(attempt);
                if let Some(hint) = retry_after {
                    // No point sleeping past the holder's expiry.
                    delay = delay.min(if call.spread {
                        spread(hint)
                    } else {
                        hint.max(Duration::from_millis(1))
                    });
                }
                if call.identity.is_kept() {
                    // Refresh what the backend keeps for this waiter well
                    // within its TTL.
                    delay = delay.min(options.ttl / 3);
                }
                delay = delay.min(left);
                match lane {
                    Some(lane) => tokio::select! {
                        () = backend.wait_for_release(key, delay) => {}
                        () = lane.released.notified() => {}
                    },
                    None => backend.wait_for_release(key, delay).await,
                }
            }
        }
        Ok(true)
    }
}

/// Queue behind this manager's waiters for the key, if a line exists:
/// `false` when the acquire timeout passed first.
async fn take_turn(pace: &mut Pace, give_up: Instant) -> bool {
    if let Pace::Line { lane: Some(lane), turn } = pace {
        match tokio::time::timeout_at(give_up, lane.turn.clone().lock_owned()).await {
            Ok(t) => *turn = Some(t),
            Err(_) => return false,
        }
    }
    true
}
