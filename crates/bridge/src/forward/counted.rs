//! Counting the body bytes that really stream each way, for the audit record.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// Where a [`Counted`] body reports the size of each data frame.
pub trait Tally: Unpin {
    /// `n` more body bytes went through.
    fn add(&mut self, n: u64);

    /// The body streamed to its end (not cut by an error or by being dropped).
    fn ended(&self) {}
}

/// The request's bytes_in, read when the response ends.
impl Tally for Arc<AtomicU64> {
    fn add(&mut self, n: u64) {
        self.fetch_add(n, Ordering::Relaxed);
    }
}

/// A body passed on unchanged while its bytes are counted for the audit record: what really
/// streamed, since a declared length may be absent or wrong.
pub struct Counted<T> {
    pub(super) inner: Incoming,
    pub(super) tally: T,
}

impl<T: Tally> Body for Counted<T> {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.tally.add(data.len() as u64);
                }
                // The caller may stop polling once the body says it has ended, or after
                // trailers, which are always the last frame.
                if frame.is_trailers() || self.inner.is_end_stream() {
                    self.tally.ended();
                }
            }
            Poll::Ready(None) => self.tally.ended(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let end = self.inner.is_end_stream();
        if end {
            self.tally.ended();
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
