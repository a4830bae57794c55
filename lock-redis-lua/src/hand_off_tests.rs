//! Starvation-bounded barging, driven script by script on a real server
//! (no timing: the waiters' ages and the reservation's life are script
//! arguments): a release reserves the key for a waiter that has waited the
//! bound, the releaser cannot barge back past it, only that waiter's process
//! claims it, and a stale holder never releases or renews a reservation.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use deadpool_redis::redis::{self, Value, aio::MultiplexedConnection};
use lock_redis_family::board::{process_id, waiter_id};
use lock_redis_family::wake::{RESERVED_PREFIX, reservation_of};
use lock_testkit::server::RedisServer;

use crate::keys::{Helper, WakeKeys, helper};
use crate::scripts::{LuaScript, Scripts};

const KEY: &str = "hot";
/// Long enough never to pass during the test: ages and the reservation's
/// life are given, not waited for.
const LONG_MS: &[u8] = b"60000";

struct Lab {
    _server: RedisServer,
    conn: MultiplexedConnection,
    scripts: Scripts,
}

impl Lab {
    async fn start() -> Lab {
        let server = RedisServer::start().await.expect("start");
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        Lab {
            _server: server,
            conn,
            scripts: Scripts::new(),
        }
    }

    async fn eval(&self, script: &LuaScript, keys: &[&str], args: &[&[u8]]) -> Value {
        let mut conn = self.conn.clone();
        script
            .cmd(true, keys, args)
            .query_async::<Value>(&mut conn)
            .await
            .unwrap()
    }

    async fn cmd(&self, args: &[&str]) -> Value {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let mut conn = self.conn.clone();
        cmd.query_async::<Value>(&mut conn).await.unwrap()
    }

    async fn get(&self) -> Option<Vec<u8>> {
        match self.cmd(&["GET", KEY]).await {
            Value::Nil => None,
            Value::BulkString(v) => Some(v),
            other => panic!("GET: {other:?}"),
        }
    }

    /// A waiter of `process` registers, its acquire having waited `waited` ms.
    async fn mark_waiting(&self, id: &[u8], waited: &[u8]) -> Value {
        let wake = WakeKeys::new(KEY);
        let [marker, set, _, _] = wake.names();
        let since = helper(KEY, Helper::WakeSince);
        self.eval(
            &self.scripts.mark_waiting,
            &[KEY, marker, set, &since],
            &[b"60100", id, LONG_MS, waited],
        )
        .await
    }

    /// The releaser's release with starvation bound `bound` ms.
    async fn release(&self, token: &[u8], bound: &[u8]) -> Value {
        let wake = WakeKeys::new(KEY);
        let [m, w, q, e] = wake.names();
        let since = helper(KEY, Helper::WakeSince);
        self.eval(
            &self.scripts.release_notify,
            &[KEY, m, w, q, e, &since],
            &[token, bound, LONG_MS, b""],
        )
        .await
    }

    /// The plain acquire (`SET NX PX GET`): nil when taken.
    async fn set_nx(&self, token: &str) -> Value {
        self.cmd(&["SET", KEY, token, "NX", "PX", "60000", "GET"]).await
    }

    /// The acquire script as a waiter of `process` sends it.
    async fn acquire(&self, token: &[u8], process: &[u8; 32]) -> Value {
        self.eval(
            &self.scripts.acquire,
            &[KEY],
            &[token, LONG_MS, &reservation_of(process)],
        )
        .await
    }
}

fn status(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::Array(items) => match items.first() {
            Some(Value::Int(i)) => *i,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_starving_waiter_gets_the_key_before_the_releaser_can_barge_back() {
    let lab = Lab::start().await;
    let (releaser, waiter) = (process_id(), process_id());
    let id = waiter_id(&waiter, &process_id());
    assert!(matches!(lab.set_nx("aaaa").await, Value::Nil));
    // The waiter's acquire has waited longer than the bound (5 ms) already.
    assert_eq!(lab.mark_waiting(&id, b"1000").await, Value::Int(1));
    assert_eq!(lab.release(b"aaaa", b"5").await, Value::Int(1));
    // The key is reserved for the waiter, not free.
    let mut reserved = RESERVED_PREFIX.as_bytes().to_vec();
    reserved.extend_from_slice(&id);
    assert_eq!(lab.get().await, Some(reserved.clone()));
    // The releaser barges back: refused by the plain acquire and the script.
    assert_eq!(lab.set_nx("bbbb").await, Value::BulkString(reserved.clone()));
    assert_eq!(status(&lab.acquire(b"bbbb", &releaser).await), 0);
    // The old holder's token matches nothing: it neither releases nor renews.
    assert_eq!(lab.release(b"aaaa", b"5").await, Value::Int(2));
    assert_eq!(
        lab.eval(&lab.scripts.renew, &[KEY], &[b"aaaa", b"500"]).await,
        Value::Int(2)
    );
    // The waiter registering again is told to claim at once.
    assert_eq!(
        lab.mark_waiting(&waiter_id(&waiter, &process_id()), b"0").await,
        Value::Int(0)
    );
    // Its process claims it.
    assert_eq!(status(&lab.acquire(b"cccc", &waiter).await), 1);
    assert_eq!(lab.get().await, Some(b"cccc".to_vec()));
    // It was taken out of the wake set: its holder's release reserves nothing.
    assert_eq!(lab.release(b"cccc", b"5").await, Value::Int(1));
    assert_eq!(lab.get().await, None);
}

#[tokio::test]
async fn a_waiter_below_the_bound_is_not_woken_and_the_releaser_barges() {
    let lab = Lab::start().await;
    // Its own id starts with `fff`: the largest fraction of a ms in its
    // registration time, which must not count against the bound (a bound
    // of 0 ms reached within the millisecond of the registration).
    let mut own = process_id();
    own[..3].copy_from_slice(b"fff");
    let id = waiter_id(&process_id(), &own);
    assert!(matches!(lab.set_nx("aaaa").await, Value::Nil));
    assert_eq!(lab.mark_waiting(&id, b"0").await, Value::Int(1));
    // Bound one minute: the waiter is not starving.
    assert_eq!(lab.release(b"aaaa", LONG_MS).await, Value::Int(1));
    assert_eq!(lab.get().await, None);
    assert!(
        matches!(lab.set_nx("bbbb").await, Value::Nil),
        "the releaser takes the key right back"
    );
    // The waiter stays registered: a later release, once it is starving, reserves the key for it.
    assert_eq!(lab.release(b"bbbb", b"0").await, Value::Int(1));
    let mut reserved = RESERVED_PREFIX.as_bytes().to_vec();
    reserved.extend_from_slice(&id);
    assert_eq!(lab.get().await, Some(reserved));
}

#[tokio::test]
async fn the_waiter_that_started_waiting_first_is_served_first() {
    let lab = Lab::start().await;
    let (young, old) = (
        waiter_id(&process_id(), &process_id()),
        waiter_id(&process_id(), &process_id()),
    );
    assert!(matches!(lab.set_nx("aaaa").await, Value::Nil));
    assert_eq!(lab.mark_waiting(&young, b"100").await, Value::Int(1));
    assert_eq!(lab.mark_waiting(&old, b"5000").await, Value::Int(1));
    assert_eq!(lab.release(b"aaaa", b"5").await, Value::Int(1));
    let value = lab.get().await.unwrap();
    assert!(value.ends_with(&old), "{}", String::from_utf8_lossy(&value));
}
