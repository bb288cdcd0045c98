//! The statements of a PostgreSQL session, read from the client's messages as they pass, for
//! `audit_statements`.

use super::frames::Frames;
use super::masking::audited;

/// The longest statement text an audit record keeps.
pub(super) const MAX_STATEMENT: usize = 64 * 1024;

/// Follows the frontend messages of a session to find statement texts: `Q` (simple query),
/// `P` (`Parse`: a name, then the text) and `F` (a function call, by its oid).
pub(super) struct Statements<F: FnMut(String)> {
    frames: Frames,
    /// The masking reads literals as PostgreSQL does with `standard_conforming_strings` on and
    /// a client encoding where `\\` is always a character of its own (UTF-8, Latin-1, …, not
    /// SJIS or BIG5). A session that started otherwise, names either setting (`SET`,
    /// `set_config`) or the word `NAMES`, or whose server reported such a setting
    /// ([`Statements::make_strict`]), is masked strictly from then on: everything after the
    /// first `password` is cut. So is a text that is not UTF-8, alone.
    strict: bool,
    /// Sync points sent (`Q`, `S`), executions since the last (`E`), and the server's answers
    /// to them (`ReadyForQuery` after the login's, [`Statements::answered`]). A statement sent
    /// before the server answered an earlier one is read before the server has reported what
    /// that one may have set (it reports a `client_encoding` set by a function only at its
    /// `ReadyForQuery`): it is masked strictly.
    syncs: u64,
    executed: bool,
    answered: u64,
    emit: F,
}

impl<F: FnMut(String)> Statements<F> {
    /// A tap that calls `emit` with each statement text, in the order the client sent them.
    /// `strict` when the session's strings may not read as the masking reads them (see
    /// [`Statements::strict`]).
    pub(super) fn new(emit: F, strict: bool) -> Self {
        Statements {
            frames: Frames::default(),
            strict,
            syncs: 0,
            executed: false,
            answered: 0,
            emit,
        }
    }

    /// How many `ReadyForQuery` the server has sent since the login's.
    pub(super) fn answered(&mut self, ready: u64) {
        self.answered = ready;
    }

    /// Masks every statement from now on strictly: the server reported a setting under which
    /// strings read otherwise.
    pub(super) fn make_strict(&mut self) {
        self.strict = true;
    }

    /// Reads the client's next bytes, cut anywhere: a message may span many calls.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) {
        let keep = |tag| match tag {
            b'Q' | b'P' | b'F' => MAX_STATEMENT + 256,
            _ => 0,
        };
        while let Some(tag) = self.frames.next(&mut bytes, keep) {
            // A message without a body (its length under 5), or a query whose text has no
            // end, is malformed and runs nothing: the server answers `08P01` (or, to a length
            // under 4, closes the session).
            let body = self.frames.body();
            let unended = tag == b'Q' && self.frames.whole() && body.last() != Some(&0);
            match tag {
                b'Q' | b'P' | b'F' if !body.is_empty() && !unended => self.finish(tag),
                _ => {}
            }
            // The sync points: each is answered with a ReadyForQuery.
            match tag {
                b'Q' | b'F' => self.syncs += 1,
                b'S' => (self.syncs, self.executed) = (self.syncs + 1, false),
                b'E' => self.executed = true,
                _ => {}
            }
        }
    }

    /// Emits the statement of the message just read whole, a `tag` one.
    fn finish(&mut self, tag: u8) {
        let body = self.frames.body();
        if tag == b'F' {
            let oid = body
                .get(..4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            (self.emit)(format!("function call (oid {oid})"));
            return;
        }
        // `Q`: the text, NUL-ended; `P`: the statement's name, then the text, each NUL-ended.
        // Only the start of a long message is kept: a text that does not end in it is cut.
        let mut parts = body.splitn(3, |&b| b == 0);
        if tag == b'P' {
            parts.next();
        }
        let text = parts.next().unwrap_or_default();
        let cut = text.len() > MAX_STATEMENT || parts.next().is_none();
        let text = &text[..text.len().min(MAX_STATEMENT)];
        // Bytes that are not UTF-8 (a Latin-1 session's `é`) are read as U+FFFD, which would
        // make two different dollar-quote tags look alike: such a text is masked strictly.
        let utf8 = std::str::from_utf8(text).is_ok();
        let text = String::from_utf8_lossy(text);
        let lower = text.to_ascii_lowercase();
        let names = lower
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .any(|word| word == "names");
        self.strict |= names
            || ["standard_conforming_strings", "client_encoding"]
                .iter()
                .any(|setting| lower.contains(setting));
        let unsettled = self.answered < self.syncs || self.executed;
        let mut record = audited(&text, self.strict || !utf8 || unsettled, cut);
        if cut && !record.ends_with('…') {
            record.push('…');
        }
        (self.emit)(record);
    }
}

#[cfg(test)]
mod tests;
