//! The conformance suites of the other lock kinds (semaphore, multi-key,
//! read-write, leader election) on one real PostgreSQL server, and through
//! PgBouncer in transaction mode.
#![allow(clippy::expect_used, missing_docs)]

use lock_postgres::PostgresBackend;
use lock_testkit::server::{PgBouncer, PostgresServer};
use lock_testkit::{ElectionSuite, MultiSuite, RwSuite, SemaphoreSuite};
use tokio::sync::OnceCell;

/// One server and one PgBouncer in front of it for the whole file.
async fn servers() -> &'static (PostgresServer, PgBouncer) {
    static BOTH: OnceCell<(PostgresServer, PgBouncer)> = OnceCell::const_new();
    BOTH.get_or_init(|| async {
        let server = PostgresServer::start().await.expect("start postgres");
        let bouncer = PgBouncer::start(&server).await.expect("start pgbouncer");
        (server, bouncer)
    })
    .await
}

async fn direct() -> PostgresBackend {
    PostgresBackend::connect(&servers().await.0.url())
        .await
        .expect("connect")
}

async fn bounced() -> PostgresBackend {
    PostgresBackend::connect(&servers().await.1.url())
        .await
        .expect("connect through pgbouncer")
}

mod semaphore {
    use super::*;
    lock_testkit::semaphore_conformance!(real, async { SemaphoreSuite::new(direct) });
    mod through_pgbouncer {
        use super::*;
        lock_testkit::semaphore_conformance!(real, async { SemaphoreSuite::new(bounced) });
    }
}

mod multi {
    use super::*;
    lock_testkit::multi_conformance!(real, async { MultiSuite::new(direct) });
    mod through_pgbouncer {
        use super::*;
        lock_testkit::multi_conformance!(real, async { MultiSuite::new(bounced) });
    }
}

mod rw {
    use super::*;
    lock_testkit::rw_conformance!(real, async { RwSuite::new(direct) });
    mod through_pgbouncer {
        use super::*;
        lock_testkit::rw_conformance!(real, async { RwSuite::new(bounced) });
    }
}

mod election {
    use super::*;
    lock_testkit::election_conformance!(real, async { ElectionSuite::new(direct) });
    mod through_pgbouncer {
        use super::*;
        lock_testkit::election_conformance!(real, async { ElectionSuite::new(bounced) });
    }
}
