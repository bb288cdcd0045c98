//! `bridge healthcheck`: ask a running bridge's `/health` (on the configured
//! `health_check_address` and `health_check_port`) and exit 0 when it answers 200. Container
//! images carry no shell or curl, so a container health check runs the binary itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

use crate::config::{Config, ProcessEnv};

/// The whole probe (connect, request, body) must fit in this; a health check that hangs is as
/// bad as one that fails.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Where a health endpoint listening on `address` and `port` is reached from the same host:
/// an unspecified address (`0.0.0.0`, `::`) on loopback. `None` when the port is chosen at
/// start (`health_check_port: 0`), which no other process can know.
fn target(address: IpAddr, port: u16) -> Option<SocketAddr> {
    if port == 0 {
        return None;
    }
    let ip = match address {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Some(SocketAddr::new(ip, port))
}

/// `GET /health` on `addr`: the status code and the body.
async fn probe(addr: SocketAddr) -> Result<(u16, String), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e} (is the bridge running?)"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("HTTP to {addr}: {e}"))?;
    tokio::spawn(conn);
    let request = http::Request::get("/health")
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("GET http://{addr}/health: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("GET http://{addr}/health: reading the answer: {e}"))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).trim().to_string()))
}

/// Runs the command: exit 0 when healthy or degraded (200), 1 when unhealthy or unreachable,
/// 2 when the configuration is invalid or names no fixed port.
pub fn healthcheck(path: Option<&Path>) -> ExitCode {
    // Only the two health fields are validated: a health check needs no secrets.
    let (address, port) = match Config::health_endpoint(path, &ProcessEnv) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let Some(addr) = target(address, port) else {
        eprintln!(
            "health_check_port is 0 (a free port chosen at start): set a fixed health_check_port so that `bridge healthcheck` can find it"
        );
        return ExitCode::from(2);
    };
    let Ok(rt) = crate::run::runtime() else {
        return ExitCode::from(1);
    };
    let outcome = rt.block_on(async { tokio::time::timeout(TIMEOUT, probe(addr)).await });
    match outcome {
        Ok(Ok((200, body))) => {
            println!("{body}");
            ExitCode::SUCCESS
        }
        Ok(Ok((status, body))) => {
            eprintln!("unhealthy: http://{addr}/health answered {status}: {body}");
            ExitCode::from(1)
        }
        Ok(Err(e)) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
        Err(_) => {
            eprintln!(
                "http://{addr}/health did not answer within {}s",
                TIMEOUT.as_secs()
            );
            ExitCode::from(1)
        }
    }
}
