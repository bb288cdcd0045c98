//! A database session's bytes, both ways between the tunnel stream and the server, counted,
//! with the client's statements tapped for the audit; cut at the bridge's shutdown.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::settings::Settings;
use super::statements::Statements;

/// Bytes read at once in each direction of a session: queries and rows are small, and 100
/// idle sessions should not cost 100 × 128 KiB.
const SPLICE_BUFFER: usize = 16 * 1024;

/// What `ended` starts with when the tunnel stream failed under a session (the tunnel lost or
/// closed): the client is gone, so a statement still running is the bridge's to cancel.
pub(super) const TUNNEL_FAILED: &str = "tunnel stream failed";

/// Copies bytes both ways until both directions end, first sending the server's `pending`
/// bytes to the client, or until the tunnel stream fails (the server's side would wait for a
/// running statement's end). Returns how it ended and the bytes (from the client, to the
/// client).
/// `statement` is called with each statement text the client sends, masked strictly when
/// `strict` (see `Statements`) or once the server reports a setting that makes it so
/// ([`Settings`]).
pub(super) async fn splice<C, S>(
    client: &mut C,
    server: &mut S,
    pending: BytesMut,
    stop: &CancellationToken,
    strict: bool,
    statement: impl FnMut(String),
) -> (String, (u64, u64))
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let (mut client_r, mut client_w) = tokio::io::split(client);
    let (mut server_r, mut server_w) = tokio::io::split(server);
    let (up_total, down_total) = (AtomicU64::new(0), AtomicU64::new(0));
    let server_strict = AtomicBool::new(false);
    let server_ready = AtomicU64::new(0);
    let up = async {
        let mut tap = Statements::new(statement, strict);
        let mut buf = vec![0u8; SPLICE_BUFFER];
        let mut n_total = 0u64;
        let result = loop {
            match client_r.read(&mut buf).await {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    n_total += n as u64;
                    up_total.fetch_add(n as u64, Ordering::Relaxed);
                    if server_strict.load(Ordering::Relaxed) {
                        tap.make_strict();
                    }
                    tap.answered(server_ready.load(Ordering::Relaxed));
                    tap.feed(&buf[..n]);
                    if let Err(e) = server_w.write_all(&buf[..n]).await {
                        break Err(format!("database connection failed: {e}"));
                    }
                }
                Err(e) => break Err(format!("{TUNNEL_FAILED}: {e}")),
            }
        };
        let _ = server_w.shutdown().await;
        (result, n_total)
    };
    let down = async {
        let mut settings = Settings::default();
        settings.feed(&pending);
        let mut n_total = pending.len() as u64;
        down_total.fetch_add(n_total, Ordering::Relaxed);
        let mut result = client_w
            .write_all(&pending)
            .await
            .map_err(|e| format!("{TUNNEL_FAILED}: {e}"));
        let mut buf = vec![0u8; SPLICE_BUFFER];
        while result.is_ok() {
            match server_r.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    n_total += n as u64;
                    down_total.fetch_add(n as u64, Ordering::Relaxed);
                    settings.feed(&buf[..n]);
                    if settings.strict() {
                        server_strict.store(true, Ordering::Relaxed);
                    }
                    server_ready.store(settings.ready(), Ordering::Relaxed);
                    result = client_w
                        .write_all(&buf[..n])
                        .await
                        .map_err(|e| format!("{TUNNEL_FAILED}: {e}"));
                }
                Err(e) => result = Err(format!("database connection failed: {e}")),
            }
        }
        let _ = client_w.shutdown().await;
        (result, n_total)
    };
    // The byte counts live outside the two futures, so a shutdown that drops them mid-copy
    // still reports what went through.
    let both = async {
        tokio::pin!(up, down);
        tokio::select! {
            (up_result, up_bytes) = &mut up => match up_result {
                Err(e) if e.starts_with(TUNNEL_FAILED) => {
                    (Err(e), up_bytes, Ok(()), down_total.load(Ordering::Relaxed))
                }
                up_result => {
                    let (down_result, down_bytes) = down.await;
                    (up_result, up_bytes, down_result, down_bytes)
                }
            },
            (down_result, down_bytes) = &mut down => {
                let (up_result, up_bytes) = up.await;
                (up_result, up_bytes, down_result, down_bytes)
            }
        }
    };
    tokio::select! {
        (up_result, up_bytes, down_result, down_bytes) = both => {
            let ended = match (up_result, down_result) {
                (Ok(()), Ok(())) => "closed".to_string(),
                (Err(e), _) | (_, Err(e)) => e,
            };
            (ended, (up_bytes, down_bytes))
        }
        () = stop.cancelled() => ("bridge shutdown".to_string(), (up_total.load(Ordering::Relaxed), down_total.load(Ordering::Relaxed))),
    }
}
