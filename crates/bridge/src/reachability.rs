//! Every `heartbeat_interval`, each declared resource is tried (DNS and TCP, as `bridge check`
//! does, without credentials): one that stops answering turns `/health` from `healthy` to
//! `degraded`, sets `bridge_resource_up{kind,name}` to 0 and logs a warning naming it and why;
//! recovery is logged too. The tunnel stays up either way: the other resources still work.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{Config, ResourceKind};
use crate::dial;
use crate::metrics::{Metrics, ResourceLabel};
use crate::status::Status;

/// How long one check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// One resource's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// What it is.
    pub(crate) kind: ResourceKind,
    /// Its name in the configuration.
    pub(crate) name: String,
    /// Host name or IP address (an IPv6 literal without brackets).
    pub(crate) host: String,
    /// TCP port.
    pub(crate) port: u16,
}

fn url_target(kind: ResourceKind, name: &str, url: &url::Url) -> Target {
    // `host_str` keeps an IPv6 literal's brackets, which no resolver takes.
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        Some(host) => host.to_string(),
        None => String::new(),
    };
    Target {
        kind,
        name: name.to_string(),
        host,
        port: url.port_or_known_default().unwrap_or(443),
    }
}

/// Every declared resource's address, in the configuration's order per kind.
pub(crate) fn targets(cfg: &Config) -> Vec<Target> {
    let sources = cfg
        .sources
        .iter()
        .map(|s| url_target(ResourceKind::Git, &s.name, &s.url));
    let databases = cfg.databases.iter().map(|d| Target {
        kind: ResourceKind::Database,
        name: d.name.clone(),
        host: d.host.clone(),
        port: d.port,
    });
    let apis = cfg
        .apis
        .iter()
        .map(|a| url_target(ResourceKind::Api, &a.name, &a.url));
    let registries = cfg
        .registries
        .iter()
        .map(|r| url_target(ResourceKind::Registry, &r.name, &r.url));
    sources
        .chain(databases)
        .chain(apis)
        .chain(registries)
        .collect()
}

/// `Ok` when the resource accepts a TCP connection, else why not.
async fn check(target: &Target) -> Result<(), String> {
    match tokio::time::timeout(
        CHECK_TIMEOUT,
        dial::tcp_to_resource(&target.host, target.port),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "no answer from {}:{} within {} s",
            target.host,
            target.port,
            CHECK_TIMEOUT.as_secs()
        )),
    }
}

/// Checks every resource now and then every `heartbeat_interval` until `shutdown`.
pub async fn watch(
    cfg: Arc<Config>,
    status: Arc<Status>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let targets = targets(&cfg);
    if targets.is_empty() {
        return;
    }
    let mut up = vec![true; targets.len()];
    let mut every = tokio::time::interval(cfg.heartbeat_interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let results = futures_util::future::join_all(targets.iter().map(check)).await;
        for ((target, result), was_up) in targets.iter().zip(&results).zip(up.iter_mut()) {
            let label = ResourceLabel {
                kind: target.kind.as_str().to_string(),
                name: target.name.clone(),
            };
            metrics
                .resource_up
                .get_or_create(&label)
                .set(i64::from(result.is_ok()));
            match result {
                Err(cause) if *was_up => tracing::warn!(
                    kind = target.kind.as_str(), resource = %target.name,
                    target = %format!("{}:{}", target.host, target.port), cause = %cause,
                    "resource unreachable; /health says degraded until it answers again"
                ),
                Ok(()) if !*was_up => tracing::info!(
                    kind = target.kind.as_str(), resource = %target.name,
                    "resource reachable again"
                ),
                _ => {}
            }
            *was_up = result.is_ok();
        }
        status.set_resource_failures(up.iter().filter(|u| !**u).count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_literals_lose_their_brackets() {
        let url = url::Url::parse("http://[::1]:9000/x").unwrap();
        let target = url_target(ResourceKind::Api, "a", &url);
        assert_eq!((target.host.as_str(), target.port), ("::1", 9000));
        let url = url::Url::parse("https://api.internal/").unwrap();
        let target = url_target(ResourceKind::Api, "b", &url);
        assert_eq!((target.host.as_str(), target.port), ("api.internal", 443));
    }
}
