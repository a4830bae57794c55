//! The Redis-family URL grammar's tests.

use super::*;

const LUA: Flavor = Flavor {
    base: "redis",
    tls_compiled: false,
    crate_name: "lock-redis-lua",
    default_ack_connections: 16,
    also: "",
};

#[test]
fn urls_parse_into_bounded_settings() {
    let c = FamilyConfig::parse("redis://u:p%2Fw@h:7/3?fencing=true&response_timeout=500ms", LUA).ok();
    let c = c.as_ref();
    assert_eq!(c.map(|c| c.hosts.clone()), Some(vec!["h:7".to_owned()]));
    assert_eq!(c.and_then(|c| c.db), Some(3));
    assert_eq!(c.map(|c| c.fencing), Some(true));
    assert_eq!(c.map(|c| c.description()), Some("redis://u:***@h:7/3".to_owned()));
    assert_eq!(c.map(|c| c.node_urls()), Some(vec!["redis://u:p%2Fw@h:7/3".to_owned()]));
    for bad in [
        "redis://h?ack_connections=0",
        "redis://h?ack_connections=18446744073709551615",
        "redis://h?response_timeout=18446744073709551615s",
        "redis://h?replica_ack=1",
        "redis://h?fencing=true&fencing=false",
        "redis://h/1?db=2",
        "redis+cluster://a,b/1",
        "redis://a,b",
        "rediss://h",
        "redis://h?tls_ca=x.pem",
        "redis://h?nope=1",
    ] {
        assert!(FamilyConfig::parse(bad, LUA).is_err(), "{bad}");
    }
}

#[test]
fn hosts_ports_and_databases_are_normalised() {
    let tair = Flavor {
        base: "tair",
        tls_compiled: true,
        crate_name: "lock-tair",
        default_ack_connections: 2,
        also: "redis",
    };
    let url = |u: &str, f: Flavor| FamilyConfig::parse(u, f).map_err(|e| e.to_string());
    assert_eq!(
        url("redis://u:p@example.com/3?connect_timeout=250ms", LUA).map(|c| (c.node_urls(), c.connect_timeout)),
        Ok((
            vec!["redis://u:p@example.com:6379/3".to_owned()],
            Duration::from_millis(250)
        ))
    );
    assert_eq!(
        url("tair+cluster://[::1]:7000,b", tair).map(|c| c.fred_url()),
        Ok("redis-cluster://[::1]:7000?node=b:6379".to_owned())
    );
    assert_eq!(
        url("tairs://h?db=4", tair).map(|c| c.fred_url()),
        Ok("rediss://h:6379/4".to_owned())
    );
    // The Tair backend's own connect also reads redis:// URLs.
    assert_eq!(
        url("redis://h", tair).map(|c| c.description()),
        Ok("tair://h:6379".to_owned())
    );
}

#[test]
fn sentinel_urls_name_the_sentinels_the_master_and_both_credentials() {
    let tair = Flavor {
        base: "tair",
        tls_compiled: true,
        crate_name: "lock-tair",
        default_ack_connections: 2,
        also: "redis",
    };
    let url = |u: &str, f: Flavor| FamilyConfig::parse(u, f).map_err(|e| e.to_string());
    let c = url(
        "redis+sentinel://app:p%40ss@s1,s2:26380,[::1]/mymaster/2?sentinel_username=watch&sentinel_password=s%20cret&fencing=true",
        LUA,
    );
    let c = c.as_ref();
    assert_eq!(c.map(|c| c.sentinel_master.clone()), Ok(Some("mymaster".to_owned())));
    assert_eq!(
        c.map(|c| c.hosts.clone()),
        Ok(vec![
            "s1:26379".to_owned(),
            "s2:26380".to_owned(),
            "[::1]:26379".to_owned()
        ])
    );
    assert_eq!(c.map(|c| c.db), Ok(Some(2)));
    assert_eq!(c.map(|c| c.fencing), Ok(true));
    assert_eq!(
        c.map(|c| c.description()),
        Ok("redis+sentinel://app:***@s1:26379,s2:26380,[::1]:26379/mymaster/2".to_owned())
    );
    assert_eq!(
        c.map(|c| c.node_url("10.0.0.9:6379")),
        Ok("redis://app:p%40ss@10.0.0.9:6379/2".to_owned())
    );
    assert_eq!(
        c.map(|c| c.sentinel_urls()[0].clone()),
        Ok("redis://watch:s%20cret@s1:26379".to_owned())
    );
    assert_eq!(c.map(|c| c.sentinel_credentials()), Ok((Some("watch"), Some("s cret"))));
    assert_eq!(
        c.map(|c| c.credentials_decoded()),
        Ok(Some(("app".to_owned(), "p@ss".to_owned())))
    );
    // The database as a parameter; no sentinel credentials.
    assert_eq!(
        url("redis+sentinel://s1/m?db=3", LUA).map(|c| (c.db, c.sentinel_urls())),
        Ok((Some(3), vec!["redis://s1:26379".to_owned()]))
    );
    // fred's URL: the sentinels as nodes, the service name, the sentinels' credentials.
    assert_eq!(
        url("tairs+sentinel://:pw@s1,s2/m%2Ex/1?sentinel_password=sp", tair).map(|c| (c.scheme(), c.fred_url())),
        Ok((
            "tairs+sentinel".to_owned(),
            "rediss-sentinel://:pw@s1:26379/1?node=s2:26379&sentinelServiceName=m.x&sentinelPassword=sp".to_owned()
        ))
    );
    assert_eq!(
        url("redis+sentinel://s1/m", tair).map(|c| c.description()),
        Ok("tair+sentinel://s1:26379/m".to_owned())
    );
    for (bad, says) in [
        ("redis+sentinel://s1", "MASTER_NAME"),
        ("redis+sentinel://s1/", "MASTER_NAME"),
        ("redis+sentinel:///m", "no host"),
        ("redis+sentinel://s1/m/x", "not a number"),
        ("redis+sentinel://s1/m/1?db=2", "two databases"),
        ("redis+sentinel://s1/m%20/1", "MASTER_NAME"),
        ("rediss+sentinel://s1/m", "feature `tls`"),
        (
            "redis://h?sentinel_password=x",
            "sentinel_username and sentinel_password are for",
        ),
        ("redis+cluster://h?sentinel_username=x", "are for redis+sentinel://"),
        ("redis+sentinel://s1/m?replica_ack=1", "replica_ack_timeout"),
        ("redis+sentinel://s1:0/m", "port"),
    ] {
        match url(bad, LUA) {
            Ok(c) => panic!("{bad} parsed: {c:?}"),
            Err(e) => assert!(e.contains(says), "{bad}: {e}"),
        }
    }
    // The fields set directly are checked too.
    let mut c = FamilyConfig::parse("redis+sentinel://s1/m", LUA).map_err(|e| e.to_string());
    if let Ok(c) = c.as_mut() {
        c.cluster = true;
        assert!(c.validate().is_err());
        c.cluster = false;
        c.sentinel_master = Some(String::new());
        assert!(c.validate().is_err());
    }
}
