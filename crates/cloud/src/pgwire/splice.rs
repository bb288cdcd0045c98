//! A session's bytes both ways once its greeting is through, and how the cloud ends one (its
//! API key was revoked, or the service is shutting down): it stops reading both sides, passes
//! on the rest of the server's message in progress, and adds a FATAL `ErrorResponse` saying
//! why, which psql prints before it reports the closed connection, as it does when PostgreSQL
//! itself ends a session. A message is never cut in two: when the rest of the one in progress
//! does not come, or the client does not take it, within [`FINISH_MESSAGE`], the connection
//! closes without the FATAL.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tunnel::postgres::error_response;

/// How long the rest of the server's message in progress may take, once the cloud ends a
/// session, before the connection is closed without the FATAL (it cannot go mid-message).
pub(super) const FINISH_MESSAGE: Duration = Duration::from_secs(5);

/// Why the cloud ends a session: the SQLSTATE and message the client reads.
pub(super) struct Ending {
    pub(super) code: &'static str,
    pub(super) message: String,
}

/// How a spliced session ended.
pub(super) enum Spliced {
    /// A side closed its connection; the bytes the client and the server sent.
    Closed { up: u64, down: u64 },
    /// The cloud ended it; whether the client was told why (the FATAL went out).
    Ended { ending: Ending, told: bool },
    /// Reading or writing failed.
    Failed(io::Error),
}

/// Relays bytes both ways until a side closes or `ended` resolves. A client that stops
/// reading cannot hold a session the cloud ends: `ended` is watched while a write to the
/// client waits too, and the ending (the rest of the message in progress, the FATAL) has
/// [`FINISH_MESSAGE`] in all.
pub(super) async fn splice<C, S>(
    client: &mut C,
    server: &mut S,
    ended: impl Future<Output = Ending>,
) -> Spliced
where
    C: AsyncRead + AsyncWrite + Unpin + Send,
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut client_r, mut client_w) = tokio::io::split(client);
    let (mut server_r, mut server_w) = tokio::io::split(server);
    let up_bytes = AtomicU64::new(0);
    let mut frames = Frames::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut ended = std::pin::pin!(ended);
    // The server's bytes read but not yet passed to the client when the cloud ended it.
    let mut unsent = 0..0;
    let outcome = {
        let up = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = client_r.read(&mut buf).await?;
                if n == 0 {
                    server_w.shutdown().await?;
                    return Ok::<(), io::Error>(());
                }
                server_w.write_all(&buf[..n]).await?;
                server_w.flush().await?;
                up_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
        };
        // Server to client. A write returns only what it took, and a pending one took
        // nothing, so `frames` always knows where the bytes the client was given stand.
        let down = async {
            loop {
                let n = tokio::select! {
                    read = server_r.read(&mut buf) => read?,
                    ending = &mut ended => return Ok(Some(ending)),
                };
                if n == 0 {
                    // A client that stopped reading would hold this close for ever.
                    let _ = tokio::time::timeout(FINISH_MESSAGE, client_w.shutdown()).await;
                    return Ok(None);
                }
                let mut at = 0;
                while at < n {
                    let written = tokio::select! {
                        written = client_w.write(&buf[at..n]) => written?,
                        ending = &mut ended => {
                            unsent = at..n;
                            return Ok(Some(ending));
                        }
                    };
                    if written == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    frames.take(&buf[at..at + written], false);
                    at += written;
                }
                // TLS holds what it was given until flushed.
                tokio::select! {
                    flushed = client_w.flush() => flushed?,
                    ending = &mut ended => return Ok(Some(ending)),
                }
            }
        };
        let mut up = std::pin::pin!(up);
        let mut down = std::pin::pin!(down);
        tokio::select! {
            done = &mut down => done,
            // The client closed: the server's last answers still go to it.
            sent = &mut up => match sent {
                Ok(()) => down.await,
                Err(e) => Err(e),
            },
        }
    };
    match outcome {
        Ok(None) => Spliced::Closed {
            up: up_bytes.load(Ordering::Relaxed),
            down: frames.passed,
        },
        Ok(Some(ending)) => {
            let unsent = buf[unsent].to_vec();
            let tell = async {
                if !frames.at_boundary() {
                    let upto = frames.take(&unsent, true);
                    client_w.write_all(&unsent[..upto]).await?;
                }
                finish_message(&mut frames, &mut server_r, &mut client_w, &mut buf).await?;
                client_w
                    .write_all(&error_response(ending.code, &ending.message))
                    .await?;
                client_w.flush().await
            };
            let told = matches!(tokio::time::timeout(FINISH_MESSAGE, tell).await, Ok(Ok(())));
            Spliced::Ended { ending, told }
        }
        Err(e) => Spliced::Failed(e),
    }
}

/// Passes on the server's bytes up to the end of the message in progress, and no further.
async fn finish_message<R, W>(
    frames: &mut Frames,
    server: &mut R,
    client: &mut W,
    buf: &mut [u8],
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    while !frames.at_boundary() {
        let n = server.read(buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let upto = frames.take(&buf[..n], true);
        client.write_all(&buf[..upto]).await?;
    }
    Ok(())
}

/// Where the server's messages end in the bytes passed to the client: each is a type byte,
/// a 4-byte length that counts itself, and a body.
#[derive(Default)]
struct Frames {
    /// The header of the message in progress, as far as it has come.
    head: [u8; 5],
    have: usize,
    /// Bytes of the message in progress's body still to come.
    left: u64,
    /// Bytes passed in all.
    passed: u64,
}

impl Frames {
    /// Whether the bytes passed so far end with a whole message.
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.left == 0
    }

    /// Takes the server's next `bytes`; with `stop`, only up to the end of the message in
    /// progress (called so inside a message: at a boundary it would take the next one whole).
    /// Returns how many were taken.
    fn take(&mut self, bytes: &[u8], stop: bool) -> usize {
        let mut i = 0;
        while i < bytes.len() {
            if self.left > 0 {
                let n = self.left.min((bytes.len() - i) as u64);
                i += n as usize;
                self.left -= n;
            } else {
                self.head[self.have] = bytes[i];
                self.have += 1;
                i += 1;
                if self.have == self.head.len() {
                    let len = u32::from_be_bytes([
                        self.head[1],
                        self.head[2],
                        self.head[3],
                        self.head[4],
                    ]);
                    self.left = u64::from(len).saturating_sub(4);
                    self.have = 0;
                }
            }
            if stop && self.at_boundary() {
                break;
            }
        }
        self.passed += i as u64;
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn boundaries_are_found_however_the_bytes_are_split() {
        let mut stream = message(b'D', b"row one");
        stream.extend(message(b'C', b""));
        stream.extend(message(b'Z', b"I"));
        for size in 1..stream.len() {
            let mut frames = Frames::default();
            let mut ends = Vec::new();
            for chunk in stream.chunks(size) {
                let mut at = 0;
                while at < chunk.len() {
                    at += frames.take(&chunk[at..], true);
                    if frames.at_boundary() {
                        ends.push(frames.passed);
                    }
                }
            }
            assert_eq!(ends, [12, 17, 23], "chunks of {size}");
        }
    }

    #[test]
    fn taking_without_stop_takes_everything_and_knows_where_it_stands() {
        let mut frames = Frames::default();
        assert!(frames.at_boundary());
        let stream = message(b'D', b"abcdef");
        assert_eq!(frames.take(&stream[..3], false), 3);
        assert!(!frames.at_boundary());
        assert_eq!(frames.take(&stream[3..], false), stream.len() - 3);
        assert!(frames.at_boundary());
        // A next message begun: stopping takes only the rest of it.
        let next = [message(b'C', b"SELECT 1"), message(b'Z', b"I")].concat();
        frames.take(&next[..2], false);
        assert_eq!(frames.take(&next[2..], true), 11);
        assert!(frames.at_boundary());
    }
}
