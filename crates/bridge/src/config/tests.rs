//! Loading the configuration end to end: file, `${NAME}`, environment, validation.

use std::time::Duration;

use super::*;

/// A configuration shaped like the product's documented sample, with secrets from the
/// environment.
const SAMPLE: &str = r#"
token: ${BRIDGE_TOKEN}
name: production-bridge
api_url: https://api.example.com
heartbeat_interval: 30
reconnect_delay: 5
log_level: info
log_format: json
max_connections: 10
max_memory_mb: 512
proxy_url: http://proxy-user:${PROXY_PASSWORD}@proxy.corp.example:3128
tls_verify: true
health_check_port: 8080

sources:
  - type: git
    url: https://git.internal.company.com
    auth:
      type: token
      token: ${GIT_TOKEN}
  - type: git
    url: https://git.internal.company.com/legacy
    allow_push: true

apis:
  - name: internal-api
    url: https://api.internal.company.com
    auth:
      type: basic
      username: ${API_USER}
      password: ${API_PASSWORD}
    allow:
      - method: get
        path: /v1/*

registries:
  - url: registry.internal.company.com:5000
    auth:
      username: puller
      password: ${REGISTRY_PASSWORD}
"#;

const SECRETS: [(&str, &str); 5] = [
    ("BRIDGE_TOKEN", "tok-SECRET-bridge"),
    ("PROXY_PASSWORD", "SECRET-proxy"),
    ("GIT_TOKEN", "SECRET-git-token"),
    ("API_PASSWORD", "SECRET-api"),
    ("REGISTRY_PASSWORD", "SECRET-registry"),
];

fn sample_env() -> MapEnv {
    SECRETS.into_iter().chain([("API_USER", "svc")]).collect()
}

fn load(yaml: &str, env: &MapEnv) -> Result<Config, ConfigError> {
    Config::from_yaml(yaml, "bridge.yaml", env)
}

/// The rendered error of a configuration that must fail.
fn failure(yaml: &str, env: &MapEnv) -> String {
    load(yaml, env)
        .expect_err("config should be invalid")
        .to_string()
}

#[test]
fn sample_config_parses() {
    let config = load(SAMPLE, &sample_env()).unwrap();
    assert_eq!(config.token.expose(), "tok-SECRET-bridge");
    assert_eq!(config.name, "production-bridge");
    assert_eq!(config.api_url.as_str(), "https://api.example.com/");
    assert_eq!(config.heartbeat_interval, Duration::from_secs(30));
    assert_eq!(config.reconnect_delay, Duration::from_secs(5));
    assert_eq!(
        (config.log_level, config.log_format),
        (LogLevel::Info, LogFormat::Json)
    );
    assert_eq!((config.max_connections, config.max_memory_mb), (10, 512));
    assert!(config.tls_verify);
    assert_eq!(config.health_check_port, 8080);
    assert_eq!(config.audit_log, AuditTarget::Stdout);

    let proxy = config.proxy_url.as_ref().unwrap();
    assert_eq!((proxy.host(), proxy.port()), ("proxy.corp.example", 3128));
    assert_eq!(proxy.credentials().unwrap().1.expose(), "SECRET-proxy");

    let [first, second] = &config.sources[..] else {
        panic!("two sources")
    };
    assert_eq!(first.name, "git.internal.company.com");
    assert_eq!(
        first.auth.as_ref().unwrap().authorization(),
        basic_authorization(GIT_TOKEN_USER, &Secret::new("SECRET-git-token"))
    );
    assert!(!first.allow_push);
    assert_eq!(second.name, "git.internal.company.com-2");
    assert!(second.allow_push && second.auth.is_none());

    let registry = &config.registries[0];
    assert_eq!(registry.name, "registry.internal.company.com");
    assert_eq!(
        registry.url.as_str(),
        "https://registry.internal.company.com:5000/"
    );
    assert_eq!(
        registry.auth.as_ref().unwrap().password.expose(),
        "SECRET-registry"
    );
    assert!(!registry.allow_push && registry.token_hosts.is_empty());

    let api = &config.apis[0];
    assert_eq!(api.name, "internal-api");
    assert_eq!(
        api.allow,
        vec![AllowRule {
            method: "GET".into(),
            path: "/v1/*".into()
        }]
    );
    assert_eq!(
        api.auth.as_ref().unwrap().header().1,
        basic_authorization("svc", &Secret::new("SECRET-api"))
    );

    assert_eq!(
        config.resources(),
        vec![
            (ResourceKind::Git, "git.internal.company.com"),
            (ResourceKind::Git, "git.internal.company.com-2"),
            (ResourceKind::Api, "internal-api"),
            (ResourceKind::Registry, "registry.internal.company.com"),
        ]
    );
}

#[test]
fn debug_never_shows_secrets() {
    let config = load(SAMPLE, &sample_env()).unwrap();
    let debug = format!("{config:?} {config:#?}");
    for (_, secret) in SECRETS {
        assert!(!debug.contains(secret), "{secret} leaked into Debug");
    }
    assert!(debug.contains("***"));

    // Nor do error messages about a secret's value.
    let yaml = "token: SECRET-tok${\nname: n\nproxy_url: http://u:SECRET-pw@proxy:99999\n";
    let err = load(yaml, &MapEnv::new()).unwrap_err();
    let shown = format!("{err} {err:?}");
    assert_eq!(err.problems().len(), 2, "{shown}");
    assert!(!shown.contains("SECRET"), "{shown}");
}

#[test]
fn defaults_apply_and_environment_alone_suffices() {
    let env = MapEnv::new()
        .with(TOKEN_VAR, "t0ken")
        .with(NAME_VAR, "edge-1");
    let config = Config::from_env(&env).unwrap();
    assert_eq!(config.api_url.as_str(), "https://127.0.0.1:8443/");
    assert_eq!(
        config.heartbeat_interval,
        Duration::from_secs(DEFAULT_HEARTBEAT_INTERVAL_SECS)
    );
    assert_eq!(
        config.reconnect_delay,
        Duration::from_secs(DEFAULT_RECONNECT_DELAY_SECS)
    );
    assert_eq!(config.max_connections, DEFAULT_MAX_CONNECTIONS);
    assert_eq!(config.max_memory_mb, DEFAULT_MAX_MEMORY_MB);
    assert_eq!(config.health_check_port, DEFAULT_HEALTH_CHECK_PORT);
    assert!(config.tls_verify && config.proxy_url.is_none());
    assert!(config.resources().is_empty());
    // An empty or comment-only file is the same as no file.
    assert_eq!(load("# nothing yet\n", &env).unwrap().name, "edge-1");
}

#[test]
fn environment_overrides_the_file() {
    let yaml = "token: file-token\nname: file-name\napi_url: https://file.example\n\
                log_level: error\nheartbeat_interval: 30\n";
    let env = MapEnv::new()
        .with(TOKEN_VAR, "env-token")
        .with(NAME_VAR, "env-name")
        .with(API_URL_VAR, "https://env.example:9443")
        .with(LOG_LEVEL_VAR, "DEBUG")
        .with(HEARTBEAT_INTERVAL_VAR, "7");
    let config = load(yaml, &env).unwrap();
    assert_eq!(config.token.expose(), "env-token");
    assert_eq!(config.name, "env-name");
    assert_eq!(config.api_url.as_str(), "https://env.example:9443/");
    assert_eq!(config.log_level, LogLevel::Debug);
    assert_eq!(config.heartbeat_interval, Duration::from_secs(7));
    // Empty variables do not override.
    let env = MapEnv::new().with(TOKEN_VAR, "").with(NAME_VAR, "");
    assert_eq!(load(yaml, &env).unwrap().name, "file-name");
}

#[test]
fn bad_environment_values_name_the_variable() {
    let env = MapEnv::new()
        .with(TOKEN_VAR, "t")
        .with(NAME_VAR, "bad name")
        .with(LOG_LEVEL_VAR, "verbose")
        .with(HEARTBEAT_INTERVAL_VAR, "30s")
        .with(API_URL_VAR, "http://cloud.example");
    let text = Config::from_env(&env).unwrap_err().to_string();
    for expected in [
        "environment: name (from SERVICE_BRIDGE_NAME): expected 1 to 63 lowercase letters",
        "environment: log_level (from SERVICE_LOG_LEVEL): expected one of debug, info, warn, error, got \"verbose\"",
        "environment: heartbeat_interval (from SERVICE_HEARTBEAT_INTERVAL): expected a whole number, got \"30s\"",
        "environment: api_url (from SERVICE_API_URL): expected an absolute https URL, got scheme \"http\"",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(
        text.starts_with("environment: no configuration file was given (--config FILE"),
        "{text}"
    );
    let env = MapEnv::new()
        .with(TOKEN_VAR, "t")
        .with(NAME_VAR, "n")
        .with(HEARTBEAT_INTERVAL_VAR, "0");
    assert!(
        Config::from_env(&env)
            .unwrap_err()
            .to_string()
            .contains("(from SERVICE_HEARTBEAT_INTERVAL): expected whole seconds")
    );
}

#[test]
fn variables_are_expanded_in_strings() {
    let yaml = "token: ${T}\nname: ${N}-${REGION:-eu}\nstate_dir: $${literal}\napis:\n  - url: https://${HOST}/api\n";
    let env = MapEnv::new()
        .with("T", "abc")
        .with("N", "edge")
        .with("HOST", "svc.internal");
    let config = load(yaml, &env).unwrap();
    assert_eq!(config.token.expose(), "abc");
    assert_eq!(config.name, "edge-eu");
    assert_eq!(config.state_dir.unwrap().to_str(), Some("${literal}"));
    assert_eq!(config.apis[0].url.as_str(), "https://svc.internal/api");
    assert_eq!(config.apis[0].name, "svc.internal");
}

#[test]
fn a_missing_variable_names_itself_and_the_key() {
    let yaml = "token: t\nname: n\napis:\n  - url: http://svc\n    auth:\n      username: u\n      password: ${API_PASSWORD}\n";
    let text = failure(yaml, &MapEnv::new());
    assert_eq!(
        text,
        "bridge.yaml:7:17: apis[0].auth.password: environment variable API_PASSWORD is not set"
    );
}

#[test]
fn unknown_keys_are_errors_with_line_and_column() {
    let text = failure("token: t\nname: n\nheartbeat: 30\n", &MapEnv::new());
    assert!(
        text.starts_with("bridge.yaml:3:1: unknown field `heartbeat`"),
        "{text}"
    );

    let yaml =
        "token: t\nname: n\napis:\n  - name: a\n    url: https://a\n    auht:\n      username: u\n";
    let text = failure(yaml, &MapEnv::new());
    assert!(
        text.starts_with("bridge.yaml:6:5: apis[0]: unknown field `auht`"),
        "{text}"
    );
    assert!(text.ends_with("; did you mean `auth`?"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
}

/// A typo inside a `{…}` mapping (the `auth:` style the docs use) is one problem: the keys
/// after it are read as written, and the rest of the file's problems are still listed.
#[test]
fn an_unknown_key_inside_braces_hides_nothing_after_it() {
    let yaml = "name: dc1\ntoken: x\napis:\n  - name: internal\n    url: http://127.0.0.1:9000\n    auth: {type: basic, usernme: svc, password: x}\n    allow: [{method: GET, path: \"/*\", bogus: 1}]\nsources:\n  - url: http://127.0.0.1:9001\n    auth: {type: token, tokn: \"a,}b\"}\n";
    let text = failure(yaml, &MapEnv::new());
    let expected = [
        "bridge.yaml:6:25: apis[0].auth: unknown field `usernme`",
        "bridge.yaml:7:39: apis[0].allow[0]: unknown field `bogus`",
        "bridge.yaml:10:25: sources[0].auth: unknown field `tokn`",
    ];
    for want in expected {
        assert!(text.contains(want), "expected {want:?} in:\n{text}");
    }
    assert!(text.contains("apis[0].auth.username: required"), "{text}");
    assert!(text.contains("sources[0].auth.token: required"), "{text}");
    assert_eq!(text.lines().count(), 5, "{text}");
    for wrongly in ["`allow`", "`sources`", "`password`"] {
        assert!(
            !text.contains(wrongly),
            "{wrongly} called unknown in:\n{text}"
        );
    }
}

#[test]
fn every_unknown_key_is_listed_at_once_beside_the_other_problems() {
    let yaml = "token: t\nname: n\nheartbeat: 30\napis:\n  - name: a\n    url: https://a\n    auht:\n      username: u\n      password: p\n  - bogus: 1\n    url: ftp://x\nlog_levle: info\nmax_connections: 0\n";
    let err = load(yaml, &MapEnv::new()).unwrap_err();
    let text = err.to_string();
    let expected = [
        "bridge.yaml:3:1: unknown field `heartbeat`",
        "bridge.yaml:7:5: apis[0]: unknown field `auht`",
        "bridge.yaml:10:5: apis[1]: unknown field `bogus`",
        "bridge.yaml:11:10: apis[1].url: expected an absolute http or https URL",
        "bridge.yaml:12:1: unknown field `log_levle`",
        "bridge.yaml:13:18: max_connections: expected a whole number from 1 to 10000, got 0",
    ];
    for (got, want) in text.lines().zip(expected) {
        assert!(
            got.starts_with(want),
            "expected {want:?}, got {got:?} in:\n{text}"
        );
    }
    assert_eq!(text.lines().count(), expected.len(), "{text}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let yaml = r#"
name: "not valid!"
api_url: ftp://cloud.example
heartbeat_interval: 0
reconnect_delay: -1
log_level: loud
log_format: xml
max_connections: 0
health_check_port: 70000
tls_cert_file: /etc/bridge/cert.pem
sources:
  - type: svn
    url: https://user:pw@git.example
apis:
  - name: dup
    url: not a url
  - name: dup
    url: https://b.example
    allow:
      - method: "GET /x"
        path: relative
databases:
  - host: db
    port: 0
"#;
    let err = load(yaml, &MapEnv::new()).unwrap_err();
    let text = err.to_string();
    let expected = [
        "bridge.yaml: token: required: set `token` in the file or SERVICE_BRIDGE_TOKEN",
        "bridge.yaml:2:7: name: expected 1 to 63 lowercase letters",
        "bridge.yaml:3:10: api_url: expected an absolute https URL, got scheme \"ftp\"",
        "bridge.yaml:4:21: heartbeat_interval: expected whole seconds from 1 to 3600, got 0",
        "bridge.yaml:5:18: reconnect_delay: expected whole seconds from 1 to 3600, got -1",
        "bridge.yaml:6:12: log_level: expected one of debug, info, warn, error, got \"loud\"",
        "bridge.yaml:7:13: log_format: expected json or text, got \"xml\"",
        "bridge.yaml:8:18: max_connections: expected a whole number from 1 to 10000, got 0",
        "bridge.yaml:9:20: health_check_port: expected a port from 0 to 65535 (0: any free port, logged at start), got 70000",
        "bridge.yaml:10:16: tls_key_file: required when tls_cert_file is set",
        "bridge.yaml:12:11: sources[0].type: expected git, got \"svn\"",
        "bridge.yaml:13:10: sources[0].url: credentials belong in `auth`, not in the URL",
        "bridge.yaml:16:10: apis[0].url: expected an absolute http or https URL",
        "bridge.yaml:17:11: apis[1].name: \"dup\" is already the name of apis[0]",
        "bridge.yaml:20:17: apis[1].allow[0].method: expected an HTTP method",
        "bridge.yaml:21:15: apis[1].allow[0].path: expected a path pattern starting with / or *",
        "bridge.yaml:23:5: databases[0].database: required",
        "bridge.yaml:23:5: databases[0].credentials: required",
        "bridge.yaml:24:11: databases[0].port: expected a port from 1 to 65535, got 0",
    ];
    // In file order (problems without a place first), one per line.
    for (got, want) in text.lines().zip(expected) {
        assert!(
            got.starts_with(want),
            "expected {want:?}, got {got:?} in:\n{text}"
        );
    }
    assert_eq!(err.problems().len(), expected.len(), "{text}");
    assert_eq!(text.lines().count(), expected.len());
    assert!(
        !text.contains("pw@"),
        "URL credentials must not be echoed: {text}"
    );
}

#[test]
fn proxy_falls_back_to_the_environment() {
    let env = MapEnv::new()
        .with(TOKEN_VAR, "t")
        .with(NAME_VAR, "n")
        .with("HTTPS_PROXY", "proxy.corp:3128")
        .with("NO_PROXY", "localhost,.internal");
    let config = Config::from_env(&env).unwrap();
    let proxy = config.proxy_for("cloud.example", 443).unwrap();
    assert_eq!(proxy.url().as_str(), "http://proxy.corp:3128/");
    assert!(config.proxy_for("git.internal", 443).is_none());
    // The file's proxy_url wins over the environment, NO_PROXY included: only the
    // environment's own proxy is bypassed by it.
    let config = load("proxy_url: http://file-proxy:8080\n", &env).unwrap();
    assert!(config.proxy_for("git.internal", 443).is_some());
    assert_eq!(config.proxy_url.unwrap().host(), "file-proxy");
    // A bad proxy in the environment is an error naming the variable.
    let env = env.with("https_proxy", "socks5://p:1080");
    let text = Config::from_env(&env).unwrap_err().to_string();
    assert!(text.contains("proxy_url (from https_proxy)"), "{text}");
}

#[test]
fn audit_log_and_tls_files() {
    let yaml = "token: t\nname: n\naudit_log: /var/log/bridge/audit.log\ntls_verify: false\n\
                tls_ca_file: ca.pem\ntls_cert_file: c.pem\ntls_key_file: k.pem\n";
    let config = load(yaml, &MapEnv::new()).unwrap();
    assert_eq!(
        config.audit_log,
        AuditTarget::File("/var/log/bridge/audit.log".into())
    );
    assert!(!config.tls_verify);
    assert_eq!(config.tls_key_file.unwrap().to_str(), Some("k.pem"));
    let config = load("token: t\nname: n\naudit_log: stdout\n", &MapEnv::new()).unwrap();
    assert_eq!(config.audit_log, AuditTarget::Stdout);
}

#[test]
fn explicit_names_win_over_derived_ones() {
    let yaml = "token: t\nname: n\napis:\n  - url: https://a.example\n  - name: a.example\n    url: https://b.example\n";
    let config = load(yaml, &MapEnv::new()).unwrap();
    let names: Vec<_> = config.apis.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["a.example-2", "a.example"]);
}

#[test]
fn load_reads_a_file_and_reports_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, "token: t\nname: from-file\n").unwrap();
    assert_eq!(
        Config::load(&path, &MapEnv::new()).unwrap().name,
        "from-file"
    );
    let missing = dir.path().join("nope.yaml");
    let err = Config::load(&missing, &MapEnv::new()).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(err.to_string().contains("nope.yaml: cannot read"), "{err}");
}

#[test]
fn a_resource_url_with_a_query_is_refused() {
    let text = failure(
        "name: dc1\ntoken: t\napis:\n  - name: a\n    url: https://api.example/v1?key=1\n",
        &MapEnv::new(),
    );
    assert!(text.contains("apis[0].url"), "{text}");
    assert!(text.contains("without ?query"), "{text}");
}

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
}

#[test]
fn api_auth_types() {
    let yaml = r#"
name: b
apis:
  - {name: a, url: http://a, auth: {type: bearer, token: T}}
  - {name: h, url: http://h, auth: {type: header, name: X-API-Key, value: V}}
  - {name: bad, url: http://b, auth: {type: header, name: "Content-Length", value: "x", token: t}}
  - {name: worse, url: http://w, auth: {type: digest}}
"#;
    let err = failure(yaml, &MapEnv::new().with(TOKEN_VAR, "t"));
    for want in [
        "apis[2].auth.token: not used with auth type \"header\"",
        "apis[2].auth.name: expected an HTTP header name",
        "apis[3].auth.type: expected basic, bearer or header, got \"digest\"",
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
fn a_value_of_the_wrong_type_is_named_by_its_key_path() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - name: a\n    url: http://a\n    max_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    assert!(
        err.contains("bridge.yaml:7:22: apis[0].max_connections: expected a whole number"),
        "{err}"
    );
    let err = failure("name: dc1\ntls_verify: maybe\n", &MapEnv::default());
    assert!(
        err.contains("bridge.yaml:2:13: tls_verify: expected true or false"),
        "{err}"
    );
}

#[test]
fn wrong_types_are_listed_at_once_with_the_other_problems() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - name: a\n    url: http://a\n    max_connections: lots\n  - name: b\n    url: ftp://b\n    max_conections: 2\nsources:\n  - name: code\n    url: https://git.internal\n    allow_push: maybe\n";
    let err = failure(yaml, &MapEnv::default());
    let expected = [
        "bridge.yaml:7:22: apis[0].max_connections: expected a whole number",
        "bridge.yaml:9:10: apis[1].url: expected an absolute http or https URL",
        "bridge.yaml:10:5: apis[1]: unknown field `max_conections`",
        "bridge.yaml:14:17: sources[0].allow_push: expected true or false",
    ];
    for want in expected {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert_eq!(err.lines().count(), expected.len(), "{err}");
}

#[test]
fn a_mapping_where_a_list_belongs_is_one_problem_named_by_its_key() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  name: a\n  url: http://a\nlog_levle: info\n";
    let expected = [
        "bridge.yaml:4:1: apis: expected a list (lines starting with `- `)",
        "bridge.yaml:7:1: unknown field `log_levle`",
    ];
    // The same with the line endings of Windows, or of old Macs (a lone CR).
    for text in [
        yaml.to_string(),
        yaml.replace('\n', "\r\n"),
        yaml.replace('\n', "\r"),
    ] {
        let err = failure(&text, &MapEnv::default());
        for want in expected {
            assert!(err.contains(want), "missing {want:?} in:\n{err}");
        }
        assert_eq!(err.lines().count(), expected.len(), "{err}");
    }
    // A wrong value inside a flow mapping is its own problem, not its list's.
    let flow = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - {name: a, url: http://a, max_connections: lots}\n";
    let err = failure(flow, &MapEnv::default());
    assert!(err.contains("bridge.yaml:5:"), "{err}");
    assert!(err.contains("expected a whole number"), "{err}");
    assert!(!err.contains(": apis: "), "{err}");
}

#[test]
fn a_list_or_mapping_where_text_belongs_is_named_and_the_reading_goes_on() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\napis:\n  - name: [a, b]\n    url: http://a\n  - name: b\n    url:\n      host: b\n      port: 80\n  - {name: c, url: {x: 1}, max_connections: 2}\n  - name: d\n    url: http://d\n    max_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    let expected = [
        "bridge.yaml:5:11: apis[0].name: expected text, not a list or a mapping",
        "bridge.yaml:8:5: apis[1].url: expected text, not a list or a mapping",
        "bridge.yaml:11:20: expected text, not a list or a mapping",
        "bridge.yaml:14:22: apis[3].max_connections: expected a whole number",
    ];
    for want in expected {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    // Each said once: the values read as empty text raise nothing more.
    assert_eq!(err.lines().count(), expected.len(), "{err}");
}

#[test]
fn a_list_or_mapping_as_an_item_of_a_text_list_is_named_by_its_index() {
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\nsources:\n  - name: code\n    url: https://git.example\n    repositories:\n      - team/*\n      - name: team/lib\n      - [a, b]\n    max_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    let expected = [
        "bridge.yaml:9:9: sources[0].repositories[1]: expected text, not a list or a mapping",
        "bridge.yaml:10:9: sources[0].repositories[2]: expected text, not a list or a mapping",
        "bridge.yaml:11:22: sources[0].max_connections: expected a whole number",
    ];
    for want in expected {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert_eq!(err.lines().count(), expected.len(), "{err}");
    // An unknown first key of an entry hides none of the entry's own problems.
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\ndatabases:\n  - hots: db\n    port: 5432\n";
    let err = failure(yaml, &MapEnv::default());
    assert!(err.contains("unknown field `hots`"), "{err}");
    assert!(err.contains("databases[0].database"), "{err}");
    // A list or a scalar where a mapping belongs is said once, not also as "required", and
    // the rest of the file is still read.
    let yaml = "name: dc1\ntoken: t\napi_url: https://cloud.example\ndatabases:\n  - name: a\n    host: db\n    database: d\n    credentials: [alice, s3cret]\nmax_connections: lots\n";
    let err = failure(yaml, &MapEnv::default());
    assert!(
        err.contains("databases[0].credentials: expected a mapping"),
        "{err}"
    );
    assert!(
        err.contains("max_connections: expected a whole number"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// A typo in the second mapping of a flow list is named by its index.
#[test]
fn an_unknown_key_in_a_later_flow_item_names_that_item() {
    let yaml = "name: dc1\ntoken: x\napis:\n  - name: internal\n    url: http://127.0.0.1:9000\n    allow: [{method: GET, path: \"/a,b\"}, {method: GET, bogus: 1}]\n";
    let text = failure(yaml, &MapEnv::new());
    assert!(
        text.contains("apis[0].allow[1]: unknown field `bogus`"),
        "{text}"
    );
}

/// A list at the top of the file is said once, not as every key it lacks.
#[test]
fn a_list_at_the_top_is_one_problem() {
    let text = failure("# bridge\n- name: dc1\n- token: x\n", &MapEnv::new());
    assert_eq!(
        text.trim(),
        "bridge.yaml:2:1: the file's top level must be `key: value` lines (name:, token:, apis:, …), not a list",
        "{text}"
    );
}

/// A tab in the indentation is named at its line (the YAML reader's own message names another).
#[test]
fn a_tab_in_the_indentation_is_named_at_its_line() {
    let text = failure("name: dc1\ntoken: x\napis:\n\t- name: a\n", &MapEnv::new());
    assert_eq!(
        text.trim(),
        "bridge.yaml:4:1: a tab in the indentation: YAML indents with spaces only",
        "{text}"
    );
}

/// A list where a number belongs is said as such, and hides none of the file's other problems.
#[test]
fn a_list_for_a_number_hides_nothing_after_it() {
    let yaml = "name: dc1\ntoken: x\nmax_connections: [1]\nheartbeat_interval: 0\napis:\n  - name: x\n    urll: http://h\n    max_connections: abc\n";
    let text = failure(yaml, &MapEnv::new());
    for want in [
        "bridge.yaml:3:18: max_connections: expected a single value, not a list or a mapping",
        "bridge.yaml:4:21: heartbeat_interval: expected whole seconds from 1 to 3600, got 0",
        "unknown field `urll`",
        "bridge.yaml:8:22: apis[0].max_connections: expected a whole number",
    ] {
        assert!(text.contains(want), "expected {want:?} in:\n{text}");
    }
}

/// Broken syntax after an unknown key is said too, after it.
#[test]
fn broken_syntax_after_an_unknown_key_is_said_too() {
    let text = failure(
        "name: dc1\ntoken: x\nfoo: 1\nlog_level: \"abc\n",
        &MapEnv::new(),
    );
    assert!(
        text.contains("bridge.yaml:3:1: unknown field `foo`"),
        "{text}"
    );
    assert!(text.contains("bridge.yaml:4:12: unclosed quote"), "{text}");
}

#[test]
fn an_unquoted_variable_in_a_flow_mapping_is_explained() {
    let yaml = "name: n\napis:\n  - {name: a, url: http://a, auth: {type: bearer, token: ${T}}}\n";
    let err = load(yaml, &MapEnv::new().with("T", "x")).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("a ${VAR} inside { … } must be quoted"),
        "{shown}"
    );
    let quoted =
        "name: n\napis:\n  - {name: a, url: http://a, auth: {type: bearer, token: \"${T}\"}}\n";
    let err = load(quoted, &MapEnv::new().with("T", "x"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(!err.contains("must be quoted"), "{err}");
}

#[test]
fn an_entry_limit_above_the_bridges_is_said() {
    let yaml = "name: n\ntoken: t\nmax_connections: 10\napis:\n  - {name: a, url: http://a, max_connections: 50}\n  - {name: b, url: http://b, max_connections: 5}\n";
    let config = load(yaml, &MapEnv::new()).unwrap();
    let warnings = config.unreachable_limits();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]
            .starts_with("apis[0].max_connections 50 (a) is above the bridge's max_connections 10"),
        "{warnings:?}"
    );
}
