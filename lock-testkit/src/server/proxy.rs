//! A small TCP proxy for network faults: latency, blackhole, cut.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::{HarnessError, HarnessResult};

#[derive(Clone, Copy, Debug, Default)]
struct Settings {
    latency: Duration,
    blackhole: bool,
}

#[derive(Debug)]
struct Shared {
    settings: watch::Sender<Settings>,
    /// Cancelled by `cut_all`, then replaced; a child of the proxy's token.
    generation: Mutex<CancellationToken>,
    open: AtomicUsize,
    /// Armed by `close_after_next_reply`; taken by the first connection
    /// that forwards a chunk from the target.
    close_after_reply: AtomicBool,
}

/// A TCP proxy on 127.0.0.1 in front of one target (typically a
/// [`RedisServer`](super::RedisServer)), whose faults are switched at
/// runtime:
///
/// - [`set_latency`](Self::set_latency): every chunk of bytes, in each
///   direction, is delivered that much later (a request/reply round trip
///   gains twice the latency);
/// - [`set_blackhole`](Self::set_blackhole): connections are still accepted
///   but no byte is forwarded either way; bytes are held, as TCP would
///   retransmit them, and flow again when the blackhole is lifted;
/// - [`cut_all`](Self::cut_all): every open connection is reset, on both
///   sides; new connections are accepted as usual;
/// - [`close_after_next_reply`](Self::close_after_next_reply): the next
///   connection to forward bytes from the target is closed right after
///   them (a connection lost between a reply and the next request).
///
/// Runs on the tokio runtime it was started on; dropping it closes the
/// listener and every connection.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl TcpProxy {
    /// Starts a proxy on a free port of 127.0.0.1 forwarding to `target`.
    /// Each accepted connection opens its own connection to `target`; if
    /// that fails, the accepted one is closed.
    ///
    /// # Errors
    /// [`HarnessError::Io`] if the listener cannot be bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the proxy starts forwarding only once the future returns.
    pub async fn start(target: SocketAddr) -> HarnessResult<TcpProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| HarnessError::io("binding the proxy listener", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the proxy address", e))?;
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            settings: watch::Sender::new(Settings::default()),
            generation: Mutex::new(shutdown.child_token()),
            open: AtomicUsize::new(0),
            close_after_reply: AtomicBool::new(false),
        });
        tokio::spawn(accept_loop(listener, target, Arc::clone(&shared), shutdown.clone()));
        Ok(TcpProxy {
            addr,
            target,
            shared,
            shutdown,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:port` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Delays every chunk, in each direction, by `latency` (zero to stop).
    /// Applies to bytes read from now on.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.settings.send_modify(|s| s.latency = latency);
    }

    /// Starts (`true`) or stops (`false`) blackholing: while on, nothing is
    /// forwarded, in either direction, on any connection.
    pub fn set_blackhole(&self, on: bool) {
        self.shared.settings.send_modify(|s| s.blackhole = on);
    }

    /// Resets every open connection (both the client's and the upstream
    /// one). Connections made afterwards work normally.
    pub fn cut_all(&self) {
        let mut generation = self.shared.generation.lock().unwrap_or_else(|e| e.into_inner());
        generation.cancel();
        *generation = self.shutdown.child_token();
    }

    /// Arms a one-shot fault: the next chunk of bytes forwarded from the
    /// target to a client, on whichever connection, is followed by the end
    /// of that connection. The client reads the chunk, then end of stream;
    /// the connection to the target is reset. Other connections, and
    /// connections made afterwards, are untouched.
    pub fn close_after_next_reply(&self) {
        self.shared.close_after_reply.store(true, Ordering::SeqCst);
    }

    /// How many client connections are currently open through the proxy.
    pub fn connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((client, _)) => {
                let cut = shared.generation.lock().unwrap_or_else(|e| e.into_inner()).clone();
                tokio::spawn(serve(client, target, Arc::clone(&shared), cut));
            }
            // E.g. too many open files: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

async fn serve(mut client: TcpStream, target: SocketAddr, shared: Arc<Shared>, cut: CancellationToken) {
    shared.open.fetch_add(1, Ordering::SeqCst);
    let _open = OpenGuard(&shared.open);
    let mut upstream = tokio::select! {
        () = cut.cancelled() => {
            reset(&client);
            return;
        }
        r = TcpStream::connect(target) => match r {
            Ok(s) => s,
            Err(_) => return,
        },
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let closed = CancellationToken::new();
    let end = {
        let (cr, cw) = client.split();
        let (ur, uw) = upstream.split();
        let up = pipe(cr, uw, shared.settings.subscribe(), None);
        let close_after = CloseAfter {
            armed: &shared.close_after_reply,
            closed: closed.clone(),
        };
        let down = pipe(ur, cw, shared.settings.subscribe(), Some(close_after));
        // Biased: once a fault ends the connection, no pipe is polled again
        // (nothing more is forwarded, either way).
        tokio::select! {
            biased;
            () = cut.cancelled() => End::Cut,
            () = closed.cancelled() => End::ClosedAfterReply,
            _ = futures::future::join(up, down) => End::Eof,
        }
    };
    match end {
        End::Cut => {
            reset(&client);
            reset(&upstream);
        }
        // The client already has the chunk and its end of stream.
        End::ClosedAfterReply => reset(&upstream),
        End::Eof => {}
    }
}

/// Why a proxied connection ended.
enum End {
    Cut,
    ClosedAfterReply,
    Eof,
}

/// The `close_after_next_reply` fault, as seen by one connection's
/// target-to-client pipe.
struct CloseAfter<'a> {
    armed: &'a AtomicBool,
    closed: CancellationToken,
}

/// Makes the coming close an RST instead of a FIN.
fn reset(stream: &TcpStream) {
    let _ = socket_zero_linger(stream);
}

#[allow(deprecated)]
fn socket_zero_linger(stream: &TcpStream) -> std::io::Result<()> {
    stream.set_linger(Some(Duration::ZERO))
}

struct OpenGuard<'a>(&'a AtomicUsize);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`, each chunk delivered `latency` after it was read
/// and held while blackholed; half-closes `to` at end of stream, or after
/// the chunk that finds `close_after` armed (and then cancels its token).
async fn pipe<R, W>(mut from: R, mut to: W, settings: watch::Receiver<Settings>, close_after: Option<CloseAfter<'_>>)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader_settings = settings.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let due = Instant::now() + reader_settings.borrow().latency;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let writer = async move {
        let mut settings = settings;
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if settings.wait_for(|s| !s.blackhole).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            if let Some(close) = &close_after
                && close.armed.swap(false, Ordering::SeqCst)
            {
                let _ = to.shutdown().await;
                close.closed.cancel();
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    futures::future::join(reader, writer).await;
}
