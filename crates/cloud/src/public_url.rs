//! `--public-url`: the dashboard's address as people and bridges reach it, which starts every
//! link and command the cloud prints or shows. Read once, by `serve` and by the commands that
//! print links; a password in it is never repeated, not even in the message refusing it.

/// The dashboard's address as links start with it (no trailing `/`), or what was expected.
pub fn parse(raw: &str) -> Result<String, String> {
    let expected = "expected such as https://signals.example.com (http or https, a host, an optional path; no query, fragment or user)";
    match url::Url::parse(raw.trim()) {
        Ok(u) if usable_base(&u) => Ok(raw.trim().trim_end_matches('/').to_string()),
        // A URL with a user may hold a password: it is not repeated.
        Ok(u) if !u.username().is_empty() || u.password().is_some() => Err(format!(
            "the URL given is not the dashboard's address (it is not repeated here: it holds a user name or password): {expected}"
        )),
        Ok(_) => Err(format!(
            "{raw:?} is not the dashboard's address: {expected}"
        )),
        // One that does not parse may hold a password all the same (`u:p#w@host`).
        // The parser's reason would mislead (a `#` in a password makes the rest a fragment,
        // so the password reads as a port).
        Err(_) if raw.contains('@') => Err(format!(
            "the URL given does not parse (it is not repeated here: it may hold a password, in which `#`, `/`, `?` and `@` must be percent-encoded): {expected}"
        )),
        Err(e) => Err(format!("{raw:?} is not a URL ({e}): {expected}")),
    }
}

/// Whether `u` can start the links and commands the dashboard builds: paths are appended to
/// it, so a query, a fragment or credentials in it would swallow or leak them.
pub fn usable_base(u: &url::Url) -> bool {
    matches!(u.scheme(), "https" | "http")
        && u.host().is_some()
        && u.query().is_none()
        && u.fragment().is_none()
        && u.username().is_empty()
        && u.password().is_none()
}
