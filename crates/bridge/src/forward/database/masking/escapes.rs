//! SQL's escaped spellings read as PostgreSQL reads them, so that a name or a literal spelled
//! with escapes (`U&"p\0061ssword"`, `E'p\x61ssword=…'`) is recognised by the masking.

use super::lex::{blank_after, continued, is_word, literal_end, skip_blank};

/// The text of the literal whose first quote is at `open` (its prefix, if any, at `at`) as
/// PostgreSQL reads it: its pieces continued on next lines joined (`'pass'⏎'word'`, comments
/// between them too) and its escapes read (`E'…'` backslash escapes, `U&'…'` Unicode ones).
/// `None` when an escape gives a byte beyond ASCII, which only the session's encoding can read.
pub(super) fn literal_text(statement: &str, at: usize, open: usize) -> Option<String> {
    let bytes = statement.as_bytes();
    let backslashes = open > at && matches!(bytes[at], b'e' | b'E');
    let mut joined = String::new();
    let mut start = open;
    loop {
        let end = literal_end(bytes, start, backslashes);
        joined.push_str(statement.get(start + 1..end).unwrap_or_default());
        match continued(statement, end) {
            Some(next) => start = next,
            None => break,
        }
    }
    match bytes[at] {
        _ if backslashes => backslash(&joined),
        b'u' | b'U' if open > at => Some(unicode(&joined)),
        _ => Some(joined),
    }
}

/// Whether the quoted name or literal opening at `open` is spelled `U&"…"` / `U&'…'`.
pub(super) fn unicode_prefixed(bytes: &[u8], open: usize) -> bool {
    open >= 2
        && bytes[open - 1] == b'&'
        && matches!(bytes[open - 2], b'u' | b'U')
        // After a word the `U` would be its last letter; a `$` ends a dollar quote as often.
        && (open < 3 || bytes[open - 3] == b'$' || !is_word(bytes[open - 3]))
}

/// Whether a `UESCAPE` clause follows at `end`: the escapes of the name or literal before it
/// use another character, which this reading does not follow.
pub(super) fn uescape_follows(statement: &str, end: usize) -> bool {
    let next = skip_blank(statement, end);
    statement
        .get(next..next + "uescape".len())
        .is_some_and(|word| word.eq_ignore_ascii_case("uescape"))
}

/// Where the first thing is that may spell `password` without writing it: an escape (a
/// backslash, `U&`), or the first literal when one is continued on a next line (`'pass'⏎'word'`).
/// Any quote may end a literal here, so the blank after each is read; a text whose blanks
/// overlap so much that reading them would take more than a few readings of the text
/// (comments full of quotes) is taken as continued, so that this stays linear in its length.
pub(super) fn spelled(lower: &str) -> Option<usize> {
    let mut budget = 4 * lower.len() + 64;
    let joined = lower.match_indices('\'').any(|(at, _)| {
        let (next, newline) = blank_after(lower, at);
        budget = budget.saturating_sub(next - at);
        // A blank that runs to the end opened a comment never closed: PostgreSQL refuses the
        // text, and what was typed after it (`'PASS'⏎/* /* */'WORD …'`) may still be read
        // as going on.
        let unclosed = next >= lower.len() && lower[(at + 1).min(lower.len())..].contains("/*");
        budget == 0 || (newline && (unclosed || lower.as_bytes().get(next) == Some(&b'\'')))
    });
    [
        lower.find('\\'),
        lower.find("u&"),
        joined.then(|| lower.find('\'')).flatten(),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// A `U&"…"` name's or `U&'…'` literal's text with its escapes decoded: `\XXXX`, `\+XXXXXX`
/// and `\\`, with the default escape character (a `UESCAPE` clause is the caller's concern).
/// An escape that is not valid is kept as written (PostgreSQL refuses the statement).
pub(super) fn unicode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('\\') {
            out.push('\\');
            rest = after;
            continue;
        }
        let (digits, skip) = match rest.strip_prefix('+') {
            Some(after) => (after.get(..6), 7),
            None => (rest.get(..4), 4),
        };
        match digits.and_then(code_point) {
            Some(c) => {
                out.push(c);
                rest = &rest[skip..];
            }
            None => out.push('\\'),
        }
    }
    out.push_str(rest);
    out
}

/// An `E'…'` literal's text with its backslash escapes decoded: `\b \f \n \r \t`, octal
/// `\o`–`\ooo` and `\xh`–`\xhh` (a byte, as PostgreSQL keeps the low eight bits), `\uXXXX`,
/// `\UXXXXXXXX`; any other `\c` is `c`. `None` when a byte escape is beyond ASCII: its
/// character depends on the session's encoding.
pub(super) fn backslash(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(escaped) = chars.next() else {
            out.push('\\');
            break;
        };
        let mut digits = |radix: u32, most: usize, first: Option<char>| {
            let mut s: String = first.into_iter().collect();
            while s.len() < most
                && let Some(d) = chars.next_if(|d| d.is_digit(radix))
            {
                s.push(d);
            }
            u32::from_str_radix(&s, radix).ok()
        };
        // A byte escape: PostgreSQL keeps its low eight bits.
        let byte = |n: Option<u32>| match n.map(|n| n & 0xff) {
            Some(b) if b >= 0x80 => Err(()),
            b => Ok(b.and_then(char::from_u32)),
        };
        let decoded = match escaped {
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            '0'..='7' => byte(digits(8, 3, Some(escaped))).ok()?,
            'x' => byte(digits(16, 2, None)).ok()?,
            'u' => digits(16, 4, None).and_then(char::from_u32),
            'U' => digits(16, 8, None).and_then(char::from_u32),
            other => Some(other),
        };
        out.extend(decoded);
    }
    Some(out)
}

/// The character of a run of hex digits, if they are all hex and name one.
fn code_point(hex: &str) -> Option<char> {
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unicode_escapes_decode() {
        assert_eq!(unicode(r"p\0061ssword"), "password");
        assert_eq!(unicode(r"p\+000061ss\\word"), "pass\\word");
        assert_eq!(unicode(r"bad\00zz"), r"bad\00zz");
    }

    #[test]
    fn backslash_escapes_decode() {
        assert_eq!(backslash(r"p\x61ssw\157rd").unwrap(), "password");
        assert_eq!(backslash(r"\u0070assword\'").unwrap(), "password'");
        assert_eq!(backslash(r"a\tb\").unwrap(), "a\tb\\");
        // PostgreSQL keeps a byte's low eight bits: \560 is 'p'.
        assert_eq!(backslash(r"\560assword").unwrap(), "password");
        assert_eq!(backslash(r"\377"), None, "beyond ASCII: the encoding's");
    }
}
