//! Watching locks: tracing spans and Prometheus metrics for a short contended
//! run on the in-memory backend, plus one deliberately lost lease.
//!
//! The backend is wrapped in `TracingLayer` (a span per backend call) and
//! `MetricsLayer` (per-call counters and latency); the manager adds its own
//! spans (`verrou.lock`, `verrou.with_lock`, `verrou.renewer`), an `error!`
//! event per lost lease, and lease metrics (wait, hold time, renewal margin,
//! losses). At the end the Prometheus exposition text is printed.
//!
//! Run: `cargo run --example observability --features metrics`
//! (`RUST_LOG=lock_core=info` adds one line per backend call.)

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;
use verrou::layers::{MetricsLayer, TracingLayer};
use verrou::memory::MemoryBackend;
use verrou::{LockManager, LockOptions, Renewal};

const WORKERS: usize = 4;
const ROUNDS: usize = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Manager spans print when they close, with their fields (wait, attempts, outcome).
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("lock_core::observe=debug"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .compact()
        .init();
    let prometheus = PrometheusBuilder::new().install_recorder()?;

    let backend = TracingLayer::new(MetricsLayer::new(MemoryBackend::new()));
    let options = LockOptions::with_ttl(Duration::from_millis(300));
    let locks = LockManager::with_options(backend, options)?;

    // Contention: every worker wants the same key; each hold spans a renewal.
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let locks = locks.clone();
        workers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                locks
                    .with_lock("report", |_lease| tokio::time::sleep(Duration::from_millis(120)))
                    .await?;
            }
            tracing::debug!(worker, "done");
            Ok::<_, verrou::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }

    // A lease nobody renews, checked too late: one `lease lost` error event.
    let manual = locks.options().clone().renewal(Renewal::Manual);
    let forgotten = locks.lock_opts("forgotten", &manual).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let refused = forgotten.extend(Duration::from_millis(300)).await;
    println!(
        "\nextend after the deadline: {}",
        refused.err().map_or("ok?".into(), |e| e.to_string())
    );
    drop(forgotten);

    println!("\n--- Prometheus metrics ---\n{}", prometheus.render());
    Ok(())
}
