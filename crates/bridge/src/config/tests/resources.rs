//! The resource entries: auth types, repositories, database modes, names and limits.

use super::*;

#[test]
fn git_auth_types_and_repositories() {
    let yaml = r#"
name: b
sources:
  - url: http://git.corp
    name: plain
  - url: http://git.corp
    name: bearer
    auth: {type: bearer, token: T1}
    repositories: ["team/*", "/infra/deploy.git"]
  - url: http://git.corp
    name: basic
    auth: {type: basic, username: u, password: p}
  - url: http://git.corp
    name: user
    auth: {token: T2, username: git}
"#;
    let config = load(yaml, &MapEnv::new().with(TOKEN_VAR, "t")).unwrap();
    let auth: Vec<_> = config
        .sources
        .iter()
        .map(|s| s.auth.as_ref().map(GitAuth::authorization))
        .collect();
    assert_eq!(
        auth,
        vec![
            None,
            Some("Bearer T1".to_string()),
            Some(basic_authorization("u", &Secret::new("p"))),
            Some(basic_authorization("git", &Secret::new("T2"))),
        ]
    );
    assert_eq!(
        config.sources[1].repositories,
        ["team/*", "infra/deploy.git"]
    );

    let bad = r#"
name: b
sources:
  - url: http://git.corp
    auth: {type: bearer, username: u}
    repositories: ["../etc", ""]
  - url: http://git.corp
    auth: {type: oauth, token: x}
  - url: http://git.corp
    auth: {username: u, password: p}
"#;
    let err = failure(bad, &MapEnv::new().with(TOKEN_VAR, "t"));
    assert!(!err.contains("sources[2].auth.token"), "{err}");
    assert!(!err.contains("sources[2].auth.password"), "{err}");
    for want in [
        "sources[2].auth.type: missing: without it the type is \"token\", which does not use username and password; add `type: basic`",
        "sources[0].auth.username: not used with auth type \"bearer\"",
        "sources[0].auth.token: required",
        "sources[0].repositories[0]: expected a repository path or glob",
        "sources[0].repositories[1]: expected a repository path or glob",
        "sources[1].auth.type: expected token, bearer or basic, got \"oauth\"",
    ] {
        assert!(err.contains(want), "{want:?} missing from:\n{err}");
    }
}

#[test]
fn database_entries_take_libpq_sslmodes_and_name_a_bad_one() {
    let env = MapEnv::new().with(TOKEN_VAR, "t");
    let config = load(
        "name: b\ndatabases:\n  - {type: postgresql, host: db, database: app, credentials: {username: u, password: p}}\n  - {name: ro, type: postgres, host: db, port: 6432, database: app, credentials: {username: u, password: p}, sslmode: verify-full, sslrootcert: /etc/db-ca.pem, read_only: true, audit_statements: true}\n",
        &env,
    )
    .unwrap();
    let (first, second) = (&config.databases[0], &config.databases[1]);
    assert_eq!(
        (first.name.as_str(), first.port, first.sslmode),
        ("app", 5432, SslMode::Prefer)
    );
    assert!(!first.read_only && !first.audit_statements);
    assert_eq!(
        (second.name.as_str(), second.port, second.sslmode),
        ("ro", 6432, SslMode::VerifyFull)
    );
    assert!(second.read_only && second.audit_statements);
    assert_eq!(
        second.sslrootcert.as_deref(),
        Some(std::path::Path::new("/etc/db-ca.pem"))
    );
    let err = failure(
        "name: b\ndatabases:\n  - {type: postgresql, host: db, database: app, credentials: {username: u, password: p}, sslmode: verify}\n",
        &env,
    );
    assert!(err.contains("databases[0].sslmode"), "{err}");
    assert!(err.contains("verify-full"), "{err}");
}

#[test]
fn registry_and_bridge_names_must_fit_an_image_name() {
    let env = MapEnv::new().with(TOKEN_VAR, "t");
    let config = load(
        "name: dc1\nregistries:\n  - url: registry.corp:5000\n  - {name: mirror, url: https://m.corp}\n",
        &env,
    )
    .unwrap();
    let names: Vec<_> = config.registries.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["registry.corp", "mirror"]);
    let err = failure(
        "name: dc-\nregistries:\n  - {name: Mirror_, url: https://m.corp}\n",
        &env,
    );
    for want in [
        "name: expected lowercase letters and digits",
        "registries[0].name: expected lowercase letters and digits",
    ] {
        assert!(err.contains(want), "{want:?} missing from:\n{err}");
    }
    // A name derived from the host must fit too.
    let err = failure(
        "name: dc1\nregistries:\n  - url: https://a--b.corp\n    token_hosts: [\"auth.corp:8443\", \"user@auth\"]\n",
        &env,
    );
    assert!(err.contains("registries[0].name"), "{err}");
    assert!(err.contains("derived from the url"), "{err}");
    assert!(err.contains("registries[0].token_hosts[1]"), "{err}");
    assert!(!err.contains("token_hosts[0]"), "{err}");
    // Without registries the bridge name keeps its wider rule.
    assert!(load("name: dc-\n", &env).is_ok());
    // The API's path pasted into the url: the root is asked for.
    let err = failure(
        "name: dc1\nregistries:\n  - {name: reg, url: \"http://127.0.0.1:5000/v2/\"}\n",
        &env,
    );
    assert!(
        err.contains("registries[0].url") && err.contains("give the registry's root"),
        "{err}"
    );
}

#[test]
fn api_auth_types() {
    let yaml = r#"
name: b
apis:
  - {name: a, url: http://a, auth: {type: bearer, token: T}}
  - {name: h, url: http://h, auth: {type: header, name: X-API-Key, value: V}}
  - {name: bad, url: http://b, auth: {type: header, name: "Content-Length", value: "x", token: t}}
  - {name: worse, url: http://w, auth: {type: digest}, tls_ca_file: ""}
"#;
    let err = failure(yaml, &MapEnv::new().with(TOKEN_VAR, "t"));
    for want in [
        "apis[2].auth.token: not used with auth type \"header\"",
        "apis[2].auth.name: expected an HTTP header name",
        "apis[3].auth.type: expected basic, bearer or header, got \"digest\"",
        // Said with the entry's other errors, not only once they are fixed.
        "apis[3].tls_ca_file: expected a file path",
    ] {
        assert!(err.contains(want), "{want:?} missing from:\n{err}");
    }
    let good = yaml.lines().take(5).collect::<Vec<_>>().join("\n");
    let config = load(&good, &MapEnv::new().with(TOKEN_VAR, "t")).unwrap();
    let headers: Vec<_> = config
        .apis
        .iter()
        .map(|a| {
            let (name, value) = a.auth.as_ref().unwrap().header();
            (name.to_string(), value)
        })
        .collect();
    assert_eq!(
        headers,
        [
            ("authorization".to_string(), "Bearer T".to_string()),
            ("x-api-key".to_string(), "V".to_string())
        ]
    );
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("\"T\"") && !debug.contains("\"V\""),
        "{debug}"
    );
}

/// A secret read whole from a file (a Kubernetes secret, an env file) keeps its last line
/// break: sent in a header, it would have left the request without its credential.
#[test]
fn a_credential_a_header_cannot_carry_is_named() {
    let yaml = r#"
name: b
apis:
  - {name: a, url: http://a, auth: {type: bearer, token: "${API_TOKEN}"}}
  - {name: u, url: http://u, auth: {type: basic, username: "svc:ci", password: p}}
sources:
  - {name: g, url: http://g, auth: {type: bearer, token: "${GIT_TOKEN}"}}
  - {name: t, url: http://t, auth: {type: token, username: "a:b", token: x}}
registries:
  - {name: r, url: http://r, auth: {username: "me:you", password: p}}
"#;
    let env = MapEnv::new()
        .with(TOKEN_VAR, "bridge-token\n")
        .with("API_TOKEN", "abc\n")
        .with("GIT_TOKEN", "a\u{7}b");
    let err = failure(yaml, &env);
    for want in [
        "token (from SERVICE_BRIDGE_TOKEN): expected printable text without line breaks (it ends with a line break",
        "apis[0].auth.token: expected printable text without line breaks (it ends with a line break",
        "sources[0].auth.token: expected printable text without line breaks (it holds a control character",
        "apis[1].auth.username: must not contain `:`",
        "sources[1].auth.username: must not contain `:`",
        "registries[0].auth.username: must not contain `:`",
    ] {
        assert!(err.contains(want), "{want:?} missing from:\n{err}");
    }
    assert!(
        !err.contains("abc") && !err.contains("bridge-token"),
        "{err}"
    );
}

#[test]
fn health_check_address() {
    let env = MapEnv::new().with(TOKEN_VAR, "t");
    let config = load("name: b\n", &env).unwrap();
    assert_eq!(config.health_check_address, DEFAULT_HEALTH_CHECK_ADDRESS);
    let config = load("name: b\nhealth_check_address: 127.0.0.1\n", &env).unwrap();
    assert_eq!(config.health_check_address.to_string(), "127.0.0.1");
    let err = failure("name: b\nhealth_check_address: localhost\n", &env);
    assert!(
        err.contains("bridge.yaml:2:23: health_check_address: expected an IP address"),
        "{err}"
    );
}

#[test]
fn an_entry_limit_above_the_bridges_is_said() {
    let yaml = "name: n\ntoken: t\nmax_connections: 10\napis:\n  - {name: a, url: http://a, max_connections: 50}\n  - {name: b, url: http://b, max_connections: 5}\n";
    let config = load(yaml, &MapEnv::new()).unwrap();
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]
            .starts_with("apis[0].max_connections 50 (a) is above the bridge's max_connections 10"),
        "{warnings:?}"
    );
}

#[test]
fn a_root_certificate_no_sslmode_uses_is_said() {
    let yaml = "name: n\ntoken: t\ndatabases:\n  - {name: app, type: postgresql, host: db, database: app, credentials: {username: u, password: p}, sslrootcert: /etc/db-ca.pem}\n  - {name: checked, type: postgresql, host: db, database: app, credentials: {username: u, password: p}, sslmode: verify-ca, sslrootcert: /etc/db-ca.pem}\n";
    let config = load(yaml, &MapEnv::new()).unwrap();
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("databases[0].sslrootcert is set (app), but its sslmode is prefer")
            && warnings[0].contains("sslmode: verify-full"),
        "{warnings:?}"
    );
}

#[test]
fn a_secret_too_short_to_be_watched_for_is_said() {
    let yaml = "name: n\ntoken: t\napis:\n  - {name: a, url: http://a, auth: {type: bearer, token: Zq5x}}\n  - {name: b, url: http://b, auth: {username: u, password: long-enough}}\n  - {name: c, url: http://c, auth: {type: header, name: Authorization, value: \"Token Zq5x\"}}\nsources:\n  - {name: g, url: http://g, auth: {token: abc1234}}\nregistries:\n  - {name: r, url: http://r, auth: {username: u, password: secret}}\n";
    let config = load(yaml, &MapEnv::new()).unwrap();
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert!(
        warnings[0].starts_with("apis[0].auth.token (a) is shorter than 8 characters")
            && warnings[1].starts_with("apis[2].auth.value (c) is shorter than 8 characters")
            && warnings[2].starts_with("sources[0].auth.token (g) is shorter than 8 characters")
            && warnings[3]
                .starts_with("registries[0].auth.password (r) is shorter than 8 characters"),
        "{warnings:?}"
    );
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("Zq5x") || w.contains("abc1234")),
        "a warning must not show the secret: {warnings:?}"
    );
}
