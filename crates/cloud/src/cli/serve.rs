//! `cloud serve`'s options. clap reads their values as text and this module checks them
//! together, so that a start with several mistakes names every one (each with its flag) at
//! once, rather than one per attempt; the files they name are checked with them
//! (`server::prepare`).

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use clap::Args;

use super::StorageArgs;

/// Options of `cloud serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Storage.
    #[command(flatten)]
    pub storage: StorageArgs,
    /// TLS 1.3 address: the API, the dashboard, the bridge tunnel and PostgreSQL clients.
    #[arg(long, env = "CLOUD_LISTEN", default_value = "127.0.0.1:8443")]
    pub listen: String,
    /// Plain HTTP address (the API and the dashboard, never the bridge tunnel or PostgreSQL
    /// clients), or `off`.
    #[arg(long, env = "CLOUD_HTTP_LISTEN", default_value = "127.0.0.1:8000")]
    pub http_listen: String,
    /// Server certificate chain (PEM); a self-signed one is made when absent.
    #[arg(long, env = "CLOUD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM).
    #[arg(long, env = "CLOUD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// More host names (or IP addresses) for the self-signed certificate, comma-separated,
    /// besides localhost, 127.0.0.1 and ::1: the names bridges and clients dial, such as a
    /// container's or a Kubernetes Service's name. Ignored with --tls-cert.
    #[arg(long, env = "CLOUD_TLS_NAMES", value_delimiter = ',')]
    pub tls_names: Vec<String>,
    /// CA certificates (PEM) of an operator's own PKI: bridge client certificates they sign
    /// may open tunnels too (with a valid token), named `ORG:BRIDGE` (org slug, bridge name).
    /// Trusted for every org: for a service run by one organisation.
    #[arg(long, env = "CLOUD_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// Events per second per signal key (bursts of twice that); 0 turns the limit off.
    /// 0 to 4294967295.
    #[arg(
        long,
        env = "CLOUD_SIGNAL_RATE_LIMIT",
        default_value = "1000",
        allow_negative_numbers = true
    )]
    pub signal_rate_limit: String,
    /// MiB of signal request bodies ingested at once (parsed events and their commit take
    /// about five times that); more requests wait, up to --header-read-timeout, then get 503.
    /// Keeps memory bounded whatever the number of clients. 1 to 65536.
    #[arg(
        long,
        env = "CLOUD_INGEST_MEMORY_MB",
        default_value = "4",
        allow_negative_numbers = true
    )]
    pub ingest_memory_mb: String,
    /// Seconds in-flight requests may take to finish at shutdown. 0 to 86400.
    #[arg(
        long,
        env = "CLOUD_DRAIN_TIMEOUT",
        default_value = "20",
        allow_negative_numbers = true
    )]
    pub drain_timeout: String,
    /// Seconds a client may take to send a request's headers; the longest pause in a signal's,
    /// a forwarded request's, a dashboard form's or a correlation JSON body (then 408); and how
    /// long an HTTP/2 connection may go without a new request before it is closed gracefully.
    /// 1 to 3600.
    #[arg(
        long,
        env = "CLOUD_HEADER_READ_TIMEOUT",
        default_value = "30",
        allow_negative_numbers = true
    )]
    pub header_read_timeout: String,
    /// Seconds a request forwarded through a bridge may wait for the response's headers
    /// (a free tunnel stream included) before a 504; also the longest stretch in which its
    /// upload makes no progress (504), the longest pause in its response body (cut) and the
    /// longest its caller may leave that body unread (cut, freeing the bridge's slot).
    /// 1 to 86400.
    #[arg(
        long,
        env = "CLOUD_FORWARD_TIMEOUT",
        default_value = "120",
        allow_negative_numbers = true
    )]
    pub forward_timeout: String,
    /// The dashboard's address as people and bridges reach it, such as
    /// https://signals.example.com: the base of the commands its pages show. Default: the
    /// address each page was reached at.
    #[arg(long, env = "CLOUD_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The Bridge release this cloud ships and recommends: instances running an older one are
    /// marked outdated and notified. Default: this cloud's own version.
    #[arg(long, env = "CLOUD_BRIDGE_RELEASE", default_value = crate::live::VERSION)]
    pub bridge_release: String,
    /// Seconds before a failed webhook delivery is tried again; the wait doubles after each
    /// failure (at most an hour), 8 attempts in all. 0.1 to 3600.
    #[arg(
        long,
        env = "CLOUD_WEBHOOK_FIRST_RETRY",
        default_value = "10",
        allow_negative_numbers = true
    )]
    pub webhook_first_retry: String,
    /// Let webhooks reach loopback, private, link-local and other non-public addresses (for
    /// receivers inside your own network). Off: a service for many orgs must not let an org's
    /// webhook reach its own network.
    #[arg(long, env = "CLOUD_WEBHOOK_ALLOW_PRIVATE", value_parser = super::switch)]
    pub webhook_allow_private: bool,
}

/// What `serve --help` adds after the options: the setting read from the environment only.
pub const SERVE_AFTER_HELP: &str = "Environment only: CLOUD_METRICS_TOKEN (16 to 256 visible ASCII characters) makes /metrics answer only Authorization: Bearer TOKEN (docs/operations.md, \"Metrics\").";

/// `cloud serve`'s options once checked.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// `--listen`.
    pub listen: SocketAddr,
    /// `--http-listen`, `None` for `off`.
    pub http_listen: Option<SocketAddr>,
    /// `--tls-names`.
    pub tls_names: Vec<String>,
    /// `--signal-rate-limit`.
    pub signal_rate_limit: u32,
    /// `--ingest-memory-mb`.
    pub ingest_memory_mb: u32,
    /// `--drain-timeout`, seconds.
    pub drain_timeout: u64,
    /// `--header-read-timeout`, seconds.
    pub header_read_timeout: u64,
    /// `--forward-timeout`, seconds.
    pub forward_timeout: u64,
    /// `--public-url`.
    pub public_url: Option<String>,
    /// `--bridge-release`.
    pub bridge_release: String,
    /// `--webhook-first-retry`, seconds.
    pub webhook_first_retry: f64,
    /// `CLOUD_METRICS_TOKEN`: the bearer token `/metrics` asks for, when set.
    pub metrics_token: Option<crate::secrets::Hidden>,
}

impl ServeArgs {
    /// `--listen` and `--http-listen` when both read as addresses and take different ports,
    /// whatever the other options: `serve` tries them even when another option is wrong, so
    /// that a port in use is said with the rest.
    pub fn listen_addresses(&self) -> Option<(SocketAddr, Option<SocketAddr>)> {
        let tls = super::listen_address(&self.listen).ok()?;
        let plain = plain_address(&self.http_listen).ok()?;
        match plain {
            Some(plain) if same_port(tls, plain) => None,
            plain => Some((tls, plain)),
        }
    }

    /// The options checked, or every problem found, each starting with its flag.
    pub fn settings(&self) -> Result<ServeSettings, Vec<String>> {
        let mut problems = Vec::new();
        let p = &mut problems;
        let signal_rate_limit = said(
            p,
            "--signal-rate-limit",
            number(&self.signal_rate_limit, 0..=u32::MAX),
        );
        let ingest_memory_mb = said(
            p,
            "--ingest-memory-mb",
            number(&self.ingest_memory_mb, 1..=65536),
        );
        let drain_timeout = said(p, "--drain-timeout", number(&self.drain_timeout, 0..=86400));
        let header_read_timeout = said(
            p,
            "--header-read-timeout",
            number(&self.header_read_timeout, 1..=3600),
        );
        let forward_timeout = said(
            p,
            "--forward-timeout",
            number(&self.forward_timeout, 1..=86400),
        );
        let listen = said(
            &mut problems,
            "--listen",
            super::listen_address(&self.listen),
        );
        let http_listen = said(
            &mut problems,
            "--http-listen",
            plain_address(&self.http_listen),
        );
        let tls_names: Vec<Option<String>> = (self.tls_names.iter())
            .map(|name| said(&mut problems, "--tls-names", tls_name(name)))
            .collect();
        let public_url = match &self.public_url {
            Some(raw) => {
                said(&mut problems, "--public-url", crate::public_url::parse(raw)).map(Some)
            }
            None => Some(None),
        };
        let bridge_release = said(
            &mut problems,
            "--bridge-release",
            crate::live::parse_release(&self.bridge_release),
        );
        let webhook_first_retry = said(
            &mut problems,
            "--webhook-first-retry",
            first_retry(&self.webhook_first_retry),
        );
        let metrics_token = said(
            &mut problems,
            "CLOUD_METRICS_TOKEN",
            metrics_token(std::env::var_os("CLOUD_METRICS_TOKEN")),
        );
        if let (Some(tls), Some(Some(plain))) = (listen, http_listen)
            && same_port(tls, plain)
        {
            problems.push(format!(
                "--http-listen {plain} and --listen {tls} take the same port: give the plain HTTP listener another port, or `--http-listen off`"
            ));
        }
        let (
            Some(listen),
            Some(http_listen),
            Some(tls_names),
            Some(signal_rate_limit),
            Some(ingest_memory_mb),
            Some(drain_timeout),
            Some(header_read_timeout),
            Some(forward_timeout),
            Some(public_url),
            Some(bridge_release),
            Some(webhook_first_retry),
            Some(metrics_token),
        ) = (
            listen,
            http_listen,
            tls_names.into_iter().collect::<Option<Vec<_>>>(),
            signal_rate_limit,
            ingest_memory_mb,
            drain_timeout,
            header_read_timeout,
            forward_timeout,
            public_url,
            bridge_release,
            webhook_first_retry,
            metrics_token,
        )
        else {
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(ServeSettings {
            listen,
            http_listen,
            tls_names,
            signal_rate_limit,
            ingest_memory_mb,
            drain_timeout: drain_timeout.into(),
            header_read_timeout: header_read_timeout.into(),
            forward_timeout: forward_timeout.into(),
            public_url,
            bridge_release,
            webhook_first_retry,
            metrics_token,
        })
    }
}

/// The shortest `CLOUD_METRICS_TOKEN`: a scraper's secret, not a word to guess.
const METRICS_TOKEN_MIN: usize = 16;

/// `CLOUD_METRICS_TOKEN` (environment only, as a flag would show in `ps`): unset, or 16 to
/// 256 visible ASCII characters, as a bearer token is sent.
fn metrics_token(
    raw: Option<std::ffi::OsString>,
) -> Result<Option<crate::secrets::Hidden>, String> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let Some(token) = raw.to_str() else {
        return Err("is not UTF-8; give 16 to 256 visible ASCII characters".into());
    };
    if token.trim().is_empty() {
        return Err("is blank (empty or only whitespace); give 16 to 256 visible ASCII characters (`openssl rand -hex 32`), or unset it to leave /metrics open".into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("holds a character other than visible ASCII (a space, a newline?); give 16 to 256 visible ASCII characters".into());
    }
    if !(METRICS_TOKEN_MIN..=256).contains(&token.len()) {
        return Err(format!(
            "is {} characters long; give 16 to 256 (`openssl rand -hex 32`)",
            token.len()
        ));
    }
    Ok(Some(crate::secrets::Hidden(token.to_string())))
}

/// `checked`'s value, or `None` with its problem (after `flag`) added to `problems`.
fn said<T>(problems: &mut Vec<String>, flag: &str, checked: Result<T, String>) -> Option<T> {
    checked
        .map_err(|why| problems.push(format!("{flag}: {why}")))
        .ok()
}

/// A whole number within `range`.
fn number(raw: &str, range: RangeInclusive<u32>) -> Result<u32, String> {
    raw.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            format!(
                "{raw:?} is not a whole number from {} to {}",
                range.start(),
                range.end()
            )
        })
}

/// `--http-listen`: an address and port, or `off`.
fn plain_address(raw: &str) -> Result<Option<SocketAddr>, String> {
    if raw.trim() == "off" {
        return Ok(None);
    }
    raw.trim().parse().map(Some).map_err(|_| {
        format!("{raw:?} is not an address and port such as 127.0.0.1:8000, nor `off`")
    })
}

/// Whether two listeners would take the same port: the same address, or a wildcard that
/// covers the other (`0.0.0.0` its own family's addresses; `[::]` both families').
fn same_port(a: SocketAddr, b: SocketAddr) -> bool {
    let covers = |wild: std::net::IpAddr, other: std::net::IpAddr| {
        wild.is_unspecified() && (wild.is_ipv6() || other.is_ipv4())
    };
    let (x, y) = (a.ip(), b.ip());
    a.port() != 0 && a.port() == b.port() && (x == y || covers(x, y) || covers(y, x))
}

/// `--webhook-first-retry`: seconds before a failed webhook delivery is first tried again.
fn first_retry(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(s) if (0.1..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "{raw:?} is not a number of seconds between 0.1 and 3600"
        )),
    }
}

/// A `--tls-names` entry: a DNS name or an IP address, as a certificate can hold it.
fn tls_name(s: &str) -> Result<String, String> {
    let s = s.trim();
    rustls_pki_types::ServerName::try_from(s)
        .map(|_| s.to_string())
        .map_err(|_| format!("expected a DNS name or an IP address, got {s:?}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn settings(args: &[&str]) -> Result<super::ServeSettings, Vec<String>> {
        let cli = Cli::try_parse_from(["cloud", "serve"].iter().chain(args)).unwrap();
        let Command::Serve(serve) = cli.command else {
            unreachable!()
        };
        serve.settings()
    }

    #[test]
    fn every_bad_option_is_named_at_once() {
        let problems = settings(&[
            "--listen",
            "localhost:1",
            "--bridge-release",
            "banana",
            "--signal-rate-limit=-5",
            "--header-read-timeout",
            "0",
            "--public-url",
            "ftp://x",
            "--tls-names",
            "a b",
            "--webhook-first-retry",
            "0",
        ])
        .unwrap_err();
        let flags: Vec<&str> = problems
            .iter()
            .map(|p| p.split(':').next().unwrap())
            .collect();
        assert_eq!(
            flags,
            [
                "--signal-rate-limit",
                "--header-read-timeout",
                "--listen",
                "--tls-names",
                "--public-url",
                "--bridge-release",
                "--webhook-first-retry"
            ],
            "{problems:#?}"
        );
        assert!(problems[0].contains("\"-5\" is not a whole number from 0 to 4294967295"));
    }

    #[test]
    fn the_defaults_are_valid_and_listeners_may_not_share_a_port() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8443");
        assert_eq!(s.drain_timeout, 20);
        assert_eq!(s.bridge_release, crate::live::VERSION);
        assert!(
            settings(&["--http-listen", "off"])
                .unwrap()
                .http_listen
                .is_none()
        );
        let clash = settings(&[
            "--listen",
            "0.0.0.0:9000",
            "--http-listen",
            "127.0.0.1:9000",
        ])
        .unwrap_err();
        assert!(clash[0].contains("take the same port"), "{clash:?}");
    }
}
