//! Fewer, larger writes on the tunnel connection: HTTP/2 frames from several streams go out in
//! one TLS record and one system call instead of one each.
//!
//! Why it is needed: the `h2` crate writes an encoded frame as soon as a DATA frame of 256
//! bytes or more is queued (it keeps such a payload aside rather than copying it, then must
//! flush it before buffering the next frame), and the TLS layer under it sends every write at
//! once: without this layer, a bridge answering many small requests at a time makes one TLS
//! record and one `writev` per answer. [`Coalesced`] takes those writes into one buffer and
//! sends it when the connection task flushes, after it has written every frame its streams had
//! queued. It never puts a flush off to gather more (the answers would wait for it; measured in
//! docs/benchmarks.md). Large writes (bulk transfers) pass straight through.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes held before they are written, whatever the flushes say.
const HOLD: usize = 64 * 1024;
/// A write at least this large goes straight to the connection when nothing is held: copying
/// it would cost more than the system call it saves.
const PASS: usize = 16 * 1024;
/// A connection whose small writes are gathered until a flush (see the module's doc).
#[derive(Debug)]
pub struct Coalesced<T> {
    inner: T,
    held: Vec<u8>,
}

impl<T> Coalesced<T> {
    /// Wraps a connection (the tunnel's TLS stream).
    pub fn new(inner: T) -> Self {
        Coalesced {
            inner,
            held: Vec::with_capacity(HOLD),
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes everything held to the connection.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut written = 0;
        while written < self.held.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.held[written..]) {
                Poll::Ready(Ok(0)) => {
                    self.held.drain(..written);
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => {
                    self.held.drain(..written);
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => {
                    self.held.drain(..written);
                    return Poll::Pending;
                }
            }
        }
        self.held.clear();
        Poll::Ready(Ok(()))
    }

    /// Makes room for `len` more bytes; `Ready(true)` when they should bypass the buffer.
    fn poll_room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        if self.held.len() + len > HOLD {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(self.held.is_empty() && len >= PASS))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if ready!(this.poll_room(cx, buf.len()))? {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        this.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if ready!(this.poll_room(cx, len))? {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        for b in bufs {
            this.held.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }

    /// Vectored, so that `h2` hands over a frame's head and payload in one call.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Whether `b` has bytes to read right now, without waiting.
    async fn readable_now(b: &mut tokio::io::DuplexStream, got: &mut [u8]) -> Option<usize> {
        let mut buf = ReadBuf::new(got);
        let polled =
            std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *b).poll_read(cx, &mut buf))).await;
        polled.is_ready().then(|| buf.filled().len())
    }

    /// Small writes reach the peer only on a flush, as one piece.
    #[tokio::test]
    async fn small_writes_are_held_until_the_flush() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut w = Coalesced::new(a);
        let mut got = [0u8; 16];
        w.write_all(b"one ").await.unwrap();
        w.write_all(b"two").await.unwrap();
        assert_eq!(
            readable_now(&mut b, &mut got).await,
            None,
            "sent before the flush"
        );
        w.flush().await.unwrap();
        let n = readable_now(&mut b, &mut got)
            .await
            .expect("sent at the flush");
        assert_eq!(&got[..n], b"one two");
    }

    /// A large write with nothing held passes straight through; more than HOLD bytes of small
    /// writes are written without waiting for a flush; shutdown writes what is held.
    #[tokio::test]
    async fn large_writes_pass_and_shutdown_drains() {
        let (a, mut b) = tokio::io::duplex(1 << 22);
        let mut w = Coalesced::new(a);
        let big = vec![7u8; PASS];
        w.write_all(&big).await.unwrap();
        let mut got = vec![0u8; PASS];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(got, big);
        for _ in 0..(HOLD / 1000 + 1) {
            w.write_all(&[1u8; 1000]).await.unwrap();
        }
        let mut first = vec![0u8; HOLD / 2];
        b.read_exact(&mut first).await.unwrap();
        w.write_all(b"end").await.unwrap();
        w.shutdown().await.unwrap();
        let mut rest = Vec::new();
        b.read_to_end(&mut rest).await.unwrap();
        assert_eq!(first.len() + rest.len(), (HOLD / 1000 + 1) * 1000 + 3);
        assert!(rest.ends_with(b"end"));
    }
}
