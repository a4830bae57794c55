//! The command never prints a byte of a URL's password, whatever delimiters
//! the password holds unencoded (`/`, `?`, `#`, `@`), in any subcommand's
//! error output, whether the URL comes from `--url` or `VERROU_URL`.
#![allow(clippy::expect_used, clippy::panic, missing_docs)]

use crate::common::verrou;

const HALVES: [&str; 2] = ["Sq7Kw", "Vx4Ym"];

#[tokio::test]
async fn a_password_is_never_printed() {
    for mid in ["/", "?", "#", "@", "%2F"] {
        let password = format!("{}{mid}{}", HALVES[0], HALVES[1]);
        for url in [
            format!("redis://app:{password}@127.0.0.1:1?connect_timeout=200ms"),
            format!("tair://app:{password}@127.0.0.1:1?connect_timeout=200ms"),
            format!("postgres://app:{password}@127.0.0.1:1/db"),
            format!("etcd://app:{password}@127.0.0.1:1?connect_timeout=200ms"),
        ] {
            for args in [vec!["status", "job"], vec!["lock", "--no-wait", "job", "--", "true"]] {
                for via_flag in [false, true] {
                    let mut cmd = verrou(if via_flag { "" } else { &url });
                    if via_flag {
                        cmd.env_remove("VERROU_URL").args(["--url", &url]);
                    }
                    let out = cmd.args(&args).output().await.expect("run verrou");
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    assert!(!out.status.success(), "{url} {args:?}: nothing listens there");
                    for half in HALVES {
                        assert!(!text.contains(half), "{url} {args:?}: the password is printed: {text}");
                    }
                }
            }
        }
    }
}
