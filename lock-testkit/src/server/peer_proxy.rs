//! A proxy in front of one etcd member's peer port that refuses the
//! connections of chosen member processes: the partition fault of
//! [`EtcdCluster::partitionable`](super::EtcdCluster::partitionable).
//!
//! Every connection between two members goes through the proxy of the one
//! that was dialled. The proxy finds which process dialled (the socket of
//! the connection's source port, in `/proc/net/tcp` and the processes'
//! descriptors) and closes the connection when that process is blocked —
//! Raft streams and pipelines, lease forwarding, version probes alike.
//! Blocking cuts every open connection, so the members dial again and meet
//! the new rule. Two proxies blocking each other's members cut both
//! directions between them.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::error::{HarnessError, HarnessResult};

#[derive(Debug)]
pub(crate) struct PeerProxy {
    addr: SocketAddr,
    blocked: Arc<Mutex<HashSet<u32>>>,
    generation: Arc<Mutex<CancellationToken>>,
    shutdown: CancellationToken,
}

impl PeerProxy {
    /// A proxy on a free port of 127.0.0.1 forwarding to `target`.
    pub(crate) async fn start(target: SocketAddr) -> HarnessResult<PeerProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| HarnessError::io("binding a peer proxy", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the peer proxy address", e))?;
        let shutdown = CancellationToken::new();
        let proxy = PeerProxy {
            addr,
            blocked: Arc::default(),
            generation: Arc::new(Mutex::new(shutdown.child_token())),
            shutdown: shutdown.clone(),
        };
        let (blocked, generation) = (proxy.blocked.clone(), proxy.generation.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = shutdown.cancelled() => return,
                    r = listener.accept() => r,
                };
                match accepted {
                    Ok((conn, from)) => {
                        let cut = generation.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        let pids = blocked.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        tokio::spawn(serve(conn, from, addr, target, pids, cut));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(proxy)
    }

    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Refuse the connections of processes `pids` from now on, and cut
    /// every open connection.
    pub(crate) fn block(&self, pids: HashSet<u32>) {
        *self.blocked.lock().unwrap_or_else(|e| e.into_inner()) = pids;
        let mut generation = self.generation.lock().unwrap_or_else(|e| e.into_inner());
        generation.cancel();
        *generation = self.shutdown.child_token();
    }
}

impl Drop for PeerProxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The socket inode of the TCP connection from `from` to `to` (loopback,
/// IPv4 or IPv6), from `/proc/net/tcp*`.
fn socket_inode(from: SocketAddr, to: SocketAddr) -> Option<String> {
    let ports = (format!(":{:04X}", from.port()), format!(":{:04X}", to.port()));
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        text.lines().skip(1).find_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (local, remote, inode) = (cols.get(1)?, cols.get(2)?, cols.get(9)?);
            (local.ends_with(&ports.0) && remote.ends_with(&ports.1)).then(|| (*inode).to_owned())
        })
    })
}

/// Whether process `pid` holds the socket `inode`.
fn holds_socket(pid: u32, inode: &str) -> bool {
    let wanted = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str()))
}

async fn serve(
    mut conn: TcpStream,
    from: SocketAddr,
    me: SocketAddr,
    target: SocketAddr,
    blocked: HashSet<u32>,
    cut: CancellationToken,
) {
    if !blocked.is_empty() {
        let refused = tokio::task::spawn_blocking(move || {
            socket_inode(from, me).is_some_and(|inode| blocked.iter().any(|pid| holds_socket(*pid, &inode)))
        })
        .await
        .unwrap_or(true);
        if refused {
            return;
        }
    }
    let relay = async {
        let mut upstream = TcpStream::connect(target).await.ok()?;
        let _ = upstream.set_nodelay(true);
        let _ = conn.set_nodelay(true);
        let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
        Some(())
    };
    tokio::select! {
        () = cut.cancelled() => {}
        _ = relay => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::expect_used)] // test assertions
    fn the_dialling_process_is_found_by_its_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let to = listener.local_addr().expect("addr");
        let dialled = std::net::TcpStream::connect(to).expect("connect");
        let from = dialled.local_addr().expect("addr");
        let inode = socket_inode(from, to).expect("the connection is in /proc/net/tcp");
        assert!(holds_socket(std::process::id(), &inode), "this process dialled");
    }
}
