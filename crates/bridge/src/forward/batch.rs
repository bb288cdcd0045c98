//! Fewer, larger pieces of a bulk response body on their way into the tunnel.
//!
//! Why it is needed: an internal server's body reaches the bridge in the pieces it was written
//! in, and those can be small: nginx hands `git http-backend`'s pack on in 4 KiB chunks. Each
//! piece would be one HTTP/2 DATA frame, one TLS record and one `writev` on the tunnel, and
//! one frame to decode and pass on in the cloud, although the bridge reads far more than
//! 4 KiB at once. hyper's HTTP/1 client hands a body on one piece
//! at a time (its connection task decodes the next once this one is taken), so [`Batched`],
//! having taken a large piece, lets that task run (one turn of the scheduler, no timer) and
//! joins what it decoded meanwhile, turn after turn, up to [`BATCH`] bytes; the first turn
//! that brings nothing (the source now waits for the network) sends what is joined. Small
//! pieces (an API's answer, a stream of events) and the end of a body go on at once.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// Most bytes joined into one piece: four TLS records in one `writev`.
pub const BATCH: usize = 64 * 1024;

/// A piece at least this large marks a bulk transfer, whose next pieces are worth one turn of
/// the scheduler; a smaller one goes on at once.
const BULK: usize = 2048;

/// A body whose pieces are joined while it streams in bulk (see the module's doc).
pub struct Batched<B: Body> {
    inner: B,
    /// Data taken but not yet handed on (while the source gets one turn to decode more).
    joined: BytesMut,
    /// What the inner body gave after the data joined: a trailers frame, an error, or its
    /// end (`Some(None)`), handed on after that data.
    held: Option<Option<Result<Frame<Bytes>, B::Error>>>,
    /// Whether the last turn given to the source brought nothing: then what is joined goes.
    waited: bool,
}

impl<B: Body> Batched<B> {
    /// Wraps a response body.
    pub fn new(inner: B) -> Self {
        Batched {
            inner,
            joined: BytesMut::new(),
            held: None,
            waited: false,
        }
    }
}

impl<B> Body for Batched<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if this.joined.is_empty()
            && let Some(held) = this.held.take()
        {
            return Poll::Ready(held);
        }
        while this.held.is_none() && this.joined.len() < BATCH {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => {
                    if this.joined.len() < BULK {
                        if this.joined.is_empty() {
                            return Poll::Pending;
                        }
                        break;
                    }
                    if this.waited || this.inner.is_end_stream() {
                        break;
                    }
                    // One turn for the source to decode its next piece; back at once after.
                    this.waited = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    // A turn that brought a piece earns another: the source is decoding what
                    // it has already read, not waiting for the network.
                    Ok(data) if !this.joined.is_empty() || data.len() < BATCH => {
                        this.waited = false;
                        if this.joined.is_empty() {
                            // A buffer of its own for each piece, with room for a batch and a
                            // last chunk of up to 16 KiB past it: the joined bytes are copied
                            // once, never moved to a larger buffer.
                            this.joined = BytesMut::with_capacity(BATCH + BATCH / 4 + data.len());
                        } else if this.joined.capacity() - this.joined.len() < data.len() {
                            this.joined.reserve(data.len());
                        }
                        this.joined.extend_from_slice(&data);
                    }
                    Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Err(frame) => this.held = Some(Some(Ok(frame))),
                },
                Poll::Ready(other) => this.held = Some(other),
            }
        }
        this.waited = false;
        if this.joined.is_empty() {
            return Poll::Ready(this.held.take().flatten());
        }
        Poll::Ready(Some(Ok(Frame::data(this.joined.split().freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.joined.is_empty()
            && match &self.held {
                Some(held) => held.is_none(),
                None => self.inner.is_end_stream(),
            }
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = match &self.held {
            Some(None) => SizeHint::with_exact(0),
            _ => self.inner.size_hint(),
        };
        let joined = self.joined.len() as u64;
        // The upper bound first: `set_lower` asserts that the lower stays under the upper.
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + joined);
        }
        hint.set_lower(hint.lower() + joined);
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;

    type Piece = Result<Frame<Bytes>, Infallible>;

    fn data(n: usize, byte: u8) -> Piece {
        Ok(Frame::data(Bytes::from(vec![byte; n])))
    }

    /// A body fed through a channel, as hyper's HTTP/1 client feeds one.
    fn channel_body() -> (
        tokio::sync::mpsc::Sender<Piece>,
        Batched<impl Body<Data = Bytes, Error = Infallible> + Unpin>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(64);
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|piece| (piece, rx))
        });
        (tx, Batched::new(StreamBody::new(Box::pin(stream))))
    }

    /// While bytes are joined, a body of known length still says its length, the joined
    /// bytes with what the source has left (before, a `SizeHint` assertion failed).
    #[test]
    fn a_known_length_is_said_while_pieces_are_joined() {
        let mut body = Batched::new(http_body_util::Full::new(Bytes::from_static(b"abc")));
        body.joined.extend_from_slice(b"xy");
        assert_eq!(body.size_hint().exact(), Some(5));
    }

    /// Bulk pieces ready together go on as one, up to BATCH bytes and in order; trailers
    /// follow the data.
    #[tokio::test]
    async fn bulk_pieces_are_joined_up_to_the_batch() {
        let (tx, mut body) = channel_body();
        for i in 0..40u8 {
            tx.send(data(4096, i)).await.unwrap();
        }
        tx.send(Ok(Frame::trailers(http::HeaderMap::new())))
            .await
            .unwrap();
        drop(tx);
        let mut sizes = Vec::new();
        let mut bytes = Vec::new();
        let mut trailers = false;
        while let Some(frame) = body.frame().await {
            match frame.unwrap().into_data() {
                Ok(data) => {
                    assert!(!trailers, "data after the trailers");
                    sizes.push(data.len());
                    bytes.extend_from_slice(&data);
                }
                Err(_) => trailers = true,
            }
        }
        assert_eq!(sizes, vec![BATCH, BATCH, 40 * 4096 - 2 * BATCH]);
        assert!(trailers, "trailers lost");
        let expected: Vec<u8> = (0..40u8).flat_map(|i| vec![i; 4096]).collect();
        assert_eq!(bytes, expected, "bytes reordered or lost");
    }

    /// A source that decodes its next piece only once this one is taken (hyper's HTTP/1
    /// client) gets a turn per piece, and the pieces still go on joined.
    #[tokio::test]
    async fn a_source_that_decodes_one_piece_per_turn_is_joined_too() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(1);
        tokio::spawn(async move {
            for i in 0..32u8 {
                tx.send(data(4096, i)).await.unwrap();
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|piece| (piece, rx))
        });
        let mut body = Batched::new(StreamBody::new(Box::pin(stream)));
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            sizes.push(frame.unwrap().into_data().unwrap().len());
        }
        assert_eq!(sizes, vec![BATCH, BATCH]);
    }

    /// A bulk piece with nothing behind it waits one turn, not for the next piece; a small
    /// piece does not wait at all.
    #[tokio::test]
    async fn a_piece_never_waits_for_the_next() {
        let (tx, mut body) = channel_body();
        tx.send(data(10, 1)).await.unwrap();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first.len(), 10);
        tx.send(data(8192, 2)).await.unwrap();
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame())
            .await
            .expect("a bulk piece waited for the next")
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap();
        assert_eq!(second.len(), 8192);
        drop(tx);
        assert!(body.frame().await.is_none());
    }
}
