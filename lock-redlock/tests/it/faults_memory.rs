//! Redlock under node faults, deterministically: memory nodes behind the
//! fault-injecting wrapper, tokio's paused clock.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    Capabilities, Error, LockBackend, LockManager, LockOptions, LockToken, LossReason, NodeOutcome, Renewal,
};

use lock_core::raw::async_trait;

use lock_core::{AcquireOutcome, ReleaseOutcome, RenewOutcome};
use lock_memory::MemoryBackend;
use lock_redlock::{Redlock, RedlockOptions};
use lock_testkit::{Fault, FaultControl, FaultyBackend};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(3);
/// The default per-node timeout for [`TTL`]: 0.05 × 3 s.
const NODE_TIMEOUT: Duration = Duration::from_millis(150);

/// N memory nodes, each behind its own fault switch.
struct Nodes {
    memory: Vec<MemoryBackend>,
    controls: Vec<FaultControl>,
    faulty: Vec<Arc<dyn LockBackend>>,
}

impl Nodes {
    fn new(n: usize) -> Self {
        let memory: Vec<MemoryBackend> = (0..n).map(|_| MemoryBackend::new()).collect();
        let (faulty, controls) = memory
            .iter()
            .map(|m| {
                let (backend, control) = FaultyBackend::new(Arc::new(m.clone()));
                (Arc::new(backend) as Arc<dyn LockBackend>, control)
            })
            .unzip();
        Nodes {
            memory,
            controls,
            faulty,
        }
    }

    /// A client whose calls go through the fault switches.
    fn client(&self) -> Redlock {
        self.client_with(RedlockOptions::default())
    }

    fn client_with(&self, options: RedlockOptions) -> Redlock {
        Redlock::with_options(self.faulty.clone(), options).expect("valid redlock")
    }

    /// A second client that reaches the nodes directly (no faults).
    fn healthy_client(&self) -> Redlock {
        Redlock::new(self.memory.iter().map(|m| Arc::new(m.clone()) as Arc<dyn LockBackend>)).expect("valid redlock")
    }

    fn fault(&self, nodes: &[usize], fault: Fault) {
        for &i in nodes {
            self.controls[i].set(fault);
        }
    }

    /// Which nodes hold `key` (any token).
    fn holding(&self, key: &str) -> Vec<usize> {
        (0..self.memory.len())
            .filter(|&i| self.memory[i].lock_ttl(key).is_some())
            .collect()
    }

    /// The node "restarts without its data": the key is gone there.
    async fn lose_key(&self, i: usize, key: &str, token: &LockToken) {
        assert_eq!(
            self.memory[i].release(key, token).await.expect("release"),
            ReleaseOutcome::Released
        );
    }
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

fn manager(backend: impl LockBackend, options: LockOptions) -> LockManager {
    LockManager::with_options(backend, options).expect("valid options")
}

fn unreachable(err: Error) -> (usize, usize, Vec<NodeOutcome>) {
    match err {
        Error::QuorumUnreachable {
            granted,
            required,
            nodes,
        } => (granted, required, nodes.0.into_iter().map(|(_, o)| o).collect()),
        other => panic!("expected QuorumUnreachable, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn one_failing_node_of_three_still_acquires_renews_and_releases() {
    let nodes = Nodes::new(3);
    nodes.fault(&[2], Fault::Fail);
    let locks = manager(nodes.client(), LockOptions::with_ttl(TTL));
    let guard = locks.lock("k").await.expect("lock with 2 of 3");
    assert_eq!(nodes.holding("k"), vec![0, 1]);
    tokio::time::sleep(TTL * 5).await;
    assert!(!guard.is_lost(), "renewals reach 2 of 3");
    let other = manager(nodes.healthy_client(), LockOptions::with_ttl(TTL));
    assert!(other.try_lock("k").await.expect("try_lock").is_none());
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert!(nodes.holding("k").is_empty());
}

#[tokio::test(start_paused = true)]
async fn one_hanging_node_of_three_costs_no_time() {
    let nodes = Nodes::new(3);
    nodes.fault(&[1], Fault::Hang);
    let locks = manager(nodes.client(), LockOptions::with_ttl(TTL));
    let started = Instant::now();
    let guard = locks.lock("k").await.expect("lock with 2 of 3");
    assert_eq!(started.elapsed(), Duration::ZERO, "the quorum answered at once");
    tokio::time::sleep(TTL * 5).await;
    assert!(!guard.is_lost());
    let started = Instant::now();
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "release does not wait for the hung node"
    );
}

#[tokio::test(start_paused = true)]
async fn two_failing_nodes_of_three_are_quorum_unreachable_and_leave_no_key() {
    let nodes = Nodes::new(3);
    nodes.fault(&[1, 2], Fault::Fail);
    let redlock = nodes.client();
    let err = redlock.try_acquire("k", &token(), TTL).await.expect_err("no quorum");
    assert!(err.is_backend() && !err.is_outcome_unknown(), "{err}");
    let message = err.to_string();
    let (granted, required, outcomes) = unreachable(err);
    assert_eq!((granted, required), (1, 2));
    assert_eq!(outcomes[0], NodeOutcome::Granted);
    assert!(matches!(outcomes[1], NodeOutcome::Failed(_)));
    assert!(message.contains("node0 (faulty(memory)): granted"), "{message}");
    assert!(
        nodes.holding("k").is_empty(),
        "the partial grant was given back before returning"
    );
}

#[tokio::test(start_paused = true)]
async fn two_hanging_nodes_of_three_fail_within_the_node_timeout() {
    let nodes = Nodes::new(3);
    nodes.fault(&[0, 2], Fault::Hang);
    let started = Instant::now();
    let err = nodes
        .client()
        .try_acquire("k", &token(), TTL)
        .await
        .expect_err("no quorum");
    assert_eq!(
        started.elapsed(),
        NODE_TIMEOUT,
        "paused clock: exactly the per-node timeout"
    );
    let (granted, _, outcomes) = unreachable(err);
    assert_eq!(granted, 1);
    assert_eq!(
        outcomes,
        vec![NodeOutcome::TimedOut, NodeOutcome::Granted, NodeOutcome::TimedOut]
    );
    assert!(nodes.holding("k").is_empty());

    // Through the manager: retried with backoff, the last error surfaces.
    let locks = manager(
        nodes.client(),
        LockOptions::with_ttl(TTL).acquire_timeout(Duration::from_secs(1)),
    );
    let err = locks.lock("k").await.expect_err("no quorum");
    assert!(matches!(err, Error::QuorumUnreachable { .. }), "{err}");
    assert!(nodes.holding("k").is_empty());
}

#[tokio::test(start_paused = true)]
async fn fails_fast_and_releases_a_late_grant() {
    let nodes = Nodes::new(3);
    nodes.controls[0].set_latency(Duration::from_millis(50));
    nodes.fault(&[1, 2], Fault::Fail);
    let started = Instant::now();
    let err = nodes
        .client()
        .try_acquire("k", &token(), TTL)
        .await
        .expect_err("no quorum");
    assert_eq!(started.elapsed(), Duration::ZERO, "decided without waiting for node 0");
    let (granted, _, outcomes) = unreachable(err);
    assert_eq!(granted, 0);
    assert!(matches!(&outcomes[0], NodeOutcome::NoReply));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(nodes.holding("k"), vec![0], "node 0 granted late");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(nodes.holding("k").is_empty(), "and the late grant was released");
}

#[tokio::test(start_paused = true)]
async fn contention_is_held_not_an_error_and_partial_grants_are_given_back() {
    let nodes = Nodes::new(3);
    let holder = token();
    // Another client holds nodes 0 and 1 (with different remaining TTLs).
    assert!(matches!(
        nodes.memory[0].try_acquire("k", &holder, Duration::from_secs(1)).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    assert!(matches!(
        nodes.memory[1].try_acquire("k", &holder, Duration::from_secs(2)).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    let outcome = nodes.client().try_acquire("k", &token(), TTL).await.expect("held");
    assert_eq!(
        outcome,
        AcquireOutcome::Held {
            retry_after: Some(Duration::from_secs(1))
        },
        "one holder's key must expire before 2 of 3 are free"
    );
    assert_eq!(nodes.holding("k"), vec![0, 1], "node 2's grant was given back");

    // Refusal plus a failure: the failure could have made the difference.
    nodes.fault(&[2], Fault::Fail);
    let mine = token();
    nodes.memory[1].release("k", &holder).await.expect("release");
    let err = nodes
        .client()
        .try_acquire("k", &mine, TTL)
        .await
        .expect_err("no quorum");
    let (granted, _, outcomes) = unreachable(err);
    assert_eq!(granted, 1);
    assert_eq!(outcomes[0], NodeOutcome::HeldByOther);
    assert_eq!(nodes.holding("k"), vec![0]);
}

#[tokio::test(start_paused = true)]
async fn a_slow_refusal_is_contention_not_an_outage() {
    let nodes = Nodes::new(3);
    let theirs = token();
    let holder = nodes.healthy_client();
    assert!(matches!(
        holder.try_acquire("k", &theirs, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    nodes.fault(&[1], Fault::Fail);
    nodes.controls[2].set_latency(Duration::from_millis(50));
    let started = Instant::now();
    let outcome = nodes.client().try_acquire("k", &token(), TTL).await.expect("held");
    assert!(matches!(outcome, AcquireOutcome::Held { .. }), "{outcome:?}");
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(50),
        "waited for node 2 only because its answer decided contention vs outage"
    );
    let locks = manager(nodes.client(), LockOptions::with_ttl(TTL));
    assert!(locks.try_lock("k").await.expect("try_lock is not an error").is_none());
}

#[tokio::test(start_paused = true)]
async fn lease_validity_is_ttl_minus_drift_and_there_is_no_fencing() {
    let nodes = Nodes::new(3);
    let redlock = nodes.client();
    let caps = redlock.capabilities();
    assert!(!caps.fencing_tokens, "redlock offers no fencing tokens");
    assert_eq!(caps.name, "redlock");
    assert!(caps.release_notifications);
    match redlock.try_acquire("k", &token(), TTL).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => {
            assert_eq!(lease.validity, Some(TTL - Duration::from_millis(32)));
            assert_eq!(lease.fencing_token, None);
        }
        other => panic!("expected a grant, got {other:?}"),
    }
    let locks = manager(nodes.healthy_client(), LockOptions::with_ttl(TTL));
    let guard = locks.lock("other").await.expect("lock");
    assert_eq!(guard.fencing_token(), None);
}

/// A node whose reply arrives after the clock jumped forward by `jump`
/// without the caller's timers getting a chance to run first.
struct SlowReply {
    inner: MemoryBackend,
    jump: Duration,
}

#[async_trait]
impl LockBackend for SlowReply {
    async fn try_acquire(&self, key: &str, token: &LockToken, ttl: Duration) -> lock_core::Result<AcquireOutcome> {
        tokio::time::advance(self.jump).await;
        self.inner.try_acquire(key, token, ttl).await
    }
    async fn release(&self, key: &str, token: &LockToken) -> lock_core::Result<ReleaseOutcome> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &str, token: &LockToken, ttl: Duration) -> lock_core::Result<RenewOutcome> {
        self.inner.renew(key, token, ttl).await
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[tokio::test(start_paused = true)]
async fn a_quorum_reached_after_the_validity_is_given_back() {
    let ttl = Duration::from_millis(100);
    let memory: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new()).collect();
    let nodes: Vec<Arc<dyn LockBackend>> = memory
        .iter()
        .map(|m| {
            Arc::new(SlowReply {
                inner: m.clone(),
                jump: Duration::from_millis(98), // validity: 100 − (1 + 2) = 97 ms
            }) as _
        })
        .collect();
    let redlock = Redlock::new(nodes).expect("redlock");
    let err = redlock.try_acquire("k", &token(), ttl).await.expect_err("too late");
    assert!(
        matches!(&err, Error::Backend { outcome_unknown: false, message, .. } if message.contains("past the validity")),
        "{err:?}"
    );
    assert!(memory.iter().all(|m| m.lock_ttl("k").is_none()), "grants given back");
}

#[tokio::test(start_paused = true)]
async fn late_grants_after_success_are_kept_unless_released() {
    let nodes = Nodes::new(3);
    nodes.controls[2].set_latency(Duration::from_millis(50));
    let redlock = nodes.client();

    let kept = token();
    assert!(matches!(
        redlock.try_acquire("a", &kept, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    assert_eq!(nodes.holding("a"), vec![0, 1], "returned on the quorum");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(nodes.holding("a"), vec![0, 1, 2], "the late grant is ours and kept");

    let released = token();
    assert!(matches!(
        redlock.try_acquire("b", &released, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    assert_eq!(
        redlock.release("b", &released).await.expect("release"),
        ReleaseOutcome::Released
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        nodes.holding("b").is_empty(),
        "a grant that lands after the release is deleted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_cleans_up_what_the_nodes_wrote() {
    let nodes = Nodes::new(3);
    for c in &nodes.controls {
        c.set_latency(Duration::from_millis(50));
    }
    nodes.controls[0].set_latency(Duration::ZERO);
    let redlock = nodes.client();
    let attempt = tokio::time::timeout(Duration::from_millis(10), redlock.try_acquire("k", &token(), TTL)).await;
    assert!(attempt.is_err(), "dropped before the quorum");
    assert_eq!(nodes.holding("k"), vec![0]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(nodes.holding("k").is_empty(), "answered and late grants released");
}

#[tokio::test(start_paused = true)]
async fn lost_replies_are_cleaned_up() {
    let nodes = Nodes::new(3);
    nodes.fault(&[0, 1], Fault::ApplyThenLose);
    let err = nodes
        .client()
        .try_acquire("k", &token(), TTL)
        .await
        .expect_err("no quorum");
    assert!(matches!(err, Error::QuorumUnreachable { granted: 1, .. }), "{err}");
    assert_eq!(
        nodes.holding("k"),
        vec![0, 1],
        "the grant was given back before returning"
    );
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        nodes.holding("k").is_empty(),
        "nodes that may have written are released in the background"
    );

    nodes.fault(&[1], Fault::None);
    let redlock = nodes.client();
    let t = token();
    assert!(matches!(
        redlock.try_acquire("k", &t, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    assert_eq!(nodes.holding("k"), vec![0, 1, 2]);
    assert_eq!(
        redlock.release("k", &t).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(nodes.holding("k").is_empty());
}

#[tokio::test(start_paused = true)]
async fn release_reports_honestly() {
    let nodes = Nodes::new(3);
    let redlock = nodes.client();
    let t = token();
    assert!(matches!(
        redlock.try_acquire("k", &t, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    nodes.fault(&[1, 2], Fault::Fail);
    let err = redlock.release("k", &t).await.expect_err("undecided");
    let (released, required, _) = unreachable(err);
    assert_eq!((released, required), (1, 2), "1 released, 2 unknown: we cannot say");
    nodes.fault(&[1, 2], Fault::None);
    let report = redlock.release_report("k", &t).await.expect("report");
    assert_eq!(report.released, 2);
    assert_eq!(report.required, 2);
    assert_eq!(report.nodes.0[0].1, NodeOutcome::Missing);

    // An expired lock: a quick, definite Missing (no retry storm).
    let t = token();
    assert!(matches!(
        redlock.try_acquire("e", &t, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        redlock.release("e", &t).await.expect("release"),
        ReleaseOutcome::Missing
    );
    // Another client's lock: untouched.
    let theirs = token();
    assert!(matches!(
        nodes.healthy_client().try_acquire("e", &theirs, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    assert_eq!(
        redlock.release("e", &t).await.expect("release"),
        ReleaseOutcome::HeldByOther
    );
    assert_eq!(nodes.holding("e"), vec![0, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn renew_needs_the_quorum() {
    let nodes = Nodes::new(3);
    let redlock = nodes.client();
    let t = token();
    assert!(matches!(
        redlock.try_acquire("k", &t, TTL).await,
        Ok(AcquireOutcome::Acquired(_))
    ));
    nodes.fault(&[0], Fault::Fail);
    assert_eq!(redlock.renew("k", &t, TTL).await.expect("renew"), RenewOutcome::Renewed);
    nodes.fault(&[1], Fault::Hang);
    let started = Instant::now();
    let err = redlock.renew("k", &t, TTL).await.expect_err("1 of 3");
    assert_eq!(started.elapsed(), NODE_TIMEOUT);
    assert!(matches!(err, Error::QuorumUnreachable { granted: 1, .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_node_restarted_empty_is_reseeded_by_the_next_renewal() {
    let nodes = Nodes::new(3);
    let options = LockOptions::with_ttl(TTL);
    let holder = manager(nodes.client(), options.clone());
    let guard = holder.lock("k").await.expect("lock");
    nodes.lose_key(2, "k", guard.token()).await;

    // Another client gets node 2, but not a quorum, and gives node 2 back.
    let other = manager(nodes.healthy_client(), options.clone());
    assert!(other.try_lock("k").await.expect("try_lock").is_none());
    assert_eq!(nodes.holding("k"), vec![0, 1]);

    // The next renewal (at ttl / 3) puts the key back on node 2.
    tokio::time::sleep(TTL / 3 + Duration::from_millis(1)).await;
    assert_eq!(nodes.holding("k"), vec![0, 1, 2], "re-seeded");
    assert!(!guard.is_lost());
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    assert!(nodes.holding("k").is_empty());
}

#[tokio::test(start_paused = true)]
async fn without_reseeding_the_lost_node_stays_empty() {
    let nodes = Nodes::new(3);
    let holder = manager(
        nodes.client_with(RedlockOptions::default().reseed_on_renew(false)),
        LockOptions::with_ttl(TTL),
    );
    let guard = holder.lock("k").await.expect("lock");
    nodes.lose_key(2, "k", guard.token()).await;
    tokio::time::sleep(TTL * 2).await;
    assert!(!guard.is_lost(), "2 of 3 still renew");
    assert_eq!(nodes.holding("k"), vec![0, 1], "node 2 was not re-seeded");
}

#[tokio::test(start_paused = true)]
async fn losing_the_key_on_a_second_node_before_a_renewal_breaks_exclusion() {
    // What Redlock does NOT guarantee: 2 of 3 nodes losing the key (restarts
    // without persistence) between two renewals lets a second client in.
    // The first holder learns at its next renewal.
    let nodes = Nodes::new(3);
    let options = LockOptions::with_ttl(TTL);
    let holder = manager(nodes.client(), options.clone());
    let guard = holder.lock("k").await.expect("lock");
    nodes.lose_key(1, "k", guard.token()).await;
    nodes.lose_key(2, "k", guard.token()).await;
    let other = manager(nodes.healthy_client(), options);
    let intruder = other.try_lock("k").await.expect("try_lock").expect("2 of 3 were free");
    let reason = tokio::time::timeout(TTL, guard.lost()).await.expect("lost() fires");
    assert_eq!(reason, LossReason::NotOwner);
    assert!(!intruder.is_lost());
    assert_eq!(intruder.release().await.expect("release"), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn two_hanging_nodes_lose_a_held_lock_by_its_deadline() {
    let nodes = Nodes::new(3);
    let locks = manager(nodes.client(), LockOptions::with_ttl(TTL));
    let guard = locks.lock("k").await.expect("lock");
    let deadline = guard.deadline();
    nodes.fault(&[0, 1], Fault::Hang);
    assert_eq!(guard.lost().await, LossReason::DeadlinePassed);
    assert_eq!(Instant::now(), deadline);
}

#[tokio::test(start_paused = true)]
async fn waiters_wake_when_a_quorum_of_nodes_signals_a_release() {
    let nodes = Nodes::new(3);
    let locks = manager(nodes.client(), LockOptions::with_ttl(TTL));
    let guard = locks.lock("k").await.expect("lock");
    let redlock = nodes.client();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        redlock.wait_for_release("k", Duration::from_secs(60)).await;
        started.elapsed()
    });
    // One node's signal is not enough: 2 of 3 must be free to retry.
    tokio::time::sleep(Duration::from_secs(1)).await;
    nodes.lose_key(0, "k", guard.token()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiter.is_finished());
    guard.release().await.expect("release");
    let waited = waiter.await.expect("task");
    assert_eq!(waited, Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_manager_hands_the_lock_over_between_redlock_clients() {
    let nodes = Nodes::new(5);
    nodes.fault(&[4], Fault::Hang);
    nodes.fault(&[3], Fault::Fail);
    let a = manager(nodes.client(), LockOptions::with_ttl(TTL));
    let b = manager(nodes.client(), LockOptions::with_ttl(TTL));
    let first = a.lock("k").await.expect("lock");
    let waiting = tokio::spawn(async move { b.lock("k").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    drop(first);
    let second = waiting.await.expect("task").expect("handed over");
    assert_eq!(nodes.holding("k"), vec![0, 1, 2], "node 3 fails, node 4 hangs");
    assert_eq!(second.release().await.expect("release"), ReleaseOutcome::Released);
}

#[tokio::test]
async fn construction_rejects_bad_quorums() {
    let node = || Arc::new(MemoryBackend::new()) as Arc<dyn LockBackend>;
    let invalid = |r: lock_core::Result<Redlock>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(Redlock::new(Vec::new())));
    assert!(invalid(Redlock::new(vec![node()])), "a single node is not a quorum");
    assert!(invalid(Redlock::with_options(
        vec![node(), node(), node()],
        RedlockOptions::default().quorum(1)
    )));
    assert!(invalid(Redlock::with_options(
        vec![node(), node(), node()],
        RedlockOptions::default().quorum(4)
    )));
    let two = Redlock::new(vec![node(), node()]).expect("2 nodes");
    assert_eq!(two.quorum(), 2);
    let five = Redlock::new((0..5).map(|_| node())).expect("5 nodes");
    assert_eq!(five.quorum(), 3);
    assert_eq!(five.node_names()[4], "node4 (memory)");
    let all = Redlock::with_options((0..5).map(|_| node()), RedlockOptions::default().quorum(5)).expect("5 of 5");
    assert_eq!(all.quorum(), 5);
    let named = Redlock::with_named_nodes(
        vec![("eu".to_owned(), node()), ("us".to_owned(), node())],
        RedlockOptions::default(),
    )
    .expect("named");
    assert_eq!(named.node_names(), ["eu", "us"]);
}

#[tokio::test(start_paused = true)]
async fn invalid_input_never_reaches_the_nodes() {
    let nodes = Nodes::new(3);
    let redlock = nodes.client();
    let t = token();
    assert!(matches!(
        redlock.try_acquire("", &t, TTL).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        redlock.renew("k", &t, Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(redlock.release("", &t).await, Err(Error::InvalidArgument(_))));
    assert!(nodes.controls.iter().all(|c| c.counts() == Default::default()));
    // Manual renewal is valid on Redlock, and such a manager never renews.
    let manual = LockOptions::with_ttl(TTL).renewal(Renewal::Manual);
    let locks = LockManager::with_options(redlock, manual).expect("manual renewal is valid");
    let guard = locks.try_lock("k").await.expect("try_lock").expect("free key");
    tokio::time::sleep(TTL / 2).await;
    assert!(nodes.controls.iter().all(|c| c.counts().renew == 0), "never renewed");
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
}
