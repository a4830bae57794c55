//! A Redlock that starts while some nodes are down ([`LazyNode`],
//! [`Redlock::connect`]): memory nodes behind a switchable connector (paused
//! clock), and real `redis-server` nodes with one paused at start.

#![allow(clippy::expect_used, clippy::panic)] // test set-up

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use lock_core::{Error, LockBackend, LockManager, LockOptions, LockToken, NodeOutcome};

use lock_core::AcquireOutcome;
use lock_memory::MemoryBackend;
use lock_redis_lua::RedisLuaBuilder;
use lock_redlock::{LAZY_RETRY_MAX, LazyNode, Redlock, RedlockOptions};
use lock_testkit::server::{Instances, RedisServer};

const TTL: Duration = Duration::from_secs(1);

/// A memory node whose connection fails until `up` is set; counts attempts.
fn switchable(name: &str, up: &Arc<AtomicBool>, attempts: &Arc<AtomicU32>) -> LazyNode {
    let (up, attempts) = (up.clone(), attempts.clone());
    LazyNode::spawn(name, move || {
        attempts.fetch_add(1, Ordering::SeqCst);
        let up = up.load(Ordering::SeqCst);
        async move {
            if up {
                Ok(MemoryBackend::new())
            } else {
                Err(Error::backend("memory", "connection refused"))
            }
        }
    })
    .expect("inside a runtime")
}

fn up_node(name: &str) -> LazyNode {
    LazyNode::spawn(name, || async { Ok(MemoryBackend::new()) }).expect("inside a runtime")
}

fn token() -> LockToken {
    LockToken::generate().expect("token")
}

#[tokio::test(start_paused = true)]
async fn a_node_down_at_start_is_a_failed_vote_until_it_connects() {
    let up = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicU32::new(0));
    let nodes = vec![up_node("a"), up_node("b"), switchable("c", &up, &attempts)];
    let late = nodes[2].clone();
    let redlock = Redlock::connect(nodes, RedlockOptions::default())
        .await
        .expect("2 of 3 connected");
    assert_eq!(redlock.node_names(), ["a", "b", "c"]);
    assert!(!late.is_connected());

    let t = token();
    assert!(matches!(
        redlock.try_acquire("k", &t, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    let report = redlock.release_report("k", &t).await.expect("report");
    assert_eq!(report.released, 2);
    match &report.nodes.0[2].1 {
        NodeOutcome::Failed(m) => assert!(m.contains("not connected yet"), "{m}"),
        other => panic!("node c: {other:?}"),
    }

    // It keeps trying in the background, and votes once it connects.
    tokio::time::sleep(LAZY_RETRY_MAX * 3).await;
    assert!(attempts.load(Ordering::SeqCst) >= 3, "no retries");
    up.store(true, Ordering::SeqCst);
    tokio::time::sleep(LAZY_RETRY_MAX * 2).await;
    assert!(late.is_connected());
    let t = token();
    assert!(matches!(
        redlock.try_acquire("k", &t, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(redlock.release_report("k", &t).await.expect("report").released, 3);

    // Dropping every handle stops the attempts of a node still down.
    let down = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU32::new(0));
    drop(switchable("d", &down, &count));
    tokio::time::sleep(LAZY_RETRY_MAX * 3).await;
    assert!(count.load(Ordering::SeqCst) <= 1, "attempts go on after the drop");
}

#[tokio::test(start_paused = true)]
async fn fewer_than_a_quorum_at_start_is_an_error_naming_each_node() {
    let down = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(AtomicU32::new(0));
    let nodes = vec![
        up_node("a"),
        switchable("b", &down, &attempts),
        switchable("c", &down, &attempts),
    ];
    match Redlock::connect(nodes, RedlockOptions::default()).await {
        Err(Error::Backend { message, .. }) => {
            assert!(message.contains("only 1 of 3 nodes connected"), "{message}");
            assert!(message.contains("b: ") && message.contains("c: "), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A quorum that is not a majority is refused before anything waits.
    let nodes = vec![up_node("a"), up_node("b"), up_node("c"), up_node("d")];
    assert!(matches!(
        Redlock::connect(nodes, RedlockOptions::default().quorum(2)).await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_node_that_cannot_be_used_is_not_retried_and_its_error_is_returned() {
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = attempts.clone();
    let bad = LazyNode::spawn("bad", move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Err::<MemoryBackend, _>(Error::invalid("replica_ack=N needs replica_ack_timeout")) }
    })
    .expect("inside a runtime");
    let nodes = vec![up_node("a"), up_node("b"), bad];
    match Redlock::connect(nodes, RedlockOptions::default()).await {
        Err(Error::InvalidArgument(m)) => assert!(m.starts_with("bad: "), "{m}"),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(LAZY_RETRY_MAX * 3).await;
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

#[test]
fn spawning_outside_a_runtime_is_an_error_not_a_panic() {
    assert!(matches!(
        LazyNode::spawn("a", || async { Ok(MemoryBackend::new()) }),
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_nodes_start_with_one_paused_and_use_it_after_it_resumes() {
    let servers = Instances::start(3, RedisServer::builder())
        .await
        .expect("start redis-servers");
    servers.servers()[2].pause().expect("SIGSTOP node 2");
    let nodes = servers
        .urls()
        .into_iter()
        .map(|url| {
            let name = url.clone();
            LazyNode::spawn(name, move || {
                RedisLuaBuilder::url(url.clone())
                    .connect_timeout(Duration::from_millis(300))
                    .build()
            })
            .expect("inside a runtime")
        })
        .collect::<Vec<_>>();
    let late = nodes[2].clone();
    let redlock = tokio::time::timeout(
        Duration::from_secs(30),
        Redlock::connect(
            nodes,
            RedlockOptions::default().node_timeout(Duration::from_millis(200)),
        ),
    )
    .await
    .expect("connect hangs")
    .expect("2 of 3 up");
    let locks = LockManager::with_options(
        redlock.clone(),
        LockOptions::with_ttl(TTL).acquire_timeout(Duration::from_secs(5)),
    )
    .expect("options");
    locks
        .lock("paused-at-start")
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");

    servers.servers()[2].resume().expect("SIGCONT node 2");
    let joined = tokio::time::timeout(Duration::from_secs(30), async {
        while !late.is_connected() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(joined.is_ok(), "the resumed node never connected");
    let t = token();
    assert!(matches!(
        redlock.try_acquire("after-resume", &t, TTL).await.expect("acquire"),
        AcquireOutcome::Acquired(_)
    ));
    assert_eq!(
        servers.servers()[2]
            .cmd(&["EXISTS", "after-resume"])
            .await
            .expect("EXISTS")
            .as_int(),
        Some(1),
        "the resumed node holds no key"
    );
    assert_eq!(
        redlock
            .release_report("after-resume", &t)
            .await
            .expect("report")
            .released,
        3
    );
}
