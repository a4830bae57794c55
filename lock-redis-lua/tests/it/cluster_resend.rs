//! A cluster client re-sends a request whose connection dropped before the
//! reply (issue 11 item 15): a release or a versioned delete that ran, then
//! ran again, must still report what the first run did.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, missing_docs)]

use std::time::Duration;

use lock_core::VersionedStore;
use lock_core::{AcquireOutcome, ReleaseOutcome};
use lock_core::{CreateOutcome, DeleteOutcome, Expiry, LockBackend, LockToken};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::{RedisCluster, RedisServer, RespClient, encode_command};

async fn cluster() -> RedisCluster {
    RedisCluster::start(3, 0, RedisServer::builder())
        .await
        .expect("start a 3-master cluster")
}

async fn backend(cluster: &RedisCluster) -> RedisLuaBackend {
    RedisLuaBuilder::cluster(cluster.masters().iter().map(|m| m.url()))
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect to the cluster")
}

/// Runs `op` so that the node runs it, then drops every client connection
/// before the reply goes out: the node is paused, `op` is sent, then a
/// `CLIENT KILL` on a connection opened earlier; on resume the node runs
/// both in arrival order, and the cluster client re-sends `op`. Also says
/// whether that happened (the node ran the script twice): on a loaded
/// machine the kill may come first; callers try again, bounded.
async fn with_dropped_reply<T>(node: &RedisServer, op: impl Future<Output = T> + Send + 'static) -> (T, bool)
where
    T: Send + 'static,
{
    let before = evalsha_calls(node).await;
    let mut killer = RespClient::connect(node.addr()).await.expect("connect");
    node.pause().expect("SIGSTOP");
    let task = tokio::spawn(op);
    // Let the request reach the node's socket.
    tokio::time::sleep(Duration::from_millis(200)).await;
    killer
        .send_raw(&encode_command(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]))
        .await
        .expect("send CLIENT KILL");
    node.resume().expect("SIGCONT");
    let killed = killer.read().await.expect("CLIENT KILL reply");
    assert!(killed.as_int().is_some_and(|n| n >= 1), "{killed:?}");
    let outcome = task.await.expect("join");
    (outcome, evalsha_calls(node).await - before >= 2)
}

async fn evalsha_calls(node: &RedisServer) -> u64 {
    node.info("commandstats").await.expect("INFO commandstats")["cmdstat_evalsha"]
        .split(',')
        .find_map(|kv| kv.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .expect("EVALSHA calls")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_release_reports_released() {
    let cluster = cluster().await;
    let backend = backend(&cluster).await;
    let node = cluster.master_for_key(b"r15").await.expect("node");
    let mine = LockToken::generate().expect("token");
    // Cache the release script on the node (same slot): the re-send must
    // re-run it, not meet NOSCRIPT.
    assert_eq!(
        backend.release("{r15}:warm", &mine).await.expect("warm"),
        ReleaseOutcome::Missing
    );
    let mut resent = false;
    for _ in 0..5 {
        let mine = LockToken::generate().expect("token");
        assert!(matches!(
            backend
                .try_acquire("r15", &mine, Duration::from_secs(30))
                .await
                .expect("acquire"),
            AcquireOutcome::Acquired(_)
        ));
        let (released, twice) = {
            let backend = backend.clone();
            with_dropped_reply(node, async move { backend.release("r15", &mine).await }).await
        };
        assert_eq!(released.expect("release"), ReleaseOutcome::Released, "re-sent: {twice}");
        assert!(node.cmd(&["GET", "r15"]).await.expect("GET").is_null());
        // A second release call is still answered as one.
        assert_eq!(
            backend.release("r15", &mine).await.expect("release"),
            ReleaseOutcome::Missing
        );
        if twice {
            resent = true;
            break;
        }
    }
    assert!(resent, "no attempt made the cluster client re-send the release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_versioned_delete_reports_deleted() {
    let cluster = cluster().await;
    let backend = backend(&cluster).await;
    let node = cluster.master_for_key(b"d15").await.expect("node");
    // Cache the delete script on the node (same slot).
    assert_eq!(
        backend.delete("{d15}:warm", 1).await.expect("warm"),
        DeleteOutcome::Missing
    );
    let mut resent = false;
    for _ in 0..5 {
        let CreateOutcome::Created { version } = backend.create("d15", b"v", Expiry::Keep).await.expect("create")
        else {
            panic!("new key")
        };
        let (deleted, twice) = {
            let backend = backend.clone();
            with_dropped_reply(node, async move { backend.delete("d15", version).await }).await
        };
        assert_eq!(deleted.expect("delete"), DeleteOutcome::Deleted, "re-sent: {twice}");
        assert_eq!(backend.get("d15").await.expect("get"), None);
        assert_eq!(
            backend.delete("d15", version).await.expect("delete"),
            DeleteOutcome::Missing
        );
        if twice {
            resent = true;
            break;
        }
    }
    assert!(resent, "no attempt made the cluster client re-send the delete");
}
