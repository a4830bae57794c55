//! Spans, events and metrics for a scripted lock lifecycle (acquire, contend,
//! renew, lose, release) on the memory backend in paused time, recorded by a
//! span-recording tracing layer and metrics-util's `DebuggingRecorder`
//! (both installed thread-locally: the tests run on current-thread runtimes).

#![allow(clippy::await_holding_lock, clippy::expect_used, clippy::unwrap_used, clippy::panic)] // test helpers

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::ReleaseOutcome;
use lock_core::layers::{MetricsLayer, TracingLayer};
use lock_core::{Error, LockBackend, LockManager, LockOptions, LossReason, Renewal};
use lock_memory::MemoryBackend;
use lock_testkit::{Fault, FaultControl, FaultyBackend};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const TTL: Duration = Duration::from_secs(3);
/// How the fault wrapper around the memory backend names itself.
const BACKEND: &str = "faulty(memory)";

type Fields = BTreeMap<String, String>;

#[derive(Debug, Clone)]
struct Recorded {
    name: String,
    parent: Option<String>,
    fields: Fields,
}

/// Records every closed span (name, parent, final fields) and every event.
#[derive(Clone, Default)]
struct SpanRecorder {
    spans: Arc<Mutex<Vec<Recorded>>>,
    events: Arc<Mutex<Vec<Recorded>>>,
}

struct FieldVisitor<'a>(&'a mut Fields);

impl Visit for FieldVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SpanRecorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut FieldVisitor(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(&mut FieldVisitor(fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut FieldVisitor(&mut fields));
        fields.insert("level".into(), event.metadata().level().to_string());
        let parent = ctx.event_span(event).map(|s| s.name().to_owned());
        self.events.lock().unwrap().push(Recorded {
            name: fields.get("message").cloned().unwrap_or_default(),
            parent,
            fields,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span.extensions_mut().remove::<Fields>().unwrap_or_default();
            self.spans.lock().unwrap().push(Recorded {
                name: span.name().to_owned(),
                parent: span.parent().map(|p| p.name().to_owned()),
                fields,
            });
        }
    }
}

impl SpanRecorder {
    fn spans(&self, name: &str) -> Vec<Recorded> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }
    fn events_starting(&self, prefix: &str) -> Vec<Recorded> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.name.starts_with(prefix))
            .cloned()
            .collect()
    }
}

struct Metrics(Vec<(CompositeKey, DebugValue)>);

impl Metrics {
    fn take(snapshotter: &Snapshotter) -> Self {
        Metrics(
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| (key, value))
                .collect(),
        )
    }

    fn matching<'a>(
        &'a self,
        kind: MetricKind,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a DebugValue> + 'a {
        self.0
            .iter()
            .filter(move |(key, _)| {
                key.kind() == kind
                    && key.key().name() == name
                    && labels
                        .iter()
                        .all(|(k, v)| key.key().labels().any(|l| l.key() == *k && l.value() == *v))
            })
            .map(|(_, value)| value)
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(MetricKind::Counter, name, labels)
            .map(|v| match v {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(MetricKind::Histogram, name, labels)
            .flat_map(|v| match v {
                DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect::<Vec<_>>(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .collect()
    }
}

/// Memory backend behind the fault switch, behind both observability layers.
fn observed_backend(memory: &MemoryBackend) -> (Arc<dyn LockBackend>, FaultControl) {
    let (faulty, control) = FaultyBackend::new(Arc::new(memory.clone()));
    (Arc::new(TracingLayer::new(MetricsLayer::new(faulty))), control)
}

fn manager(backend: Arc<dyn LockBackend>, options: LockOptions) -> LockManager {
    LockManager::from_arc(backend, options).expect("valid options")
}

/// Installs a span recorder and a metrics recorder for this thread (the
/// tests run on current-thread runtimes, so spawned tasks report too) until
/// the returned guards drop.
/// The tests of this file run one at a time: tracing caches each callsite's
/// interest process-wide, and a callsite first reached on a thread without
/// a subscriber while another test installs its own can stay disabled there.
/// Each test has its own runtime and thread, so holding this lock across
/// their awaits only serialises the tests (clippy's await_holding_lock is
/// allowed for that).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn record_this_thread() -> (
    SpanRecorder,
    Snapshotter,
    (
        std::sync::MutexGuard<'static, ()>,
        tracing::subscriber::DefaultGuard,
        metrics::LocalRecorderGuard<'static>,
    ),
) {
    let serial = one_at_a_time();
    let spans = SpanRecorder::default();
    let subscriber = tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    tracing::callsite::rebuild_interest_cache();
    // Leaked so the thread-local guard can borrow it for 'static; one per test.
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    let metrics = metrics::set_default_local_recorder(recorder);
    (spans, recorder.snapshotter(), (serial, subscriber, metrics))
}

#[tokio::test(start_paused = true)]
async fn scripted_lifecycle_emits_spans_events_and_metrics() {
    let (spans, snapshotter, _installed) = record_this_thread();

    let memory = MemoryBackend::new();
    let (backend, control) = observed_backend(&memory);
    let holder = manager(backend.clone(), LockOptions::with_ttl(TTL));
    let rival = manager(
        backend,
        LockOptions::with_ttl(TTL).acquire_timeout(Duration::from_millis(100)),
    );

    // Acquire, then contend twice: one try_lock, one lock that times out.
    let guard = holder.lock("k").await.expect("acquire");
    assert!(rival.try_lock("k").await.expect("try_lock").is_none());
    assert!(matches!(rival.lock("k").await, Err(Error::Timeout { .. })));

    // Renew: one interval (TTL / 3) and a bit.
    tokio::time::sleep(TTL / 3 + Duration::from_millis(200)).await;
    assert!(!guard.is_lost());

    // Lose: the backend hangs, renewals never answer, the deadline passes.
    let deadline_before_loss = {
        control.set(Fault::Hang);
        let reason = guard.lost().await;
        assert_eq!(reason, LossReason::DeadlinePassed);
        guard.deadline()
    };
    assert_eq!(
        tokio::time::Instant::now(),
        deadline_before_loss,
        "loss signalled at the deadline"
    );
    // An acquire into the hanging backend: the manager's per-call timeout
    // drops the call, an unknown outcome.
    let err = rival.try_lock("other").await.expect_err("hangs");
    assert!(err.is_outcome_unknown(), "{err}");
    control.heal();
    drop(guard);

    // Release: the rival gets the key once the lost lease has run out.
    tokio::time::sleep(TTL).await;
    let next = rival.lock("k").await.expect("free after the TTL");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(next.release().await.expect("release"), ReleaseOutcome::Released);
    tokio::task::yield_now().await;

    // Spans of the manager.
    let locks = spans.spans("verrou.lock");
    let outcomes: Vec<&str> = locks.iter().map(|s| s.fields["outcome"].as_str()).collect();
    assert_eq!(
        outcomes,
        ["acquired", "busy", "timeout", "error", "acquired"],
        "{locks:#?}"
    );
    assert_eq!(locks[0].fields["attempts"], "1");
    assert!(
        locks[2].fields["attempts"].parse::<u32>().unwrap() >= 2,
        "{:?}",
        locks[2]
    );
    assert_eq!(locks[2].fields["wait_us"], "100000", "waited the whole acquire timeout");
    assert!(
        !spans.spans("verrou.renewer").is_empty(),
        "a renewer span per batch of renewals"
    );

    // Spans of the layer, nested under the manager's: each acquire under
    // the span of its attempt, numbered from 0.
    let acquires = spans.spans("verrou.acquire");
    assert!(
        acquires
            .iter()
            .all(|s| s.parent.as_deref() == Some("verrou.attempt") && s.fields["backend"] == BACKEND),
        "{acquires:#?}"
    );
    let held: Vec<_> = acquires.iter().filter(|s| s.fields["outcome"] == "held").collect();
    assert!(held.len() >= 2, "{acquires:#?}");
    let attempts = spans.spans("verrou.attempt");
    assert!(
        attempts.iter().all(|s| s.parent.as_deref() == Some("verrou.lock")),
        "{attempts:#?}"
    );
    assert!(
        attempts.iter().any(|s| s.fields["attempt"] == "1"),
        "retries carry their attempt: {attempts:#?}"
    );
    assert!(
        acquires.iter().any(|s| s.fields["outcome"] == "cancelled"),
        "{acquires:#?}"
    );
    let renewals = spans.spans("verrou.renew_many");
    assert!(
        renewals
            .iter()
            .any(|s| s.fields["outcome"] == "renewed" && s.fields["renewed"] == "1"),
        "{renewals:#?}"
    );
    assert!(
        spans
            .spans("verrou.release")
            .iter()
            .any(|s| s.fields["outcome"] == "released")
    );

    // One error event for the loss.
    let losses = spans.events_starting("lease lost");
    assert_eq!(losses.len(), 1, "{losses:#?}");
    let loss = &losses[0].fields;
    assert_eq!(loss["level"], "ERROR");
    assert_eq!(loss["key"], "k");
    assert_eq!(loss["reason"], "deadline_passed");
    assert_eq!(loss["noticed_late_us"], "0", "the renewer notices at the deadline");

    // Metrics.
    let m = Metrics::take(&snapshotter);
    assert_eq!(m.counter("verrou_acquisitions_total", &[("backend", BACKEND)]), 2);
    assert!(m.counter("verrou_contentions_total", &[("backend", BACKEND)]) >= 2);
    assert_eq!(m.counter("verrou_unknown_outcomes_total", &[("op", "acquire")]), 1);
    assert_eq!(m.counter("verrou_losses_total", &[("reason", "deadline_passed")]), 1);
    assert_eq!(m.counter("verrou_losses_total", &[("reason", "not_owner")]), 0);
    assert_eq!(
        m.samples("verrou_lock_wait_seconds", &[("outcome", "acquired")]).len(),
        2
    );
    assert_eq!(m.samples("verrou_lock_wait_seconds", &[("outcome", "busy")]).len(), 1);
    assert_eq!(m.samples("verrou_lock_wait_seconds", &[("outcome", "timeout")]), [0.1]);
    let margins = m.samples("verrou_renewal_margin_seconds", &[]);
    assert!(!margins.is_empty());
    assert!(margins.iter().all(|&s| s > 0.0 && s < TTL.as_secs_f64()), "{margins:?}");
    assert!(!m.samples("verrou_renew_latency_seconds", &[]).is_empty());
    assert!(
        !m.samples("verrou_backend_call_seconds", &[("op", "renew_many")])
            .is_empty()
    );
    let holds = m.samples("verrou_hold_seconds", &[]);
    assert_eq!(holds.len(), 2, "{holds:?}");
    assert!((holds[1] - 0.5).abs() < 1e-6, "second lease held 500 ms: {holds:?}");
}

#[tokio::test(start_paused = true)]
async fn a_loss_noticed_late_says_how_late_and_a_clean_release_is_no_loss() {
    let (spans, snapshotter, _installed) = record_this_thread();

    let memory = MemoryBackend::new();
    let (backend, _control) = observed_backend(&memory);
    let locks = manager(backend, LockOptions::with_ttl(TTL).renewal(Renewal::Manual));

    // Manual renewal: nobody watches the deadline; extend() finds it passed
    // one second later.
    let stale = locks.lock("late").await.expect("acquire");
    let deadline = stale.deadline();
    tokio::time::sleep_until(deadline + Duration::from_secs(1)).await;
    assert!(matches!(stale.extend(TTL).await, Err(Error::NotHeld { .. })));
    drop(stale);

    // A clean release, then the old deadline passes: not a loss.
    let clean = locks.lock("clean").await.expect("acquire");
    let handle = clean.handle();
    assert_eq!(clean.release().await.expect("release"), ReleaseOutcome::Released);
    tokio::time::sleep(TTL * 2).await;
    assert!(handle.is_lost(), "the handle reports the passed deadline");

    let losses = spans.events_starting("lease lost");
    assert_eq!(losses.len(), 1, "{losses:#?}");
    assert_eq!(losses[0].fields["key"], "late");
    assert_eq!(losses[0].fields["noticed_late_us"], "1000000");
    let m = Metrics::take(&snapshotter);
    assert_eq!(m.counter("verrou_losses_total", &[]), 1);
    assert_eq!(m.samples("verrou_hold_seconds", &[]).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn lost_token_fires_at_the_deadline_and_on_a_signalled_loss() {
    let _serial = one_at_a_time();
    let memory = MemoryBackend::new();
    let (backend, control) = observed_backend(&memory);
    let manual = manager(backend.clone(), LockOptions::with_ttl(TTL).renewal(Renewal::Manual));
    let guard = manual.lock("manual").await.expect("acquire");
    let token = guard.lost_token();
    let deadline = guard.deadline();
    token.cancelled().await;
    assert_eq!(
        tokio::time::Instant::now(),
        deadline,
        "fires at the local deadline, unwatched"
    );
    drop(guard);

    let auto = manager(backend, LockOptions::with_ttl(TTL));
    let guard = auto.lock("auto").await.expect("acquire");
    let token = guard.lost_token();
    guard.lost_token().cancel();
    assert!(!guard.is_lost(), "cancelling a returned token leaves the lease alone");
    tokio::time::sleep(TTL * 2).await;
    assert!(!token.is_cancelled(), "renewed: not lost");
    control.set(Fault::Hang);
    token.cancelled().await;
    assert!(guard.is_lost());
}
