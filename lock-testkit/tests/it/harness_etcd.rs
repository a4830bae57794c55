//! The etcd harness: a single member and a three-member cluster start on
//! free loopback ports, elect a leader, survive the leader's death, take a
//! member back, and die with their value.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_testkit::server::EtcdCluster;

const LEADER_WAIT: Duration = Duration::from_secs(20);

fn listening(endpoint: &str) -> bool {
    std::net::TcpStream::connect(endpoint).is_ok()
}

#[tokio::test]
async fn single_member_starts_and_dies_with_its_value() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    assert_eq!(etcd.len(), 1);
    assert_eq!(etcd.leader(LEADER_WAIT).await.expect("leader"), 0);
    let endpoint = etcd.endpoint(0);
    assert!(etcd.url().starts_with("etcd://127.0.0.1:"));
    let dir = etcd.dir().to_path_buf();
    drop(etcd);
    assert!(!listening(&endpoint), "the member is gone");
    assert!(!dir.exists(), "its directory is gone");
}

/// Disk blocks under `path` (what `du` counts) and the longest file.
fn disk_usage(path: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut blocks, mut longest) = (0, 0);
    for entry in std::fs::read_dir(path).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            let (b, l) = disk_usage(&entry.path());
            blocks += b;
            longest = longest.max(l);
        } else {
            blocks += meta.blocks() * 512;
            longest = longest.max(meta.len());
        }
    }
    (blocks, longest)
}

/// etcd preallocates its WAL segment and the next one, 64 MB each (no flag
/// changes that): the harness makes them sparse, so a member takes a few MB
/// of disk instead of 128.
#[tokio::test]
async fn a_member_takes_little_disk() {
    let etcd = EtcdCluster::single().await.expect("start etcd");
    etcd.leader(LEADER_WAIT).await.expect("leader");
    let (used, longest) = disk_usage(etcd.dir());
    assert_eq!(longest, 64_000_000, "a WAL segment is there, 64 MB long");
    assert!(used < 16_000_000, "{used} bytes of disk");
}

#[tokio::test]
async fn three_members_fail_over_and_take_a_member_back() {
    let etcd = EtcdCluster::three().await.expect("start etcd");
    let first = etcd.leader(LEADER_WAIT).await.expect("leader");
    etcd.kill(first).expect("kill the leader");
    assert!(!etcd.is_running(first));
    let second = etcd.leader(LEADER_WAIT).await.expect("a new leader");
    assert_ne!(first, second);
    etcd.restart(first).await.expect("restart the old leader");
    assert!(etcd.is_running(first));
    etcd.pause(second).expect("pause");
    let third = etcd.leader(LEADER_WAIT).await.expect("a leader while one is paused");
    assert_ne!(third, second);
    etcd.resume(second).expect("resume");
}
