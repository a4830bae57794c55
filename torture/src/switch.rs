//! A TCP forwarder whose upstream can be moved: what a client sees when a
//! failover moves the primary behind a stable address (a virtual IP, a
//! Sentinel-aware proxy). lock-testkit's `TcpProxy` has a fixed target.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A forwarder on a free loopback port.
pub struct Switch {
    addr: SocketAddr,
    shared: Arc<Mutex<(SocketAddr, CancellationToken)>>,
    shutdown: CancellationToken,
}

impl Switch {
    /// Start forwarding to `target`.
    ///
    /// # Errors
    /// Binding the listener.
    pub async fn start(target: SocketAddr) -> std::io::Result<Switch> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Mutex::new((target, shutdown.child_token())));
        tokio::spawn(accept(listener, shared.clone(), shutdown.clone()));
        Ok(Switch { addr, shared, shutdown })
    }

    /// The forwarder's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://` URL of the forwarder.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Forward new connections to `target` and reset the open ones.
    pub fn retarget(&self, target: SocketAddr) {
        let mut s = match self.shared.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        s.1.cancel();
        *s = (target, self.shutdown.child_token());
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn accept(
    listener: TcpListener,
    shared: Arc<Mutex<(SocketAddr, CancellationToken)>>,
    shutdown: CancellationToken,
) {
    loop {
        let (mut inbound, _) = tokio::select! {
            () = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => continue,
            },
        };
        let (target, cut) = match shared.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        };
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(target).await else {
                return;
            };
            tokio::select! {
                () = cut.cancelled() => {}
                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
            }
        });
    }
}
