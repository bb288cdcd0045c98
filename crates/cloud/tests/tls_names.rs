//! `--tls-names`: the self-signed certificate also names the hosts clients dial (a container's
//! or a Kubernetes Service's name), so they verify it; a bad name is refused at start.

use std::net::SocketAddr;
use std::process::Command;

use testkit::{Backend, Cloud, cloud_bin};

/// `GET https://{host}:{port}/livez` with `host` resolved to the cloud's loopback address.
async fn livez_as(cloud: &Cloud, host: &str) -> Result<u16, String> {
    testkit::install_crypto();
    let ca = std::fs::read(cloud.ca_path()).unwrap();
    let port = cloud.tls_port();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .resolve(host, SocketAddr::from(([127, 0, 0, 1], port)))
        .build()
        .unwrap();
    client
        .get(format!("https://{host}:{port}/livez"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("{e:?}"))
}

#[tokio::test]
async fn the_certificate_names_the_given_hosts() {
    let named = Cloud::start_with(Backend::Sqlite, &["--tls-names", "cloud,signals.internal"]);
    assert_eq!(livez_as(&named, "cloud").await, Ok(200));
    assert_eq!(livez_as(&named, "signals.internal").await, Ok(200));
    assert_eq!(livez_as(&named, "localhost").await, Ok(200));

    let plain = Cloud::start(Backend::Sqlite);
    let err = livez_as(&plain, "cloud").await.unwrap_err();
    assert!(err.contains("NotValidForName"), "{err}");
}

#[test]
fn a_name_a_certificate_cannot_hold_is_refused() {
    let out = Command::new(cloud_bin())
        .args(["serve", "--tls-names", "cloud,not a host"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls-names"), "{stderr}");
    assert!(
        stderr.contains("expected a DNS name or an IP address, got \"not a host\""),
        "{stderr}"
    );
}
