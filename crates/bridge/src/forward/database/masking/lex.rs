//! The lexical pieces the masking reads a statement with, as PostgreSQL's scanner reads them:
//! blanks and comments, quoted names, string literals (continued ones, dollar-quoted bodies)
//! and the words around them; and what may follow a name that ends in `password`.

/// Whether the literal from `open` to `end` (its prefix, if any, at `at`) may end elsewhere than
/// this reading says: a backslash in a plain literal (an escape, should the session have
/// `standard_conforming_strings` off) or after a byte beyond ASCII in any (the second byte of
/// a character in encodings such as SJIS).
pub(super) fn ambiguous(statement: &str, at: usize, open: usize, end: usize) -> bool {
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
pub(super) fn no_value_follows(rest: &str, operator: bool, in_body: bool) -> bool {
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
pub(super) fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Where the quoted name (`"…"`, `""` inside one is a quote) opened at `open` ends, past its
/// closing quote (the end of the text when it is not closed).
pub(super) fn quoted_name_end(bytes: &[u8], open: usize) -> usize {
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
pub(super) fn literal_at(statement: &str, at: usize) -> Option<(usize, usize)> {
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
pub(super) fn skip_blank(statement: &str, mut at: usize) -> usize {
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
pub(super) fn block_comment_len(text: &[u8]) -> Option<usize> {
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
