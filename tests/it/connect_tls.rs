//! `rediss://` and `tairs://` against a live TLS-only `redis-server`, with a
//! CA and certificates generated here: trusted through `tls_ca`, refused
//! with a clear error otherwise.
#![cfg(all(feature = "redis-lua-tls", feature = "tair-tls"))]
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_testkit::server::RedisServer;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use verrou::{Error, LockOptions};

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA, and a certificate for 127.0.0.1 signed by it.
    fn generate() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key")).expect("ca");
        let server_key = KeyPair::generate().expect("server key");
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params")
            .signed_by(&server_key, &ca)
            .expect("server cert");
        // Another CA, which signed nothing the server presents.
        let mut other_params = CertificateParams::new(Vec::<String>::new()).expect("params");
        other_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let other = CertifiedIssuer::self_signed(other_params, KeyPair::generate().expect("key")).expect("other");
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).expect("write");
        write("ca.pem", ca.pem());
        write("server.pem", server.pem());
        write("server.key", server_key.serialize_pem());
        write("other-ca.pem", other.pem());
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    async fn server(&self, tair: bool) -> RedisServer {
        let builder = RedisServer::builder().tls(self.path("server.pem"), self.path("server.key"), self.path("ca.pem"));
        let builder = if tair { builder.tair_module() } else { builder };
        builder.start().await.expect("TLS redis-server")
    }
}

fn url(scheme: &str, port: u16, ca: &Path) -> String {
    format!("{scheme}://127.0.0.1:{port}?connect_timeout=2s&tls_ca={}", ca.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_urls_connect_with_the_ca_and_refuse_an_untrusted_certificate() {
    let pki = Pki::generate();
    let lua_server = pki.server(false).await;
    let tair_server = pki.server(true).await;
    for (scheme, server) in [("rediss", &lua_server), ("tairs", &tair_server)] {
        // The server speaks TLS only: a plain URL gets nowhere.
        let plain = verrou::connect(&format!(
            "{}://127.0.0.1:{}?connect_timeout=500ms&response_timeout=500ms",
            scheme.trim_end_matches('s'),
            server.port()
        ))
        .await;
        assert!(plain.is_err(), "{scheme}: plain text reached a TLS-only server");

        let backend = verrou::connect(&url(scheme, server.port(), &pki.path("ca.pem")))
            .await
            .unwrap_or_else(|e| panic!("{scheme} with its CA: {e}"));
        let locks = backend
            .manager(LockOptions::with_ttl(Duration::from_millis(500)))
            .expect("manager");
        locks.lock("tls").await.expect("lock").release().await.expect("release");
        let store = backend.store().expect("store");
        store
            .create("tls-value", b"v", verrou::Expiry::Keep)
            .await
            .expect("create");
        assert_eq!(store.get("tls-value").await.expect("get").expect("present").value, b"v");

        for untrusted in [
            url(scheme, server.port(), &pki.path("other-ca.pem")),
            // No tls_ca: the platform's roots, which do not know our CA.
            format!("{scheme}://127.0.0.1:{}?connect_timeout=2s", server.port()),
        ] {
            let err = verrou::connect(&untrusted)
                .await
                .expect_err("untrusted certificate accepted");
            let mut text = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            assert!(matches!(err, Error::Backend { .. }), "{scheme}: {err:?}");
            assert!(
                text.to_lowercase().contains("certificate") || text.contains("UnknownIssuer"),
                "{scheme}: the error does not say the certificate was refused: {text}"
            );
        }
    }
    // A tls_ca that is not there says so.
    match verrou::connect(&url("rediss", lua_server.port(), &pki.path("missing.pem"))).await {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("cannot read tls_ca file"), "{m}"),
        other => panic!("{other:?}"),
    }
}
