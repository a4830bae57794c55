//! A [`NetHost`]: one network namespace on a [`Network`](super::Network),
//! with a thread inside it that runs the futures it is given.

use std::fmt;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::error::{HarnessError, HarnessResult};
use super::netns::{NetInner, run_ip};
use super::resp::RespValue;
use super::resp_client::RespClient;

/// One host: a network namespace on a [`Network`](super::Network). Cheap to clone; the
/// namespace is deleted when the last clone is dropped.
#[derive(Clone)]
pub struct NetHost {
    pub(super) inner: Arc<HostInner>,
    // Keeps the switch alive as long as a host is.
    pub(super) _net: Arc<NetInner>,
}

pub(super) struct HostInner {
    pub(super) ip: PathBuf,
    pub(super) ns: String,
    pub(super) addr: Ipv4Addr,
    pub(super) exec: OnceLock<Executor>,
}

/// A thread inside the namespace running a current-thread runtime.
pub(super) struct Executor {
    handle: tokio::runtime::Handle,
    // Dropping it ends the thread's `block_on`.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        // Stop the executor thread first (it holds the namespace too).
        drop(self.exec.take());
        let _ = run_ip(&self.ip, &["netns", "del", &self.ns]);
    }
}

impl fmt::Debug for NetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetHost")
            .field("ns", &self.inner.ns)
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl NetHost {
    /// The namespace's name (`ip netns exec NAME ...`).
    pub fn name(&self) -> &str {
        &self.inner.ns
    }

    /// The host's address on the network.
    pub fn addr(&self) -> Ipv4Addr {
        self.inner.addr
    }

    pub(super) fn index(&self) -> usize {
        usize::from(self.inner.addr.octets()[3]).saturating_sub(1)
    }

    /// Moves the calling thread into this host's namespace, for good:
    /// every socket it (and every thread it spawns) opens afterwards is on
    /// this host. For a client thread, before it builds its runtime.
    ///
    /// # Errors
    /// Opening `/run/netns/NAME` or `setns(2)` failing.
    pub fn enter(&self) -> HarnessResult<()> {
        enter_path(&self.ns_path())
    }

    fn ns_path(&self) -> String {
        format!("/run/netns/{}", self.inner.ns)
    }

    pub(super) fn executor(&self) -> HarnessResult<&Executor> {
        if let Some(e) = self.inner.exec.get() {
            return Ok(e);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // The path, not a clone of the host: the thread must not keep the
        // namespace alive.
        let path = self.ns_path();
        std::thread::Builder::new()
            .name(format!("netns-{}", self.inner.ns))
            .spawn(move || {
                let rt = enter_path(&path).and_then(|()| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| HarnessError::io("building the namespace's runtime", e))
                });
                match rt {
                    Ok(rt) => {
                        let _ = tx.send(Ok(rt.handle().clone()));
                        rt.block_on(async move {
                            let _ = stop_rx.await;
                        });
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| HarnessError::io("spawning the namespace's thread", e))?;
        let handle = rx
            .recv()
            .map_err(|_| HarnessError::Setup("the namespace's thread exited".into()))??;
        let _ = self.inner.exec.set(Executor { handle, _stop: stop_tx });
        self.inner
            .exec
            .get()
            .ok_or_else(|| HarnessError::Setup("namespace executor missing".into()))
    }

    /// A handle of the runtime running inside this host: futures spawned on
    /// it open their sockets on this host.
    ///
    /// # Errors
    /// The host's thread could not be started.
    pub fn handle(&self) -> HarnessResult<tokio::runtime::Handle> {
        Ok(self.executor()?.handle.clone())
    }

    /// Runs `f()` inside this host (on its thread) and returns its output.
    ///
    /// # Errors
    /// The host's thread could not be started, or the task panicked.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop the task: it runs to its end on
    /// the host's thread.
    pub async fn run<F, Fut, T>(&self, f: F) -> HarnessResult<T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let handle = self.handle()?;
        handle
            .spawn(async move { f().await })
            .await
            .map_err(|e| HarnessError::Setup(format!("task on {} failed: {e}", self.inner.ns)))
    }

    /// Runs one RESP command against `addr` from this host, bounded by
    /// `timeout` (connect and reply).
    ///
    /// # Errors
    /// As [`RespClient::cmd`], or [`HarnessError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// As [`run`](Self::run).
    pub async fn cmd(&self, addr: SocketAddr, args: &[&str], timeout: Duration) -> HarnessResult<RespValue> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let what = format!("{} from {}", args.join(" "), self.inner.ns);
        self.run(move || async move {
            tokio::time::timeout(timeout, async {
                let mut c = RespClient::connect_timeout(addr, timeout).await?;
                c.cmd(&args).await
            })
            .await
            .map_err(|_| HarnessError::Timeout { what, after: timeout })?
        })
        .await?
    }
}

fn enter_path(path: &str) -> HarnessResult<()> {
    let file = File::open(path).map_err(|e| HarnessError::io(format!("opening {path}"), e))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| HarnessError::io(format!("setns into {path}"), e.into()))
}
