//! The statements of a PostgreSQL session, read from the client's messages as they pass, for
//! `audit_statements`.

use super::frames::Frames;
use names::{
    first_password_word, holds_password, names_password, password_words, takes_secrets,
    uri_password,
};

/// The longest statement text an audit record keeps.
const MAX_STATEMENT: usize = 64 * 1024;

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

/// The statement as its audit record holds it: masked where [`masking`] can; where it cannot
/// or the session is `strict`, cut after its first `password`, or before the first literal
/// that comes before it, or earlier at what may spell one otherwise: an escape (`\`, `U&`), or
/// a literal continued on the next line ([`escapes::spelled`]). `cut`: the text is the start
/// of a longer statement, which may go on with a `password` right after it. Public for
/// `bench audit`, which times it: the bridge's one thread does this work.
pub fn audited(text: &str, strict: bool, cut: bool) -> String {
    if let Some(masked) = (!strict).then(|| masking(text, cut)).flatten() {
        return masked;
    }
    let lower = text.to_ascii_lowercase();
    // A URL's password (`postgresql://u:secret@h`) is cut as a `password` is, before its
    // literal.
    let password = match (first_password_word(&lower), uri_password(&lower)) {
        (Some((at, _)), Some(uri)) if uri < at => Some((uri, uri)),
        (Some(word), _) => Some(word),
        (None, Some(uri)) => Some((uri, uri)),
        (None, None) => None,
    }
    // A text cut short, or one that may spell a password otherwise (`pass%77ord=`), is cut
    // before its first literal.
    .or((cut || holds_password(&lower)).then_some((lower.len(), lower.len())));
    // A literal before the first `password` may be its value (`'…' = password`,
    // `md5('…') = password`): the cut comes before it.
    let word = password.map(|(at, end)| first_literal(&lower[..at]).unwrap_or(end));
    // An escape may spell `password` too: the same holds before it.
    let spelled = escapes::spelled(&lower).map(|at| first_literal(&lower[..at]).unwrap_or(at));
    let at = match (word, spelled) {
        (Some(word), Some(other)) => word.min(other),
        (Some(at), None) | (None, Some(at)) => at,
        (None, None) => return text.to_string(),
    };
    format!("{}…", numbers_masked(&text[..at]))
}

/// `text` with each number in it (digits not part of a name or a `$1`) replaced by `…`: a
/// password may be one (`VALUES (987654)`).
fn numbers_masked(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut at) = (0, 0);
    while at < bytes.len() {
        let starts = bytes[at].is_ascii_digit() && (at == 0 || !is_word(bytes[at - 1]));
        if !starts {
            at += 1;
            continue;
        }
        let end = at + bytes[at..].iter().take_while(|b| is_word(**b)).count();
        out.push_str(&text[copied..at]);
        out.push('…');
        (copied, at) = (end, end);
    }
    out.push_str(&text[copied..]);
    out
}

/// Where the first string literal in `text` may open: a quote, or a `$` that starts a
/// dollar quote (`$$`, `$tag$`) rather than a parameter (`$1`).
fn first_literal(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len()).find(|&i| match bytes[i] {
        b'\'' => true,
        b'$' => bytes
            .get(i + 1)
            .is_some_and(|b| *b == b'$' || b.is_ascii_alphabetic() || *b == b'_' || *b >= 0x80),
        _ => false,
    })
}

/// The statement with the string literal after each name that ends in `password` (the
/// `PASSWORD` keyword, `user_password =`, `"User Password" =`) replaced by `'…'`
/// (`ALTER ROLE ada PASSWORD 'secret'`, `CREATE USER … WITH PASSWORD E'…'`, `U&'…'`,
/// dollar-quoted `$$…$$` and `$tag$…$tag$`, the SCRAM verifier psql's `\password` sends,
/// `WHERE password = '…'`, `password => '…'`), and so is every other literal of a text that
/// names such a name, which may be compared with it, combined into it or passed to it in any
/// of SQL's ways (`'…' = password`, `md5('…') = u.password`, `substring(password FROM '…')`, a
/// `DO` block's variable), so that an audit record never holds a password. The text is read token by token as PostgreSQL reads it: a
/// word inside a literal or a comment is no name, every literal is skipped whole by SQL's
/// rules (`''` inside one is a quote), and a dollar-quoted body (`DO $$ … $$`, a function's) is
/// read as SQL in turn: one that names a password is masked as a statement is, unless the text
/// around it names one too, which masks it whole as any other literal. `cut`: the text stops
/// short of its end, where such a name may follow: its literals are masked.
///
/// `None` where a password may hide in a way this reading cannot mask: `password` inside a
/// literal (a connection string, an `EXECUTE`d statement), a name ending in `password` used
/// otherwise than before a literal (`set_password('…')`, `password IN (…)`, a column list),
/// or a backslash that PostgreSQL may read as an escape (in a plain literal, or after a byte
/// beyond ASCII). The caller then cuts the statement.
fn masking(statement: &str, cut: bool) -> Option<String> {
    masked(statement, cut, 0).map(|(text, _, _)| text)
}

/// Dollar-quoted bodies read as SQL inside one another, at most; a deeper one is cut instead.
const MAX_NESTING: usize = 16;

/// [`masking`] of a text `depth` dollar-quoted bodies deep: the masked text, whether it names
/// a password (a name ending in `password`), and how many of its `password`s were such names
/// with their literal value masked (its bodies' included).
fn masked(statement: &str, cut: bool, depth: usize) -> Option<(String, bool, usize)> {
    if depth > MAX_NESTING {
        return None;
    }
    let bytes = statement.as_bytes();
    // What replaces parts of the statement: `(start, end, text)`.
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    // The literals not masked as a value: all masked at the end when the text names a
    // password anywhere (the value may be compared with it, combined into it, or pass through
    // a variable: a `DO` block's `p := '…'`).
    // `(open, end, whether its body names a password)`.
    let mut literals: Vec<(usize, usize, bool)> = Vec::new();
    // The numbers: a password may be one (`SELECT 987654 AS password`), masked as literals are.
    let mut numbers: Vec<(usize, usize)> = Vec::new();
    // The masked text of dollar-quoted bodies that name a password themselves (a `DO` block's),
    // kept where their literal is not masked whole.
    let mut bodies: Vec<(usize, usize, String)> = Vec::new();
    // Whether this text names a password itself, and whether a body inside it does.
    let (mut named, mut inside) = (false, false);
    // Where the text's last `||` starts: a value followed by one may go on past its first piece.
    let last_concat = statement.rfind("||");
    // The names ending in `password` read as such: with their literal value masked, or with
    // none.
    let mut values = 0;
    let mut at = 0;
    while at < bytes.len() {
        if let Some((open, end)) = literal_at(statement, at) {
            // A dollar-quoted body is read as SQL below; any other literal cannot be.
            if bytes[open] != b'$'
                && (ambiguous(statement, at, open, end)
                    || escapes::uescape_follows(statement, end)
                    || escapes::literal_text(statement, at, open)
                        .is_none_or(|text| holds_password(&text.to_ascii_lowercase())))
            {
                return None;
            }
            // A dollar-quoted body is often SQL itself (`DO $$ … $$`, a function's body): one
            // that names a password is masked as a statement is.
            if bytes[open] == b'$'
                && let Some(tag_len) = statement[open + 1..].find('$')
            {
                let delimiter = &statement[open..open + tag_len + 2];
                let body_start = (open + delimiter.len()).min(end);
                let closed =
                    end >= body_start + delimiter.len() && statement[..end].ends_with(delimiter);
                let body_end = if closed { end - delimiter.len() } else { end };
                let (body, body_named, body_values) =
                    masked(&statement[body_start..body_end], cut && !closed, depth + 1)?;
                values += body_values;
                if body_named {
                    bodies.push((body_start, body_end, body));
                    inside = true;
                }
            }
            let body_named = bodies.last().is_some_and(|b| b.0 > open);
            literals.push((open, end, body_named));
            at = end;
            continue;
        }
        let name_end = match bytes[at] {
            b'-' if bytes.get(at + 1) == Some(&b'-') => {
                at = skip_blank(statement, at);
                continue;
            }
            // PostgreSQL refuses a statement whose block comment is never closed; what the
            // comment holds may still be a password the user typed.
            b'/' if bytes.get(at + 1) == Some(&b'*') => {
                block_comment_len(&bytes[at..])?;
                at = skip_blank(statement, at);
                continue;
            }
            b'"' => quoted_name_end(bytes, at),
            // A number ends before a `$` (`1$a$…$a$` is a number and a dollar quote).
            b if b.is_ascii_digit() => {
                let len = bytes[at..]
                    .iter()
                    .take_while(|b| is_word(**b) && **b != b'$')
                    .count();
                // `$1` is a bind parameter, not a number.
                if at == 0 || bytes[at - 1] != b'$' {
                    numbers.push((at, at + len));
                }
                at += len;
                continue;
            }
            b if is_word(b) && b != b'$' => {
                let len = bytes[at..].iter().take_while(|b| is_word(**b)).count();
                at + len
            }
            _ => {
                at += 1;
                continue;
            }
        };
        // A quoted name's text: without its quotes, `""` read as one quote.
        let raw = &statement[at..name_end];
        let name = match raw.strip_prefix('"') {
            Some(quoted) => quoted
                .strip_suffix('"')
                .unwrap_or(quoted)
                .replace("\"\"", "\""),
            None => raw.to_string(),
        };
        // `U&"p\0061ssword"` is a name like any other, spelled with escapes.
        let unicode = bytes[at] == b'"' && escapes::unicode_prefixed(bytes, at);
        if unicode && escapes::uescape_follows(statement, name_end) {
            return None;
        }
        let name = if unicode {
            escapes::unicode(&name)
        } else {
            name
        };
        at = name_end;
        let lower = name.to_ascii_lowercase();
        let mut value = skip_blank(statement, name_end);
        // A call of a function that takes secrets (`crypt('…', gen_salt('bf'))`,
        // `hmac(data, '…', 'sha256')`): its arguments are among the text's literals and
        // numbers, which are all masked.
        if takes_secrets(&lower) && statement[value..].starts_with('(') {
            named = true;
            continue;
        }
        if !names_password(&lower) {
            continue;
        }
        named = true;
        // The `password`s this name accounts for, as written (`U&"p\0061ssword"` none).
        let spelled = password_words(&raw.to_ascii_lowercase());
        // `password = '…'`, and a named argument (`password => '…'`, `password := '…'`).
        let op = ["=>", ":=", "="]
            .into_iter()
            .find(|op| statement[value..].starts_with(op));
        if let Some(op) = op {
            value = skip_blank(statement, value + op.len());
        }
        // `'…' || '…'`, `'…'::text || '…'`, `$1 || '…'`: the value may go on past its first
        // piece, anywhere after it.
        if last_concat.is_some_and(|concat| concat >= value) {
            return None;
        }
        match literal_at(statement, value) {
            Some((quote, end)) if ambiguous(statement, value, quote, end) => return None,
            Some((quote, end)) => {
                edits.push((quote, end, "'…'".to_string()));
                values += spelled;
                at = end;
            }
            None if no_value_follows(&statement[value..], op.is_some(), depth > 0) => {
                values += spelled;
            }
            // A call, a cast, a typed literal, `TO`, a comparison or a list the value may
            // follow: not read here.
            None => return None,
        }
    }
    // A body read as SQL may be no SQL at all (a connection string given to `dblink`, `ALTER
    // SYSTEM … primary_conninfo`): each `password` in it must be a name read as one, not one
    // inside what SQL would read as a comment or a quoted name, and no URL in it may hold a
    // password.
    if depth > 0 {
        let lower = statement.to_ascii_lowercase();
        // A JSON `\u0061` (`json_populate_record`'s keys) spells what this reading cannot see.
        if password_words(&lower) > values
            || uri_password(&lower).is_some()
            || lower.contains("\\u")
        {
            return None;
        }
    }
    if named || cut || inside {
        edits.extend(
            numbers
                .into_iter()
                .map(|(start, end)| (start, end, "…".to_string())),
        );
    }
    if named || cut {
        edits.extend(
            literals
                .into_iter()
                .map(|(open, end, _)| (open, end, "'…'".to_string())),
        );
    } else if inside {
        // A body names a password (a function's, a `DO` block's): the text's other literals
        // may reach it (`SELECT chk('…')`, `SET app.pw = '…'`); the body keeps its own masking.
        edits.extend(
            literals
                .into_iter()
                .filter(|&(_, _, body_named)| !body_named)
                .map(|(open, end, _)| (open, end, "'…'".to_string())),
        );
        edits.extend(bodies);
    }
    edits.sort_unstable_by_key(|&(start, _, _)| start);
    let mut out = String::with_capacity(statement.len());
    let mut copied = 0;
    for (start, end, text) in edits {
        out.push_str(&statement[copied..start]);
        out.push_str(&text);
        copied = end;
    }
    out.push_str(&statement[copied..]);
    Some((out, named || inside, values))
}

/// Whether the literal from `open` to `end` (its prefix, if any, at `at`) may end elsewhere than
/// this reading says: a backslash in a plain literal (an escape, should the session have
/// `standard_conforming_strings` off) or after a byte beyond ASCII in any (the second byte of
/// a character in encodings such as SJIS).
fn ambiguous(statement: &str, at: usize, open: usize, end: usize) -> bool {
    let bytes = statement.as_bytes();
    let body = &bytes[open..end];
    let escaping = open > at && matches!(bytes[at], b'e' | b'E');
    let unicode = open > at && matches!(bytes[at], b'u' | b'U');
    (!escaping && !unicode && bytes[open] == b'\'' && body.contains(&b'\\'))
        || body.windows(2).any(|w| w[0] >= 0x80 && w[1] == b'\\')
}

/// Whether no value can follow a name ending in `password`: the statement ends, a `;` ends
/// it, `FROM` or `IS [NOT] NULL` follows, or the value is a bind parameter (`$1`) or `NULL`
/// (`PASSWORD NULL`). After an operator (`=`, `=>`, `:=`, given as `operator`) only the last
/// two: an operator with nothing after it is no SQL, but may be a connection string's
/// `password=` read as SQL inside a dollar quote, with the password after it. Anything else
/// may lead to a value in a way this reading does not follow (`TO '…'`, `= crypt('…')`, `text
/// '…'`, `CAST('…' AS text)`, `IS NOT DISTINCT FROM '…'`, `IN (…)`, a column list).
fn no_value_follows(rest: &str, operator: bool, in_body: bool) -> bool {
    // What may end a bind parameter or `NULL` given as the value: in a dollar-quoted body,
    // which may be a connection string (`password=$1,x`), only a blank or the body's end.
    let ends = |b: Option<&u8>| {
        b.is_none_or(|b| b.is_ascii_whitespace() || (!in_body && matches!(b, b';' | b')' | b',')))
    };
    let parameter = rest.strip_prefix('$').is_some_and(|n| {
        let digits = n.bytes().take_while(u8::is_ascii_digit).count();
        let next = n.as_bytes().get(digits);
        digits > 0 && (ends(next) || (!in_body && !next.is_some_and(|b| is_word(*b))))
    });
    // `NULL` as a whole value: what may follow it in SQL, not `null-…`.
    let null = keyword_at(rest, "null") && ends(rest.as_bytes().get(4));
    if operator {
        return parameter || null;
    }
    rest.is_empty()
        || rest.starts_with(';')
        || parameter
        || null
        || ["from", "is null", "is not null"]
            .iter()
            .any(|words| keyword_at(rest, words))
}

/// Whether `rest` starts with the keywords `words` (one blank between them), as whole words.
fn keyword_at(rest: &str, words: &str) -> bool {
    rest.get(..words.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(words))
        && !rest
            .as_bytes()
            .get(words.len())
            .is_some_and(|b| is_word(*b))
}

/// Whether `b` may be part of an unquoted name or keyword (any byte of a UTF-8 sequence, as
/// PostgreSQL allows letters beyond ASCII; `$` too, which cannot start one: the caller checks).
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Where the quoted name (`"…"`, `""` inside one is a quote) opened at `open` ends, past its
/// closing quote (the end of the text when it is not closed).
fn quoted_name_end(bytes: &[u8], open: usize) -> usize {
    let mut end = open + 1;
    while end < bytes.len() {
        match (bytes[end], bytes.get(end + 1)) {
            (b'"', Some(b'"')) => end += 2,
            (b'"', _) => return end + 1,
            _ => end += 1,
        }
    }
    bytes.len()
}

/// The string literal that starts at `at`, in any of SQL's forms (`'…'`, `E'…'`, `N'…'`,
/// `U&'…'`, `$$…$$`, `$tag$…$tag$`, and `'…'` continued on a next line): where its first
/// quote or dollar is, and where it ends (past its last quote).
fn literal_at(statement: &str, at: usize) -> Option<(usize, usize)> {
    let bytes = statement.as_bytes();
    let quote_at = |n: usize| bytes.get(at + n) == Some(&b'\'');
    let (open, escapes) = match bytes.get(at)? {
        b'\'' => (at, false),
        // Only an E'…' literal reads backslash escapes (standard_conforming_strings).
        b'e' | b'E' if quote_at(1) => (at + 1, true),
        b'n' | b'N' if quote_at(1) => (at + 1, false),
        b'u' | b'U' if bytes.get(at + 1) == Some(&b'&') && quote_at(2) => (at + 2, false),
        b'$' => return dollar_quoted_end(statement, at).map(|end| (at, end)),
        _ => return None,
    };
    // A word that merely ends in e, n or u& is no literal's prefix.
    if at > 0 && open > at && is_word(bytes[at - 1]) {
        return None;
    }
    let mut end = literal_end(bytes, open, escapes);
    while let Some(next) = continued(statement, end) {
        end = literal_end(bytes, next, escapes);
    }
    Some((open, (end + 1).min(bytes.len())))
}

/// Where the next piece of a literal opens when the piece that closes at `end` goes on:
/// `'abc'` and `'def'` on a next line are one string to PostgreSQL (comments may come between).
pub(super) fn continued(statement: &str, end: usize) -> Option<usize> {
    let (next, newline) = blank_after(statement, end);
    (newline && statement.as_bytes().get(next) == Some(&b'\'')).then_some(next)
}

/// Where the whitespace and comments after byte `end` stop, and whether a line ends in them.
pub(super) fn blank_after(statement: &str, end: usize) -> (usize, bool) {
    let bytes = statement.as_bytes();
    let next = skip_blank(statement, end + 1);
    let between = &bytes[(end + 1).min(bytes.len())..next.min(bytes.len())];
    (next, between.iter().any(|b| matches!(b, b'\n' | b'\r')))
}

/// The index of the quote that closes the literal opened at `open` (a doubled quote is part
/// of it, and so is a backslash-escaped one where `escapes`); the end of the text when it is
/// not closed.
pub(super) fn literal_end(bytes: &[u8], open: usize, escapes: bool) -> usize {
    let mut end = open + 1;
    while end < bytes.len() {
        match bytes[end] {
            b'\\' if escapes => end += 2,
            b'\'' if bytes.get(end + 1) == Some(&b'\'') => end += 2,
            b'\'' => return end,
            _ => end += 1,
        }
    }
    bytes.len()
}

/// `at` moved past whitespace and comments (`-- …` to the end of the line, `/* … */`, which
/// PostgreSQL lets nest; one never closed runs to the end of the text).
fn skip_blank(statement: &str, mut at: usize) -> usize {
    let bytes = statement.as_bytes();
    loop {
        while bytes
            .get(at)
            .is_some_and(|b| b.is_ascii_whitespace() || *b == 0x0b)
        {
            at += 1;
        }
        let rest = statement.get(at..).unwrap_or_default();
        if rest.starts_with("--") {
            // PostgreSQL ends a `--` comment at a CR as well as at an LF.
            at = rest
                .bytes()
                .position(|b| matches!(b, b'\n' | b'\r'))
                .map_or(statement.len(), |n| at + n + 1);
        } else if rest.starts_with("/*") {
            at = block_comment_len(rest.as_bytes()).map_or(statement.len(), |len| at + len);
        } else {
            return at;
        }
    }
}

/// The length of the block comment that `text` starts with, nested ones included; `None` when
/// it is never closed: PostgreSQL reads the rest of the text as the comment, and refuses it.
/// A scan costs the comment's length, so that reading a text stays linear in its length.
fn block_comment_len(text: &[u8]) -> Option<usize> {
    let (mut depth, mut at) = (0usize, 0);
    while at < text.len() {
        match &text[at..] {
            [b'/', b'*', ..] => (depth, at) = (depth + 1, at + 2),
            [b'*', b'/', ..] => {
                (depth, at) = (depth - 1, at + 2);
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => at += 1,
        }
    }
    None
}

/// Where the dollar-quoted literal (`$$…$$`, `$tag$…$tag$`) that starts at byte `at` ends (past
/// its closing tag, or the end of the text when it is not closed); `None` when none starts there.
fn dollar_quoted_end(statement: &str, at: usize) -> Option<usize> {
    let rest = statement.get(at..)?.strip_prefix('$')?;
    let tag_len = rest.find('$')?;
    let tag = &rest[..tag_len];
    // PostgreSQL's identifier letters: ASCII ones, `_`, any character beyond ASCII, and digits
    // after the first.
    let valid = tag.chars().enumerate().all(|(i, c)| {
        c == '_' || c.is_ascii_alphabetic() || !c.is_ascii() || (i > 0 && c.is_ascii_digit())
    });
    if !valid {
        return None;
    }
    let delimiter = &statement[at..at + tag_len + 2];
    let body = at + delimiter.len();
    Some(
        statement[body..]
            .find(delimiter)
            .map_or(statement.len(), |end| body + end + delimiter.len()),
    )
}

mod escapes;
mod names;
#[cfg(test)]
mod tests;
