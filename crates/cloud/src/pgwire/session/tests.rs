use std::pin::Pin;
use std::task::{Context, Poll};

use super::*;

/// A client that never takes another byte: every write and the shutdown wait forever.
struct NotReading;

impl AsyncWrite for NotReading {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Pending
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Pending
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Pending
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stopped_reading_is_closed_within_the_finish_time() {
    let started = tokio::time::Instant::now();
    close(&mut NotReading).await;
    assert_eq!(started.elapsed(), super::super::splice::FINISH_MESSAGE);
}
