//! Turns the file as written plus the environment into a [`Config`], collecting every problem.
//!
//! Every check records what is wrong and carries on with a default, so one pass reports
//! everything; the field-level checks live in [`fields`], the resource lists in [`resources`].

use std::path::PathBuf;
use std::time::Duration;

use serde_saphyr::Spanned;
use url::Url;

use super::env::{
    API_URL_VAR, Env, HEARTBEAT_INTERVAL_VAR, HTTPS_PROXY_VARS, LOG_LEVEL_VAR, NAME_VAR,
    NO_PROXY_VARS, TLS_CA_FILE_VAR, TOKEN_VAR,
};
use super::error::{Origin, Problem};
use super::file::FileConfig;
use super::proxy::{ProxyUrl, parse_no_proxy};
use super::{
    AUDIT_LOG_STDOUT, AuditTarget, Config, DEFAULT_API_URL, DEFAULT_HEALTH_CHECK_ADDRESS,
    DEFAULT_HEALTH_CHECK_PORT, DEFAULT_HEARTBEAT_INTERVAL_SECS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_MEMORY_MB, DEFAULT_RECONNECT_DELAY_SECS, DEFAULT_TLS_VERIFY, LogFormat, LogLevel,
    MAX_INTERVAL_SECS, MAX_MAX_CONNECTIONS, Secret,
};

mod fields;
mod resources;

use fields::{Ctx, Given, located};

/// Validates the whole configuration; `Err` holds every problem found.
pub(crate) fn validate(file: &FileConfig, env: &dyn Env) -> Result<Config, Vec<Problem>> {
    let mut cx = Ctx {
        env,
        problems: Vec::new(),
    };
    let top = Origin::Unknown;

    let token = cx.overridden(file.token.as_ref(), "token", TOKEN_VAR);
    let token = match token {
        Some(t) if !t.value.trim().is_empty() => {
            cx.header_secret(Some(t), "token").unwrap_or_default()
        }
        Some(t) => {
            cx.fail("token", &t.origin, "must not be empty");
            Secret::default()
        }
        None if file.token.is_some() => Secret::default(),
        None => {
            cx.fail(
                "token",
                &top,
                format!("required: set `token` in the file or {TOKEN_VAR}"),
            );
            Secret::default()
        }
    };

    let name = match cx.overridden(file.name.as_ref(), "name", NAME_VAR) {
        // With registries the name is also part of image names: the OCI rule, narrower.
        Some(n)
            if tunnel::is_valid_bridge_name(&n.value)
                && file.registries.as_ref().is_some_and(|r| !r.is_empty())
                && !tunnel::oci::is_path_component(&n.value) =>
        {
            cx.fail("name", &n.origin, resources::image_name_rule(&n.value));
            String::new()
        }
        Some(n) if tunnel::is_valid_bridge_name(&n.value) => n.value,
        Some(n) => {
            cx.fail(
                "name",
                &n.origin,
                format!(
                    "expected {} (what `cloud bridge-token create --name` accepts), got {:?}",
                    tunnel::BRIDGE_NAME_RULE,
                    n.value
                ),
            );
            String::new()
        }
        None if file.name.is_some() => String::new(),
        None => {
            cx.fail(
                "name",
                &top,
                format!("required: set `name` in the file or {NAME_VAR}"),
            );
            String::new()
        }
    };

    let api_url = cx
        .overridden(file.api_url.as_ref(), "api_url", API_URL_VAR)
        .and_then(|given| {
            let url = cx.url(&given, "api_url", &["https"], None)?;
            if url.path() != "/" {
                let msg = "expected the cloud's address without a path, such as https://signals.example.com: the bridge's routes are at the cloud's root, so a path would be ignored";
                cx.fail("api_url", &given.origin, msg);
                return None;
            }
            Some(url)
        });
    let api_url = api_url.or_else(|| Url::parse(DEFAULT_API_URL).ok());

    let expected = format!("whole seconds from 1 to {MAX_INTERVAL_SECS}");
    let seconds = 1..=MAX_INTERVAL_SECS as i64;
    let heartbeat = cx.overridden_int(
        file.heartbeat_interval.as_ref(),
        "heartbeat_interval",
        HEARTBEAT_INTERVAL_VAR,
    );
    let heartbeat_interval = cx
        .int(heartbeat, "heartbeat_interval", seconds.clone(), &expected)
        .map_or(DEFAULT_HEARTBEAT_INTERVAL_SECS, |s| s as u64);
    let reconnect = file.reconnect_delay.as_ref().map(located);
    let reconnect_delay = cx
        .int(reconnect, "reconnect_delay", seconds, &expected)
        .map_or(DEFAULT_RECONNECT_DELAY_SECS, |s| s as u64);

    let log_level = match cx.overridden(file.log_level.as_ref(), "log_level", LOG_LEVEL_VAR) {
        Some(given) => given.value.parse().unwrap_or_else(|message: String| {
            cx.fail("log_level", &given.origin, message);
            LogLevel::default()
        }),
        None => LogLevel::default(),
    };
    let log_format = match cx.optional(file.log_format.as_ref(), "log_format") {
        Some(given) => given.value.parse().unwrap_or_else(|message: String| {
            cx.fail("log_format", &given.origin, message);
            LogFormat::default()
        }),
        None => LogFormat::default(),
    };

    let expected = format!("a whole number from 1 to {MAX_MAX_CONNECTIONS}");
    let max_connections = cx
        .int(
            file.max_connections.as_ref().map(located),
            "max_connections",
            1..=MAX_MAX_CONNECTIONS as i64,
            &expected,
        )
        .map_or(DEFAULT_MAX_CONNECTIONS, |n| n as u32);
    let max_memory_mb = cx
        .int(
            file.max_memory_mb.as_ref().map(located),
            "max_memory_mb",
            1..=i64::from(u32::MAX),
            "a positive number of megabytes",
        )
        .map_or(DEFAULT_MAX_MEMORY_MB, |n| n as u64);
    let (health_check_address, health_check_port) = health(&mut cx, file);

    let proxy = match &file.proxy_url {
        Some(value) => cx.string(value, "proxy_url"),
        None => HTTPS_PROXY_VARS.iter().find_map(|var| {
            env.get_non_empty(var).map(|value| Given {
                value,
                origin: Origin::Env(var),
            })
        }),
    };
    let proxy_url = proxy.and_then(|given| match ProxyUrl::parse(&given.value) {
        Ok(proxy) => Some(proxy),
        Err(message) => {
            cx.fail("proxy_url", &given.origin, message);
            None
        }
    });
    // An explicit `proxy_url` is the operator's whole answer: the environment's `NO_PROXY`
    // goes with `HTTPS_PROXY`, and neither applies then.
    let no_proxy = NO_PROXY_VARS
        .iter()
        .filter(|_| file.proxy_url.is_none())
        .find_map(|var| env.get_non_empty(var))
        .map(|value| parse_no_proxy(&value))
        .unwrap_or_default();

    let tls_ca_file = match env.get_non_empty(TLS_CA_FILE_VAR) {
        Some(from_env) if from_env.trim().is_empty() => {
            let origin = Origin::Env(TLS_CA_FILE_VAR);
            let msg = "expected a file path, got only spaces";
            cx.fail("tls_ca_file", &origin, msg);
            None
        }
        Some(from_env) => Some(PathBuf::from(from_env)),
        None => cx.path(file.tls_ca_file.as_ref(), "tls_ca_file"),
    };
    let mut path = |value: &Option<Spanned<String>>, key: &str| cx.path(value.as_ref(), key);
    let tls_cert_file = path(&file.tls_cert_file, "tls_cert_file");
    let tls_key_file = path(&file.tls_key_file, "tls_key_file");
    let state_dir = path(&file.state_dir, "state_dir");
    let audit_log = match path(&file.audit_log, "audit_log") {
        Some(p) if p.as_os_str() == AUDIT_LOG_STDOUT => AuditTarget::Stdout,
        Some(p) => AuditTarget::File(p),
        None => AuditTarget::Stdout,
    };
    match (&file.tls_cert_file, &file.tls_key_file) {
        (Some(cert), None) => cx.fail(
            "tls_key_file",
            &Origin::at(&cert.referenced),
            "required when tls_cert_file is set",
        ),
        (None, Some(key)) => cx.fail(
            "tls_cert_file",
            &Origin::at(&key.referenced),
            "required when tls_key_file is set",
        ),
        _ => {}
    }

    let (sources, databases, apis, registries) = resources::all(&mut cx, file);

    let config = Config {
        token,
        name,
        api_url: api_url.ok_or_else(|| {
            vec![Problem::new(
                "api_url",
                Origin::Unknown,
                "the built-in default is not a URL",
            )]
        })?,
        heartbeat_interval: Duration::from_secs(heartbeat_interval),
        reconnect_delay: Duration::from_secs(reconnect_delay),
        log_level,
        log_format,
        max_connections,
        max_memory_mb,
        proxy_url,
        no_proxy,
        tls_verify: file.tls_verify.unwrap_or(DEFAULT_TLS_VERIFY),
        tls_ca_file_origin: if env.get_non_empty(TLS_CA_FILE_VAR).is_some() {
            TLS_CA_FILE_VAR
        } else {
            "tls_ca_file"
        },
        tls_ca_file,
        tls_cert_file,
        tls_key_file,
        state_dir,
        audit_log,
        health_check_port,
        health_check_address,
        sources,
        databases,
        apis,
        registries,
    };
    if cx.problems.is_empty() {
        return Ok(config);
    }
    super::error::in_file_order(&mut cx.problems);
    Err(cx.problems)
}

/// Only where the health endpoint listens (`health_check_address`, `health_check_port`): what
/// `bridge healthcheck` needs, without the token or the resources' secrets.
pub(crate) fn health_endpoint(
    file: &FileConfig,
    env: &dyn Env,
) -> Result<(std::net::IpAddr, u16), Vec<Problem>> {
    let mut cx = Ctx {
        env,
        problems: Vec::new(),
    };
    let endpoint = health(&mut cx, file);
    if cx.problems.is_empty() {
        return Ok(endpoint);
    }
    Err(cx.problems)
}

/// `health_check_address` and `health_check_port`, or their defaults.
fn health(cx: &mut Ctx, file: &FileConfig) -> (std::net::IpAddr, u16) {
    let port = cx
        .int(
            file.health_check_port.as_ref().map(located),
            "health_check_port",
            0..=65535,
            "a port from 0 to 65535 (0: any free port, logged at start)",
        )
        .map_or(DEFAULT_HEALTH_CHECK_PORT, |n| n as u16);
    let address = match cx.optional(file.health_check_address.as_ref(), "health_check_address") {
        None => DEFAULT_HEALTH_CHECK_ADDRESS,
        Some(given) => given.value.trim().parse().unwrap_or_else(|_| {
            let msg = format!(
                "expected an IP address such as 127.0.0.1 (this host only) or 0.0.0.0 (every interface), got {:?}",
                given.value
            );
            cx.fail("health_check_address", &given.origin, msg);
            DEFAULT_HEALTH_CHECK_ADDRESS
        }),
    };
    (address, port)
}
