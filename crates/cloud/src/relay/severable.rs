//! The tunnel's connection as the cloud's HTTP/2 client reads it, with a switch that severs it.
//! hyper keeps a client connection running while a stream on it is open (a database session
//! may stay open for hours), so closing a tunnel whose token was revoked, or whose bridge
//! stopped answering, must end the connection itself, not only stop sending on it: once the
//! switch is thrown, the next read or write fails (a task waiting on either is woken), and
//! every stream of the tunnel fails with it.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// `inner`, until `sever` is cancelled.
pub struct Severable<T> {
    inner: T,
    severed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<T> Severable<T> {
    /// `inner`, severed when `sever` is cancelled.
    pub fn new(inner: T, sever: CancellationToken) -> Self {
        Severable {
            inner,
            severed: Box::pin(sever.cancelled_owned()),
        }
    }
}

impl<T> Severable<T> {
    /// The error every read and write gets once severed; registers `cx` for the switch
    /// otherwise, so that an idle connection task, waiting to read or to write, is woken by it.
    fn severed(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        self.severed.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the tunnel was closed (its token revoked, or its bridge not answering)",
            )
        })
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Severable<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.severed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Severable<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.severed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.severed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.severed(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
