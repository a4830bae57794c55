//! Versioned-store cases.

use std::time::Duration;

use lock_core::{
    CasOutcome, CreateOutcome, DeleteOutcome, Error, Expiry, LockOptions, UpdateOptions, VersionedStoreExt,
};

use super::VersionedSuite;

/// Absent keys read as `None`; CAS and delete on them say `Missing`.
pub async fn missing_key(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("missing");
    assert_eq!(store.get(&key).await.expect("get"), None);
    assert_eq!(
        store.compare_and_set(&key, 1, b"x", Expiry::Keep).await.expect("cas"),
        CasOutcome::Missing
    );
    assert_eq!(store.delete(&key, 1).await.expect("delete"), DeleteOutcome::Missing);
    assert_eq!(
        store.get(&key).await.expect("get"),
        None,
        "a CAS on a missing key must not create it"
    );
}

/// Concurrent create-if-absent: exactly one winner.
pub async fn create_race_has_one_winner(s: &VersionedSuite) {
    let key = s.key("create-race");
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let store = s.client().await;
        let key = key.clone();
        tasks.push(tokio::spawn(
            async move { store.create(&key, &[i], Expiry::Keep).await },
        ));
    }
    let mut winners = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.expect("task").expect("create") {
            CreateOutcome::Created { version } => winners.push((i, version)),
            CreateOutcome::Exists => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one create must win: {winners:?}");
    let (i, version) = winners[0];
    let now = s.client().await.get(&key).await.expect("get").expect("created");
    assert_eq!(now.value, vec![i as u8]);
    assert_eq!(now.version, version);
}

/// A stale compare-and-set returns the current value and version.
pub async fn stale_cas_returns_current(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("stale-cas");
    let CreateOutcome::Created { version: v1 } = store.create(&key, b"hello", Expiry::Keep).await.expect("create")
    else {
        panic!("create failed")
    };
    let CasOutcome::Written { version: v2 } = store
        .compare_and_set(&key, v1, b"world", Expiry::Keep)
        .await
        .expect("cas")
    else {
        panic!("first cas must win")
    };
    assert_ne!(v1, v2);
    match store
        .compare_and_set(&key, v1, b"universe", Expiry::Keep)
        .await
        .expect("stale cas")
    {
        CasOutcome::Conflict(current) => {
            assert_eq!(current.value, b"world");
            assert_eq!(current.version, v2);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        store.get(&key).await.expect("get").expect("present").value,
        b"world",
        "no lost update"
    );
}

/// create → get → cas → get round trip keeps value and version in step.
pub async fn cas_round_trip(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("round-trip");
    assert_eq!(store.create(&key, b"a", Expiry::Keep).await.expect("create").clone(), {
        let got = store.get(&key).await.expect("get").expect("present");
        assert_eq!(got.value, b"a");
        CreateOutcome::Created { version: got.version }
    });
    assert_eq!(
        store.create(&key, b"b", Expiry::Keep).await.expect("create"),
        CreateOutcome::Exists
    );
    let mut version = store.get(&key).await.expect("get").expect("present").version;
    for i in 0..5u8 {
        match store
            .compare_and_set(&key, version, &[i], Expiry::Keep)
            .await
            .expect("cas")
        {
            CasOutcome::Written { version: v } => {
                assert_ne!(v, version);
                version = v;
            }
            other => panic!("expected a write, got {other:?}"),
        }
        let got = store.get(&key).await.expect("get").expect("present");
        assert_eq!((got.value, got.version), (vec![i], version));
    }
}

/// 8 tasks × 100 `update` increments of one value end exact.
pub async fn update_increments_are_exact(s: &VersionedSuite) {
    let key = s.key("update");
    let (tasks, increments) = s.updates;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let store = s.client().await;
        let key = key.clone();
        handles.push(tokio::spawn(async move {
            let opts = UpdateOptions::default().max_attempts(10_000);
            for _ in 0..increments {
                store
                    .update_opts(&key, &opts, |old| {
                        let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
                        Some((n + 1).to_string().into_bytes())
                    })
                    .await
                    .expect("update")
                    .expect("written");
            }
        }));
    }
    for h in handles {
        h.await.expect("task");
    }
    let got = s.client().await.get(&key).await.expect("get").expect("present");
    assert_eq!(got.value, (tasks * increments).to_string().into_bytes(), "lost updates");
}

/// Delete only at the expected version.
pub async fn delete_if_version(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("delete");
    let CreateOutcome::Created { version: v1 } = store.create(&key, b"x", Expiry::Keep).await.expect("create") else {
        panic!("create failed")
    };
    let CasOutcome::Written { version: v2 } = store.compare_and_set(&key, v1, b"y", Expiry::Keep).await.expect("cas")
    else {
        panic!("cas failed")
    };
    assert_eq!(
        store.delete(&key, v1).await.expect("stale delete"),
        DeleteOutcome::Conflict { current_version: v2 }
    );
    assert!(
        store.get(&key).await.expect("get").is_some(),
        "a stale delete must not delete"
    );
    assert_eq!(store.delete(&key, v2).await.expect("delete"), DeleteOutcome::Deleted);
    assert_eq!(store.get(&key).await.expect("get"), None);
}

/// After a delete, the recreated key never reuses an old version: a CAS with
/// a version read before the delete fails.
pub async fn no_aba_after_delete(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("aba");
    let mut seen = Vec::new();
    for round in 0..3u8 {
        let CreateOutcome::Created { version } = store.create(&key, &[round], Expiry::Keep).await.expect("create")
        else {
            panic!("create failed")
        };
        assert!(!seen.contains(&version), "version {version} reused after delete (ABA)");
        for old in &seen {
            match store
                .compare_and_set(&key, *old, b"stale", Expiry::Keep)
                .await
                .expect("cas")
            {
                CasOutcome::Conflict(current) => assert_eq!(current.version, version),
                other => panic!("a pre-delete version must not match: {other:?}"),
            }
        }
        seen.push(version);
        assert_eq!(
            store.delete(&key, version).await.expect("delete"),
            DeleteOutcome::Deleted
        );
    }
}

/// TTLs on writes: set, kept by `Keep`, removed by `Persist`.
pub async fn ttl_on_writes(s: &VersionedSuite) {
    let store = s.client().await;
    let (expiring, kept, persisted) = (s.key("ttl-expiring"), s.key("ttl-kept"), s.key("ttl-persisted"));
    // The two writes must land before the creates' TTL runs out. A loaded
    // machine may be slower than that: a write that finds the key already
    // expired (`Missing`) says nothing about the store, so the set-up is
    // retried with a TTL twice as long (bounded), never asserted on time.
    let mut ttl = s.ttl;
    let mut attempts = 0;
    let ttl = loop {
        attempts += 1;
        assert!(attempts <= 5, "five set-ups in a row outlived their TTL (last {ttl:?})");
        for key in [&expiring, &kept, &persisted] {
            // A slow attempt may have left a key behind.
            if let Some(old) = store.get(key).await.expect("get") {
                let _ = store.delete(key, old.version).await.expect("delete");
            }
            assert!(matches!(
                store.create(key, b"v", Expiry::After(ttl)).await.expect("create"),
                CreateOutcome::Created { .. }
            ));
        }
        let Some(k) = store.get(&kept).await.expect("get") else {
            ttl *= 2;
            continue;
        };
        match store
            .compare_and_set(&kept, k.version, b"w", Expiry::Keep)
            .await
            .expect("cas")
        {
            CasOutcome::Written { .. } => {}
            CasOutcome::Missing => {
                ttl *= 2;
                continue;
            }
            other => panic!("Keep write: {other:?}"),
        }
        let Some(p) = store.get(&persisted).await.expect("get") else {
            ttl *= 2;
            continue;
        };
        match store
            .compare_and_set(&persisted, p.version, b"w", Expiry::Persist)
            .await
            .expect("cas")
        {
            CasOutcome::Written { .. } => break ttl,
            CasOutcome::Missing => ttl *= 2,
            other => panic!("Persist write: {other:?}"),
        }
    };
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(store.get(&expiring).await.expect("get"), None, "TTL on create");
    assert_eq!(store.get(&kept).await.expect("get"), None, "Keep must keep the TTL");
    let p = store
        .get(&persisted)
        .await
        .expect("get")
        .expect("Persist must remove the TTL");
    assert_eq!(p.value, b"w");
    // A later write with a TTL sets one again.
    assert!(matches!(
        store
            .compare_and_set(&persisted, p.version, b"z", Expiry::After(ttl))
            .await
            .expect("cas"),
        CasOutcome::Written { .. }
    ));
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(store.get(&persisted).await.expect("get"), None);
}

/// Values are binary-safe, including empty and NUL bytes.
pub async fn binary_values(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("binary");
    let CreateOutcome::Created { version } = store.create(&key, b"", Expiry::Keep).await.expect("create") else {
        panic!("create failed")
    };
    assert_eq!(store.get(&key).await.expect("get").expect("present").value, b"");
    let raw: Vec<u8> = (0..=255u8).chain([0, 0, b'\r', b'\n']).collect();
    assert!(matches!(
        store
            .compare_and_set(&key, version, &raw, Expiry::Keep)
            .await
            .expect("cas"),
        CasOutcome::Written { .. }
    ));
    assert_eq!(store.get(&key).await.expect("get").expect("present").value, raw);
}

/// Bad input is `InvalidArgument`.
pub async fn invalid_arguments_are_rejected(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("invalid");
    let invalid = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(store.get("").await.map(drop)));
    assert!(invalid(store.create("", b"v", Expiry::Keep).await.map(drop)));
    assert!(invalid(
        store.create(&key, b"v", Expiry::After(Duration::ZERO)).await.map(drop)
    ));
    assert!(invalid(
        store
            .create(&key, b"v", Expiry::After(LockOptions::MAX_TTL * 2))
            .await
            .map(drop)
    ));
    assert!(invalid(
        store
            .compare_and_set(&key, 1, b"v", Expiry::After(Duration::ZERO))
            .await
            .map(drop)
    ));
    assert!(invalid(store.delete("", 1).await.map(drop)));
    assert!(invalid(
        store
            .update_opts(&key, &UpdateOptions::default().max_attempts(0), |_| Some(Vec::new()))
            .await
            .map(drop)
    ));
    assert_eq!(
        store.get(&key).await.expect("get"),
        None,
        "rejected calls wrote nothing"
    );
}

/// `update_from` (and its `_opts` twin) with a stale or wrong starting
/// point still ends exact: the conflict (or the failed create) brings the
/// current value; a closure that declines writes nothing.
pub async fn update_from_corrects_a_stale_start(s: &VersionedSuite) {
    let store = s.client().await;
    let key = s.key("update-from");
    let opts = UpdateOptions::default();
    let incr = |old: Option<&[u8]>| {
        let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
        Some((n + 1).to_string().into_bytes())
    };
    let first = store
        .update_from_opts(&key, None, &opts, incr)
        .await
        .expect("create")
        .expect("written");
    assert_eq!(first.value, b"1");
    let second = store
        .update_from(&key, Some(first.clone()), incr)
        .await
        .expect("from a fresh start")
        .expect("written");
    assert_eq!(second.value, b"2");
    // Stale start: the version `first` is gone.
    let third = store
        .update_from(&key, Some(first), incr)
        .await
        .expect("from a stale start")
        .expect("written");
    assert_eq!(third.value, b"3");
    // "Believed absent" while it exists.
    let fourth = store
        .update_from(&key, None, incr)
        .await
        .expect("from a wrong None")
        .expect("written");
    assert_eq!(fourth.value, b"4");
    assert_eq!(store.get(&key).await.expect("get").expect("present").value, b"4");
    assert_eq!(
        store.update_from(&key, Some(fourth), |_| None).await.expect("declined"),
        None
    );
    assert_eq!(store.get(&key).await.expect("get").expect("present").value, b"4");
}
