//! A session's bytes both ways once its greeting is through, and how the cloud ends one (its
//! API key was revoked, or the service is shutting down): it stops reading both sides, passes
//! on the rest of the server's message in progress, and adds a FATAL `ErrorResponse` saying
//! why, which psql prints before it reports the closed connection, as it does when PostgreSQL
//! itself ends a session. A message is never cut in two: when the rest of the one in progress
//! does not come, or the client does not take it, within [`FINISH_MESSAGE`], the connection
//! closes without the FATAL. When the server's side ends without a word of its own (the
//! bridge stopped, or its tunnel or its connection to the database broke) while the client is
//! still there, the client is given a FATAL `08006` saying so, where a message ends.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// The server's side ended without a FATAL of its own while the client was there; whether
    /// the client was told (the cloud's `08006` went out).
    Lost { told: bool },
    /// Reading or writing failed, or the client left mid-statement without a word; whether a
    /// statement was running then (the client had asked more than the server answered), which
    /// the server would run to its end.
    Failed {
        /// What failed.
        error: io::Error,
        /// Whether a statement was running.
        running: bool,
    },
}

/// What the client of a session whose server side went away reads.
pub(super) const LOST: &str = "the connection to the database through the bridge was lost: the bridge stopped, its tunnel or its own connection to the database failed (the bridge's log says which), or the database closed the session (its own log says why, such as a malformed message); connect again";

/// How the server-to-client half ended.
enum Down {
    /// The server closed after the client did, or after its own error.
    Closed,
    /// The cloud ended the session.
    Ended(Ending),
    /// The server's side ended without a word while the client was there.
    Lost,
}

/// Relays bytes both ways, the client's `early` bytes (sent before its session was ready)
/// first, until a side closes or `ended` resolves. A client that stops reading cannot hold a
/// session the cloud ends: `ended` is watched while a write to the client waits too, and the
/// ending (the rest of the message in progress, the FATAL) has [`FINISH_MESSAGE`] in all.
pub(super) async fn splice<C, S>(
    client: &mut C,
    server: &mut S,
    early: &[u8],
    ended: impl Future<Output = Ending>,
) -> Spliced
where
    C: AsyncRead + AsyncWrite + Unpin + Send,
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut client_r, mut client_w) = tokio::io::split(client);
    let (mut server_r, mut server_w) = tokio::io::split(server);
    let up_bytes = AtomicU64::new(0);
    let client_gone = AtomicBool::new(false);
    // Sync points the client sent (each answered with a ReadyForQuery), and the server's
    // answers passed to it: a statement runs while the first is ahead.
    let (asked, answered) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut frames = Frames::counting(b"Z");
    let mut buf = vec![0u8; 16 * 1024];
    let mut ended = std::pin::pin!(ended);
    // The server's bytes read but not yet passed to the client when the cloud ended it.
    let mut unsent = 0..0;
    let outcome = {
        let up = async {
            let mut buf = vec![0u8; 16 * 1024];
            // The client's messages, to see its `Terminate` (after which the server closes)
            // and its sync points (a query, a function call, an extended protocol `Sync`).
            let mut sent = Frames::client();
            let mut early = Some(early).filter(|e| !e.is_empty());
            loop {
                let bytes = match early.take() {
                    Some(early) => early,
                    None => match client_r.read(&mut buf).await? {
                        0 => break,
                        n => &buf[..n],
                    },
                };
                sent.take(bytes, false);
                if sent.last == b'X' {
                    client_gone.store(true, Ordering::Release);
                }
                server_w.write_all(bytes).await?;
                server_w.flush().await?;
                up_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                asked.store(sent.marks, Ordering::Release);
            }
            // Gone without `Terminate`: no one waits for the statement's answer.
            if sent.last != b'X' && sent.marks > answered.load(Ordering::Acquire) {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the client closed its connection mid-statement without Terminate",
                ));
            }
            client_gone.store(true, Ordering::Release);
            server_w.shutdown().await?;
            Ok::<(), io::Error>(())
        };
        // Server to client. A write returns only what it took, and a pending one took
        // nothing, so `frames` always knows where the bytes the client was given stand.
        let down = async {
            loop {
                let read = tokio::select! {
                    read = server_r.read(&mut buf) => read,
                    ending = &mut ended => return Ok(Down::Ended(ending)),
                };
                // PostgreSQL says why before it closes (its own FATAL); a bare end, or a
                // broken stream, between two messages is the bridge's side going away.
                let unexplained = !client_gone.load(Ordering::Acquire)
                    && frames.at_boundary()
                    && !frames.last_was_fatal();
                let n = match read {
                    Ok(0) | Err(_) if unexplained => return Ok(Down::Lost),
                    read => read?,
                };
                if n == 0 {
                    // A client that stopped reading would hold this close for ever.
                    let _ = tokio::time::timeout(FINISH_MESSAGE, client_w.shutdown()).await;
                    return Ok(Down::Closed);
                }
                let mut at = 0;
                while at < n {
                    let written = tokio::select! {
                        written = client_w.write(&buf[at..n]) => written?,
                        ending = &mut ended => {
                            unsent = at..n;
                            return Ok(Down::Ended(ending));
                        }
                    };
                    if written == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    frames.take(&buf[at..at + written], false);
                    answered.store(frames.marks, Ordering::Release);
                    at += written;
                }
                // TLS holds what it was given until flushed.
                tokio::select! {
                    flushed = client_w.flush() => flushed?,
                    ending = &mut ended => return Ok(Down::Ended(ending)),
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
        Ok(Down::Closed) => Spliced::Closed {
            up: up_bytes.load(Ordering::Relaxed),
            down: frames.passed,
        },
        Ok(Down::Lost) => {
            let tell = async {
                client_w.write_all(&error_response("08006", LOST)).await?;
                client_w.flush().await?;
                client_w.shutdown().await
            };
            let told = matches!(tokio::time::timeout(FINISH_MESSAGE, tell).await, Ok(Ok(())));
            Spliced::Lost { told }
        }
        Ok(Down::Ended(ending)) => {
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
        Err(error) => Spliced::Failed {
            error,
            running: asked.load(Ordering::Acquire) > answered.load(Ordering::Acquire),
        },
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
    /// The type byte of the last message begun (0 before the first).
    last: u8,
    /// The types of message [`Frames::marks`] counts.
    counted: &'static [u8],
    /// How many messages of the `counted` types have begun.
    marks: u64,
    /// The client's side: `Sync`s since its last `Execute` or `Query`. PostgreSQL ignores
    /// those it reads in copy-in mode (a `COPY … FROM STDIN` that `Execute` started, which the
    /// client's `Sync` may follow before it sees `CopyInResponse`), so its `CopyDone` or
    /// `CopyFail` takes them back off `marks`.
    syncs_since_execute: Option<u64>,
    /// The start of the last `ErrorResponse`'s body, where its severity is.
    error: [u8; ERROR_HEAD],
    error_len: usize,
}

/// How much of an `ErrorResponse` is kept to read its severity: the fields `S` (localized) and
/// `V` (PostgreSQL 9.6 and later, never localized) come first.
const ERROR_HEAD: usize = 32;

impl Frames {
    /// Frames that count the messages of the types `counted`.
    fn counting(counted: &'static [u8]) -> Frames {
        Frames {
            counted,
            ..Frames::default()
        }
    }

    /// The client's messages, counting its sync points (a query, a function call, an extended
    /// protocol `Sync`), each of which the server answers with a `ReadyForQuery`.
    fn client() -> Frames {
        Frames {
            syncs_since_execute: Some(0),
            ..Frames::counting(b"QFS")
        }
    }

    /// Whether the bytes passed so far end with a whole message.
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.left == 0
    }

    /// Whether the last message was an `ErrorResponse` ending the session (`FATAL`, `PANIC`),
    /// after which PostgreSQL closes: the client has been told why. An `ERROR` leaves the
    /// session open, so a close after it is unexplained. A severity not found in the kept start
    /// counts as fatal.
    fn last_was_fatal(&self) -> bool {
        if self.last != b'E' {
            return false;
        }
        let mut fields = self.error[..self.error_len].split(|&b| b == 0);
        let (mut localized, mut severity) = (None, None);
        for field in fields.by_ref().take(2) {
            match field.split_first() {
                Some((b'S', value)) => localized = Some(value),
                Some((b'V', value)) => severity = Some(value),
                _ => {}
            }
        }
        match severity.or(localized) {
            Some(value) => value != b"ERROR",
            None => true,
        }
    }

    /// Takes the server's next `bytes`; with `stop`, only up to the end of the message in
    /// progress (called so inside a message: at a boundary it would take the next one whole).
    /// Returns how many were taken.
    fn take(&mut self, bytes: &[u8], stop: bool) -> usize {
        let mut i = 0;
        while i < bytes.len() {
            if self.left > 0 {
                let n = self.left.min((bytes.len() - i) as u64);
                if self.last == b'E' && self.error_len < ERROR_HEAD {
                    let keep = (n as usize).min(ERROR_HEAD - self.error_len);
                    self.error[self.error_len..self.error_len + keep]
                        .copy_from_slice(&bytes[i..i + keep]);
                    self.error_len += keep;
                }
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
                    self.last = self.head[0];
                    self.marks += u64::from(self.counted.contains(&self.last));
                    if let Some(syncs) = self.syncs_since_execute.as_mut() {
                        match self.last {
                            b'E' | b'Q' => *syncs = 0,
                            b'S' => *syncs += 1,
                            b'c' | b'f' => self.marks -= std::mem::take(syncs),
                            _ => {}
                        }
                    }
                    self.error_len = 0;
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
mod tests;
