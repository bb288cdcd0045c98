use super::*;

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

#[test]
fn statements_are_found_across_any_split() {
    let mut stream = message(b'Q', b"SELECT 1\0");
    stream.extend(message(b'P', b"s1\0INSERT INTO t VALUES ($1)\0\0\0"));
    stream.extend(message(b'B', b"\0s1\0\0\0\0\0\0\0"));
    stream.extend(message(b'd', b"copy data, not a statement"));
    stream.extend(message(b'F', &[0, 0, 0x0a, 0xbc, 0, 0]));
    stream.extend(message(b'Q', b"COMMIT\0"));
    for chunk in [1, 2, 3, 7, 64, stream.len()] {
        let mut seen = Vec::new();
        let mut tap = Statements::new(|s| seen.push(s), false);
        for piece in stream.chunks(chunk) {
            tap.feed(piece);
        }
        drop(tap);
        assert_eq!(
            seen,
            [
                "SELECT 1",
                "INSERT INTO t VALUES ($1)",
                "function call (oid 2748)",
                "COMMIT"
            ],
            "chunks of {chunk}"
        );
    }
}

/// A text that is not UTF-8 (a Latin-1 session's `é`) is masked strictly: read lossily, two
/// different dollar-quote tags would look alike and hide what follows.
#[test]
fn texts_that_are_not_utf8_are_masked_strictly() {
    let mut seen = Vec::new();
    let mut tap = Statements::new(|s| seen.push(s), false);
    tap.feed(&message(
        b'Q',
        b"SELECT $\xe9$ $\xea$ -- $\xe9$; ALTER ROLE v PASSWORD 'hunter9q'\0",
    ));
    drop(tap);
    assert_eq!(seen, ["SELECT …"]);
}

/// A query message whose length is too short to hold a text (malformed: the server answers
/// `08P01` to a length of 4, and closes the session on a shorter one, running nothing) is no
/// statement; a whole one after it still is.
#[test]
fn a_message_too_short_to_hold_a_text_is_no_statement() {
    let mut seen = Vec::new();
    let mut tap = Statements::new(|s| seen.push(s), false);
    for length in [2i32, -1, 4] {
        let mut bytes = vec![b'Q'];
        bytes.extend_from_slice(&length.to_be_bytes());
        tap.feed(&bytes);
    }
    // A text without its ending NUL: the server answers 08P01, running nothing.
    tap.feed(&message(b'Q', b"SELECT 'unended'"));
    tap.feed(&message(b'Q', b"SELECT 1\0"));
    drop(tap);
    assert_eq!(seen, ["SELECT 1"]);
}

/// A `Parse` whose statement name is long keeps less of its text: a text that does not end
/// within what is kept is a cut one, marked so, with no literal of it kept.
#[test]
fn a_text_cut_short_by_a_long_statement_name_is_read_as_cut() {
    let mut body = vec![b'p'; 300];
    body.push(0);
    body.extend_from_slice(b"SELECT 1 WHERE 'SCRAM-hunter7q' = 1 /* ");
    body.extend(std::iter::repeat_n(b'x', MAX_STATEMENT));
    body.extend_from_slice(b" */ OR rolpassword IS NULL\0\0\0");
    let mut seen = Vec::new();
    let mut tap = Statements::new(|s| seen.push(s), false);
    tap.feed(&message(b'P', &body));
    drop(tap);
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].starts_with("SELECT … WHERE …"),
        "{}",
        seen[0].chars().take(60).collect::<String>()
    );
    assert!(seen[0].ends_with('…'));
    assert!(!seen[0].contains("hunter7q"));
}

/// Where strings may not read as the masking reads them (`standard_conforming_strings` off, or
/// a client encoding whose characters may end in a backslash), everything after the first
/// `password` is cut: from the session's start, or once a statement names either setting.
#[test]
fn sessions_with_other_string_rules_are_masked_strictly() {
    let statement = "ALTER ROLE v PASSWORD 'x'";
    // Each sent once the server has answered the one before.
    let answered_in_turn = |texts: &[&str]| {
        let mut seen = Vec::new();
        let mut tap = Statements::new(|s| seen.push(s), false);
        for (answered, text) in texts.iter().enumerate() {
            tap.answered(answered as u64);
            tap.feed(&message(b'Q', format!("{text}\0").as_bytes()));
        }
        drop(tap);
        seen
    };
    let seen = answered_in_turn(&[
        statement,
        "SET standard_conforming_strings = off",
        statement,
    ]);
    assert_eq!(
        seen,
        [
            "ALTER ROLE v PASSWORD '…'",
            "SET standard_conforming_strings = off",
            "ALTER ROLE v PASSWORD…",
        ]
    );
    // `SET NAMES` however spaced or commented.
    for set in [
        "SET  NAMES 'SJIS'",
        "SET /**/ NAMES 'SJIS'",
        "SET SESSION\nNAMES 'SJIS'",
    ] {
        let seen = answered_in_turn(&[set, statement]);
        assert_eq!(seen[1], "ALTER ROLE v PASSWORD…", "after {set:?}");
    }
    assert_eq!(
        answered_in_turn(&["SELECT 1", statement]),
        ["SELECT 1", "ALTER ROLE v PASSWORD '…'"]
    );
    let mut seen = Vec::new();
    let mut tap = Statements::new(|s| seen.push(s), true);
    tap.feed(&message(b'Q', b"ALTER ROLE v PASSWORD 'x'\0"));
    drop(tap);
    assert_eq!(seen, ["ALTER ROLE v PASSWORD…"]);
}

/// A statement sent before the server answered the one before (pipelined, or after an
/// `Execute` not yet synced) is read before the server reports what that one set, such as a
/// `client_encoding` changed by a function: it is masked strictly.
#[test]
fn statements_sent_before_the_last_was_answered_are_masked_strictly() {
    let statement = b"ALTER ROLE v PASSWORD 'x'\0";
    let mut seen = Vec::new();
    let mut tap = Statements::new(|s| seen.push(s), false);
    tap.feed(&message(b'Q', b"SELECT f()\0"));
    tap.feed(&message(b'Q', statement));
    tap.answered(2);
    tap.feed(&message(b'Q', statement));
    tap.answered(3);
    // Extended protocol: an Execute with no Sync after it yet.
    let mut parse = b"\0".to_vec();
    parse.extend_from_slice(statement);
    parse.extend_from_slice(b"\0\0");
    tap.feed(&message(b'P', b"\0SELECT f()\0\0\0"));
    tap.feed(&message(b'B', b"\0\0\0\0\0\0\0\0"));
    tap.feed(&message(b'E', b"\0\0\0\0\0"));
    tap.feed(&message(b'P', &parse));
    tap.feed(&message(b'S', b""));
    tap.answered(4);
    tap.feed(&message(b'P', &parse));
    // A fast-path function call is answered with a ReadyForQuery of its own: what is sent
    // before that answer is unsettled too.
    tap.feed(&message(b'F', b"\0\0\0\x01\0\0\0\0\0\0"));
    tap.feed(&message(b'Q', statement));
    tap.answered(6);
    tap.feed(&message(b'Q', statement));
    drop(tap);
    assert_eq!(
        seen,
        [
            "SELECT f()",
            "ALTER ROLE v PASSWORD…",
            "ALTER ROLE v PASSWORD '…'",
            "SELECT f()",
            "ALTER ROLE v PASSWORD…",
            "ALTER ROLE v PASSWORD '…'",
            "function call (oid 1)",
            "ALTER ROLE v PASSWORD…",
            "ALTER ROLE v PASSWORD '…'",
        ]
    );
}
