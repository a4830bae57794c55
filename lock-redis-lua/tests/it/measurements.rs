//! Latency measurements behind the design choices (numbers in the report,
//! not assertions). Run in release mode:
//! `cargo test -p lock-redis-lua --release --test measurements -- --ignored --nocapture`
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, LockManager, LockOptions, LockToken};
use lock_redis_lua::deadpool_redis::{self, redis};
use lock_redis_lua::{RedisLuaBackend, RedisLuaBuilder};
use lock_testkit::server::RedisServer;
use tokio::time::Instant;

const N: u32 = 2000;

fn per_op(total: Duration, n: u32) -> String {
    format!("{:>6.1} µs/op", total.as_secs_f64() * 1e6 / f64::from(n))
}

async fn sequential_lock_cycles(backend: &RedisLuaBackend, n: u32) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        let key = format!("cycle:{}", i % 16);
        let token = LockToken::generate().unwrap();
        backend.try_acquire(&key, &token, Duration::from_secs(5)).await.unwrap();
        backend.release(&key, &token).await.unwrap();
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run in release mode with --ignored --nocapture"]
async fn measure() {
    let server = RedisServer::start().await.unwrap();
    let url = server.url();
    let plain = RedisLuaBackend::connect(&url).await.unwrap();
    let notified = RedisLuaBuilder::url(url.clone())
        .release_notifications(true)
        .build()
        .await
        .unwrap();
    let fenced = RedisLuaBuilder::url(url.clone()).fencing(true).build().await.unwrap();
    sequential_lock_cycles(&plain, 200).await; // warm-up, scripts cached

    // Raw round trips on one multiplexed connection vs a pool checkout each.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let started = Instant::now();
    for _ in 0..N {
        let mut c = conn.clone();
        let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    }
    let cloned = started.elapsed();
    let pool = deadpool_redis::Config::from_url(url.clone())
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .unwrap();
    let started = Instant::now();
    for _ in 0..N {
        let mut c = pool.get().await.unwrap();
        let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    }
    let pooled = started.elapsed();
    eprintln!("PING, cloned multiplexed connection: {}", per_op(cloned, N));
    eprintln!("PING, pool.get() per call:          {}", per_op(pooled, N));

    // Acquire: plain SET NX PX vs the Lua acquire script (1 RTT each).
    let started = Instant::now();
    for i in 0..N {
        let token = LockToken::generate().unwrap().to_hex();
        let _: redis::Value = redis::cmd("SET")
            .arg(format!("setnx:{i}"))
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(5000)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let set_nx = started.elapsed();
    let started = Instant::now();
    for i in 0..N {
        let token = LockToken::generate().unwrap();
        plain
            .try_acquire(&format!("lua:{i}"), &token, Duration::from_secs(5))
            .await
            .unwrap();
    }
    let lua = started.elapsed();
    let started = Instant::now();
    for i in 0..N {
        let token = LockToken::generate().unwrap();
        fenced
            .try_acquire(&format!("fenced:{i}"), &token, Duration::from_secs(5))
            .await
            .unwrap();
    }
    let lua_fenced = started.elapsed();
    eprintln!("acquire, SET NX PX:                 {}", per_op(set_nx, N));
    eprintln!("acquire, Lua script:                {}", per_op(lua, N));
    eprintln!("acquire, Lua script with fencing:   {}", per_op(lua_fenced, N));

    // Uncontended acquire + release, without and with the PUBLISH.
    let without = sequential_lock_cycles(&plain, N).await;
    let with = sequential_lock_cycles(&notified, N).await;
    eprintln!("acquire+release, no notifications:  {}", per_op(without, N));
    eprintln!("acquire+release, PUBLISH on release:{}", per_op(with, N));

    // Direct hand-off latency: release returns → the waiter's lock() returns.
    for hold_ms in [5u64, 30, 120] {
        for label in ["timers", "pub/sub"] {
            let build = || async {
                let builder = RedisLuaBuilder::url(url.clone()).release_notifications(label == "pub/sub");
                builder.build().await.unwrap()
            };
            let (holder, waiter) = (build().await, build().await);
            let (mean, max) = release_to_acquire(holder, waiter, Duration::from_millis(hold_ms), 20).await;
            eprintln!(
                "release → waiter acquired, {hold_ms:>3} ms hold, {label:<8}: mean {:>7.0} µs, max {:>7.0} µs",
                mean.as_secs_f64() * 1e6,
                max.as_secs_f64() * 1e6
            );
        }
    }
    let _keep = Arc::new(server);
}

/// The holder and the waiter use separate backends and managers, as two
/// processes would (a manager wakes its own local waiters by itself).
async fn release_to_acquire(
    holder: RedisLuaBackend,
    waiter: RedisLuaBackend,
    hold: Duration,
    rounds: u32,
) -> (Duration, Duration) {
    let options = LockOptions::with_ttl(Duration::from_secs(2)).acquire_timeout(Duration::from_secs(10));
    let locks = LockManager::with_options(holder, options.clone()).unwrap();
    let others = LockManager::with_options(waiter, options).unwrap();
    let (mut total, mut max) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let g = locks.lock("direct").await.unwrap();
        let waiter = {
            let others = others.clone();
            tokio::spawn(async move {
                let g = others.lock("direct").await.unwrap();
                let at = Instant::now();
                g.release().await.unwrap();
                at
            })
        };
        tokio::time::sleep(hold).await;
        g.release().await.unwrap();
        let released = Instant::now();
        let acquired = waiter.await.unwrap();
        let gap = acquired.saturating_duration_since(released);
        total += gap;
        max = max.max(gap);
    }
    (total / rounds, max)
}
