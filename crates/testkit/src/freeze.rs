//! A TCP relay that can go silent: it stops forwarding bytes without closing either side,
//! as a dead NAT entry or a crashed middlebox would. Tests use it to check heartbeats.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running relay to `target`.
pub struct FreezingRelay {
    /// Where to connect instead of the target.
    pub addr: SocketAddr,
    frozen: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FreezingRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        while frozen.load(Ordering::SeqCst) {
            // Hold the bytes forever: neither forward nor close.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl FreezingRelay {
    /// Starts relaying `127.0.0.1:0` → `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, f.clone()));
                tokio::spawn(pump(sr, cw, f.clone()));
            }
        });
        FreezingRelay { addr, frozen, task }
    }

    /// Stops (true) or resumes (false) forwarding on every connection.
    pub fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }
}
