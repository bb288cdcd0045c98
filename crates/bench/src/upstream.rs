//! `bench upstream`: the "internal API" of the tunnel benchmark, a minimal hyper server in its
//! own process (as a real internal service would be), so that the direct and the tunnelled
//! runs hit the same server and neither shares a runtime with the load generator.
//!
//! `GET /anything` answers `hello, world`; `GET /bulk?bytes=N` streams N bytes;
//! `?sleep_ms=N` waits first (to hold streams open).

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::procs::sibling;

/// Options of `bench upstream`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on; the chosen one is printed as `listening on ADDR`.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn query(req: &Request<hyper::body::Incoming>, key: &str) -> Option<u64> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.parse().ok()).flatten()
    })
}

async fn answer(req: Request<hyper::body::Incoming>) -> Result<Response<Body>, Infallible> {
    if let Some(ms) = query(&req, "sleep_ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if req.uri().path().ends_with("/bulk") {
        let total = query(&req, "bytes").unwrap_or(0);
        let chunk = Bytes::from(vec![b'x'; 256 * 1024]);
        let stream = futures_util::stream::unfold(total, move |left| {
            let chunk = chunk.clone();
            async move {
                (left > 0).then(|| {
                    let n = left.min(chunk.len() as u64) as usize;
                    (
                        Ok::<_, Infallible>(Frame::data(chunk.slice(..n))),
                        left - n as u64,
                    )
                })
            }
        });
        return Ok(Response::new(StreamBody::new(stream).boxed()));
    }
    Ok(Response::new(
        Full::new(Bytes::from_static(b"hello, world\n")).boxed(),
    ))
}

/// Serves until killed.
pub async fn run(args: Args) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer))
                .await;
        });
    }
}

/// A `bench upstream` child process, killed on drop.
pub struct Upstream {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Upstream {
    /// Starts `bench upstream` and waits for its address.
    pub fn start() -> Result<Self> {
        let mut child = Command::new(sibling("bench")?)
            .arg("upstream")
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .with_context(|| format!("bench upstream said {line:?}"))?
            .parse()?;
        Ok(Upstream { child, addr })
    }

    /// Its process id (for CPU accounting).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
