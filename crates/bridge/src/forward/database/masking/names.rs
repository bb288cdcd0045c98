//! The names of passwords in a statement's text: the names that hold one (`password`,
//! `passwd`), the calls of functions that take one (`crypt(…)`, `hmac(…)`), and a literal or
//! URL that may.

use super::lex::{is_word, skip_blank};

/// Whether a name (lower-case) is a password's: it ends in `password` or `passwd`
/// (`pg_shadow.passwd`), as written or as PostgreSQL keeps it, cut to 63 bytes (`…password`
/// followed by more is that name too).
pub(super) fn names_password(name: &str) -> bool {
    let mut kept = name.len().min(63);
    while !name.is_char_boundary(kept) {
        kept -= 1;
    }
    let ends = |name: &str| name.ends_with("password") || name.ends_with("passwd");
    ends(name) || ends(&name[..kept])
}

/// Whether a function (its name, lower-case) takes passwords or keys as arguments, or hashes
/// them: pgcrypto's (`crypt`, `encrypt`, `pgp_sym_decrypt`, `hmac`, `digest`, `dearmor`, …)
/// and PostgreSQL's own hashes (`md5`, `sha256`, …). Only its calls count, not a column
/// `encrypted` nor the `ENCRYPTED` of `ENCRYPTED PASSWORD`.
pub(super) fn takes_secrets(name: &str) -> bool {
    name.contains("crypt")
        || name.starts_with("pgp_")
        || matches!(
            name,
            "hmac"
                | "digest"
                | "armor"
                | "dearmor"
                | "md5"
                | "sha224"
                | "sha256"
                | "sha384"
                | "sha512"
        )
}

/// Where the calls of functions that [take secrets](takes_secrets) are in `text`
/// (lower-case), by a plain scan for the strict masking and for literals' texts: each name's
/// start and end. A name counts quoted too (`"public"."crypt"(…)`: a name followed by its
/// closing quote, then the call's parenthesis), and inside literals and comments.
fn secret_calls(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            let starts = is_word(bytes[at])
                && bytes[at] != b'$'
                && !bytes[at].is_ascii_digit()
                && (at == 0 || !is_word(bytes[at - 1]));
            if !starts {
                at += 1;
                continue;
            }
            let start = at;
            at += bytes[at..].iter().take_while(|b| is_word(**b)).count();
            let closed = at + usize::from(bytes.get(at) == Some(&b'"'));
            let called = text[skip_blank(text, closed)..].starts_with('(');
            if called && takes_secrets(&text[start..at]) {
                return Some((start, at));
            }
        }
        None
    })
}

/// How many times `text` (lower-case) spells `password` or `passwd`.
pub(super) fn password_words(text: &str) -> usize {
    text.matches("password").count() + text.matches("passwd").count()
}

/// Where the first word of a password in `text` (lower-case) starts and ends: `password`,
/// `passwd`, or the name in a call of a function that [takes secrets](takes_secrets).
pub(super) fn first_password_word(text: &str) -> Option<(usize, usize)> {
    ["password", "passwd"]
        .iter()
        .filter_map(|w| text.find(w).map(|at| (at, at + w.len())))
        .chain(secret_calls(text).next())
        .min()
}

/// Whether a literal's text (lower-case) may hold a password: it names one (a connection
/// string's `password=`, a statement given to `EXECUTE`) or is a URL with one
/// (`postgresql://user:secret@host/db`).
pub(super) fn holds_password(text: &str) -> bool {
    first_password_word(text).is_some()
        || uri_password(text).is_some()
        // SQL run by `EXECUTE`, a JSON document or a libpq value may spell one with escapes of
        // their own (`U&"p\0061ssword"`, `\u0061`, `pass\word`), and a URL with `%77`.
        || text.contains('\\')
        || text.contains("u&")
        || first_password_word(&percent_decoded(text)).is_some()
}

/// `text` with its `%XX` escapes decoded (as a URL's query is), lossily, in lower case.
fn percent_decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .to_ascii_lowercase()
}

/// Where the first URL is whose user information has a password (`scheme://user:pw@`): its
/// `://`.
pub(super) fn uri_password(text: &str) -> Option<usize> {
    text.match_indices("://").map(|(at, _)| at).find(|&at| {
        let rest = &text[at + 3..];
        // libpq reads the user information up to the last `@` before the first `/`.
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        authority
            .rfind('@')
            .is_some_and(|userinfo| authority[..userinfo].contains(':'))
    })
}
