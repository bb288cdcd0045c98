//! The statement texts of `audit_statements`, as an audit record keeps them: every password
//! masked, or the text cut before it where a reading cannot be sure.

use lex::{
    ambiguous, block_comment_len, is_word, literal_at, no_value_follows, quoted_name_end,
    skip_blank,
};
use names::{
    first_password_word, holds_password, names_password, password_words, takes_secrets,
    uri_password,
};

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

mod escapes;
mod lex;
mod names;
#[cfg(test)]
mod tests;
