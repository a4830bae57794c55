//! Every conformance suite on servers whose default isolation level is
//! REPEATABLE READ and SERIALIZABLE (READ COMMITTED is the harness's
//! default: `conformance.rs`, `kinds_conformance.rs`). The backend must not
//! depend on the level a database, role or URL sets.
#![allow(clippy::expect_used, missing_docs)]

use lock_postgres::PostgresBackend;
use lock_testkit::server::PostgresServer;
use lock_testkit::{ElectionSuite, LockSuite, MultiSuite, RwSuite, SemaphoreSuite, VersionedSuite};
use tokio::sync::OnceCell;

macro_rules! isolation_suites {
    ($level:ident, $setting:literal) => {
        mod $level {
            use super::*;

            async fn url() -> String {
                static SERVER: OnceCell<PostgresServer> = OnceCell::const_new();
                SERVER
                    .get_or_init(|| async {
                        PostgresServer::builder()
                            .setting("default_transaction_isolation", $setting)
                            .start()
                            .await
                            .expect("start postgres")
                    })
                    .await
                    .url()
            }

            async fn backend() -> PostgresBackend {
                PostgresBackend::connect(&url().await).await.expect("connect")
            }

            mod lock {
                use super::*;
                lock_testkit::lock_conformance!(real, async { LockSuite::new(backend) });
            }
            mod fair {
                use super::*;
                lock_testkit::fair_conformance!(real, async { LockSuite::new(backend) });
            }
            mod versioned {
                use super::*;
                lock_testkit::versioned_conformance!(real, async { VersionedSuite::new(backend) });
            }
            mod semaphore {
                use super::*;
                lock_testkit::semaphore_conformance!(real, async { SemaphoreSuite::new(backend) });
            }
            mod multi {
                use super::*;
                lock_testkit::multi_conformance!(real, async { MultiSuite::new(backend) });
            }
            mod rw {
                use super::*;
                lock_testkit::rw_conformance!(real, async { RwSuite::new(backend) });
            }
            mod election {
                use super::*;
                lock_testkit::election_conformance!(real, async { ElectionSuite::new(backend) });
            }
        }
    };
}

isolation_suites!(repeatable_read, "repeatable read");
isolation_suites!(serializable, "serializable");
