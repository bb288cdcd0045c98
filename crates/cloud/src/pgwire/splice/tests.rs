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

/// Runs a session whose server sends `server_says` and then ends its stream, while the
/// client stays; returns how it ended and every byte the client received.
async fn server_goes_away_after(server_says: Vec<u8>) -> (Spliced, Vec<u8>) {
    let (mut client, mut client_end) = tokio::io::duplex(64 * 1024);
    let (mut server, mut server_end) = tokio::io::duplex(64 * 1024);
    server_end.write_all(&server_says).await.unwrap();
    drop(server_end);
    let spliced = splice(&mut client, &mut server, &[], std::future::pending()).await;
    drop(client);
    let mut received = Vec::new();
    client_end.read_to_end(&mut received).await.unwrap();
    (spliced, received)
}

/// The bridge's side ending between two messages (a stopped bridge, a broken tunnel) is
/// told to the client as a FATAL 08006, after what the server had said.
#[tokio::test]
async fn a_server_side_that_ends_without_a_word_is_told_to_the_client() {
    let ready = message(b'Z', b"I");
    let (spliced, received) = server_goes_away_after(ready.clone()).await;
    assert!(matches!(spliced, Spliced::Lost { told: true }));
    assert!(received.starts_with(&ready));
    let fatal = &received[ready.len()..];
    assert_eq!(fatal[0], b'E');
    let text = String::from_utf8_lossy(fatal);
    assert!(
        text.contains("08006") && text.contains("through the bridge was lost"),
        "{text}"
    );
}

/// A client that sent `Terminate` and waits for the server to close is not told of a loss.
#[tokio::test]
async fn a_server_closing_after_the_client_s_terminate_is_no_loss() {
    let (mut client, mut client_end) = tokio::io::duplex(64 * 1024);
    let (mut server, mut server_end) = tokio::io::duplex(64 * 1024);
    let session = async {
        let spliced = splice(&mut client, &mut server, &[], std::future::pending()).await;
        drop(client);
        spliced
    };
    let peers = async {
        client_end.write_all(&message(b'X', b"")).await.unwrap();
        let mut terminate = [0u8; 5];
        server_end.read_exact(&mut terminate).await.unwrap();
        assert_eq!(terminate[0], b'X');
        drop(server_end);
        let mut received = Vec::new();
        client_end.read_to_end(&mut received).await.unwrap();
        received
    };
    let (spliced, received) = tokio::join!(session, peers);
    assert!(matches!(spliced, Spliced::Closed { .. }));
    assert!(received.is_empty(), "{received:?}");
}

/// A client that leaves without `Terminate` while its query runs: no one waits for the
/// answer, so the session ends at once, saying a statement was running (the cloud cancels
/// it). Its bytes sent before the session was ready reached the server first.
#[tokio::test]
async fn a_client_gone_mid_statement_ends_the_session_at_once() {
    let (mut client, client_end) = tokio::io::duplex(64 * 1024);
    let (mut server, mut server_end) = tokio::io::duplex(64 * 1024);
    let early = message(b'Q', b"SELECT pg_sleep(60)\0");
    let expected = early.clone();
    let session = splice(&mut client, &mut server, &early, std::future::pending());
    let peers = async move {
        let mut got = vec![0u8; expected.len()];
        server_end.read_exact(&mut got).await.unwrap();
        assert_eq!(got, expected);
        drop(client_end);
        // The server stays, silent, as one running a long statement.
        server_end
    };
    let both = async { tokio::join!(session, peers) };
    let (spliced, _server) = tokio::time::timeout(std::time::Duration::from_secs(10), both)
        .await
        .expect("the session ends without waiting for the statement");
    assert!(matches!(spliced, Spliced::Failed { running: true, .. }));
}

/// The client's sync points match the server's answers however the client reads COPY:
/// the `Sync` an extended protocol `COPY … FROM STDIN` is sent with is ignored (PostgreSQL
/// is then in copy-in mode), a simple query's COPY sends none.
#[test]
fn sync_points_are_counted_as_the_server_answers_them() {
    let extended = [
        message(b'P', b"\0COPY t FROM STDIN\0\0\0"),
        message(b'B', b"\0\0\0\0\0\0\0"),
        message(b'E', b"\0\0\0\0\0"),
        message(b'S', b""),
        message(b'd', b"1\n"),
        message(b'c', b""),
        message(b'S', b""),
    ]
    .concat();
    let simple = [
        message(b'Q', b"COPY t FROM STDIN\0"),
        message(b'd', b"1\n"),
        message(b'c', b""),
    ]
    .concat();
    let pipelined = [
        message(b'Q', b"SELECT 1\0"),
        message(b'P', b"\0SELECT 2\0\0\0"),
        message(b'E', b"\0\0\0\0\0"),
        message(b'S', b""),
    ]
    .concat();
    for (bytes, answers) in [(extended, 1), (simple, 1), (pipelined, 2)] {
        let mut sent = Frames::client();
        sent.take(&bytes, false);
        assert_eq!(sent.marks, answers);
    }
}

/// An `ERROR` leaves a session open: a close right after it is a loss, told as one, in
/// whatever language the server's `S` field is.
#[tokio::test]
async fn a_server_side_that_ends_after_a_plain_error_is_told_to_the_client() {
    for body in [
        &b"SERROR\0VERROR\0C42P01\0Mrelation \"nope\" does not exist\0\0"[..],
        b"SFEHLER\0VERROR\0C42P01\0MRelation \xc2\xbbnope\xc2\xab existiert nicht\0\0",
        b"SERROR\0C42P01\0Mrelation does not exist\0\0",
    ] {
        let error = [message(b'E', body), message(b'Z', b"I")].concat();
        let (spliced, received) = server_goes_away_after(error.clone()).await;
        assert!(matches!(spliced, Spliced::Lost { told: true }));
        assert!(received.starts_with(&error));
        let text = String::from_utf8_lossy(&received[error.len()..]).into_owned();
        assert!(text.contains("08006"), "{text}");
        // The error alone, with no ReadyForQuery after it yet, is no different.
        let error = message(b'E', body);
        let (spliced, _) = server_goes_away_after(error).await;
        assert!(matches!(spliced, Spliced::Lost { told: true }));
    }
}

/// PostgreSQL's own FATAL before it closes is the whole story: nothing is added.
#[tokio::test]
async fn a_server_that_says_why_it_closes_gets_nothing_added() {
    for body in [
        &b"SFATAL\0VFATAL\0C57P01\0Mterminating connection\0\0"[..],
        b"SFATAL\0C57P01\0Mterminating connection\0\0",
        b"SPANIK\0VPANIC\0CXX000\0Mpanic\0\0",
    ] {
        let fatal = message(b'E', body);
        let (spliced, received) = server_goes_away_after(fatal.clone()).await;
        assert!(matches!(spliced, Spliced::Closed { .. }));
        assert_eq!(received, fatal);
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
