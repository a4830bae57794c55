//! The key limit of a multi-key lock applies to each key, not to the set.

#![allow(clippy::expect_used, clippy::panic)] // test helpers

use lock_core::raw::MAX_KEY_LEN;

use lock_core::ReleaseOutcome;
use lock_core::{Error, MultiLockManager};
use lock_memory::MemoryBackend;

#[tokio::test(start_paused = true)]
async fn a_set_of_valid_long_keys_is_locked() {
    let locks = MultiLockManager::new(MemoryBackend::new()).expect("manager");
    let (a, b) = (format!("a{}", "x".repeat(40_000)), format!("b{}", "x".repeat(40_000)));
    let guard = locks.lock(&[&a, &b]).await.expect("two 40 KB keys are valid keys");
    assert!(locks.try_lock(&[&b]).await.expect("try").is_none(), "b is held");
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
    // The largest set: 64 keys of the largest size.
    let keys: Vec<String> = (0..64)
        .map(|i| format!("{i:02}{}", "k".repeat(MAX_KEY_LEN - 2)))
        .collect();
    let guard = locks.try_lock(&keys).await.expect("64 keys of 64 KiB").expect("free");
    assert_eq!(guard.release().await.expect("release"), ReleaseOutcome::Released);
}

#[tokio::test(start_paused = true)]
async fn a_key_above_the_limit_is_refused_naming_the_per_key_limit() {
    let locks = MultiLockManager::new(MemoryBackend::new()).expect("manager");
    let long = "x".repeat(MAX_KEY_LEN + 1);
    let err = locks.try_lock(&["a", long.as_str()]).await.expect_err("too long");
    match err {
        Error::InvalidArgument(message) => assert!(message.contains("per key"), "{message}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
