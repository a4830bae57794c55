//! Ports for the servers the harness starts: on 127.0.0.1, below the
//! ephemeral range, never the default Redis port, never handed out twice.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::error::{HarnessError, HarnessResult};

/// The cluster bus listens on the client port plus this.
pub(crate) const CLUSTER_BUS_OFFSET: u16 = 10000;

/// Ports handed out by this process, never handed out twice: a killed
/// server's port stays its own for a later restart.
fn used_ports() -> MutexGuard<'static, HashSet<u16>> {
    static USED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    USED.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A free port below Linux's default ephemeral range (32768-60999), so
/// outgoing connections do not take it between a kill and a restart. A
/// cluster node also needs `port + 10000` (its bus) free.
pub(crate) fn pick_port(cluster: bool) -> HarnessResult<u16> {
    let (lo, hi): (u16, u16) = if cluster { (12000, 22000) } else { (12000, 32000) };
    let mut used = used_ports();
    for _ in 0..500 {
        let mut r = [0u8; 2];
        getrandom::fill(&mut r).map_err(|e| HarnessError::Setup(format!("getrandom: {e}")))?;
        let port = lo + u16::from_le_bytes(r) % (hi - lo);
        let bus = port + CLUSTER_BUS_OFFSET;
        if used.contains(&port) || (cluster && used.contains(&bus)) {
            continue;
        }
        if bindable(port) && (!cluster || bindable(bus)) {
            used.insert(port);
            if cluster {
                used.insert(bus);
            }
            return Ok(port);
        }
    }
    Err(HarnessError::Setup(format!(
        "no free port found in {lo}..{hi} on 127.0.0.1"
    )))
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README: the tests never use the default Redis port (nor as a
    /// cluster bus port).
    #[test]
    fn ports_are_never_the_default_redis_port() {
        const DEFAULT_REDIS_PORT: u16 = 6_379;
        for cluster in [false, true] {
            for _ in 0..200 {
                let port = pick_port(cluster).expect("a free port");
                assert!((12000..32000).contains(&port), "{port}");
                assert_ne!(port, DEFAULT_REDIS_PORT);
                if cluster {
                    assert_ne!(port + CLUSTER_BUS_OFFSET, DEFAULT_REDIS_PORT);
                }
            }
        }
    }
}
