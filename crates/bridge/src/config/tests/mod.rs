//! Loading the configuration end to end: file, `${NAME}`, environment, validation.

use std::time::Duration;

use super::*;

mod resources;
mod shapes;

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
                log_level: error\nheartbeat_interval: 30\ntls_ca_file: /file/ca.pem\n";
    let env = MapEnv::new()
        .with(TOKEN_VAR, "env-token")
        .with(NAME_VAR, "env-name")
        .with(API_URL_VAR, "https://env.example:9443")
        .with(LOG_LEVEL_VAR, "DEBUG")
        .with(HEARTBEAT_INTERVAL_VAR, "7")
        .with(TLS_CA_FILE_VAR, "/etc/bridge/ca.pem");
    let config = load(yaml, &env).unwrap();
    assert_eq!(
        config.tls_ca_file.as_deref(),
        Some(std::path::Path::new("/etc/bridge/ca.pem"))
    );
    let blank = MapEnv::new().with(TLS_CA_FILE_VAR, "  ");
    let err = failure(yaml, &blank);
    assert!(
        err.contains("tls_ca_file (from SERVICE_TLS_CA_FILE): expected a file path"),
        "{err}"
    );
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
