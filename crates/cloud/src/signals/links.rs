//! An alert's `links` (docs/api.md): an array whose items are http(s) URLs, or
//! `{href, text}` objects with an http(s) URL as `href` and optional text. Readers of the
//! events (the API's clients, runbook tools) follow them, so anything else is refused, item by
//! item, where it is sent.

use serde_json::value::RawValue;

use super::raw::{self, Kind};

/// The longest link or link text, in bytes.
const MAX_LINK: usize = 8_192;

/// What is wrong with `links`: (JSON pointer below the event, without its leading `/`; detail).
pub(super) fn problems(links: &RawValue) -> Vec<(String, String)> {
    const SHAPE: &str = "an http(s) URL or an {href, text} object";
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(links.get()) else {
        let kind = Kind::of(links).article();
        return vec![(
            "links".into(),
            format!("links must be an array of URLs or {{href, text}} objects, not {kind}"),
        )];
    };
    let mut problems = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match Kind::of(item) {
            Kind::String => {
                if let Some(why) = raw::string(item).and_then(|u| not_a_link(&u)) {
                    problems.push((format!("links/{i}"), format!("links/{i} {why}")));
                }
            }
            Kind::Object => {
                let Ok(fields) = raw::members(item.get()) else {
                    continue;
                };
                let at = format!("links/{i}/href");
                match fields
                    .present("href")
                    .map(|h| (Kind::of(h), raw::string(h)))
                {
                    Some((Kind::String, Some(url))) => {
                        if let Some(why) = not_a_link(&url) {
                            problems.push((at.clone(), format!("{at} {why}")));
                        }
                    }
                    _ => problems.push((
                        at.clone(),
                        format!("{at} is required: the link's http(s) URL"),
                    )),
                }
                if let Some(text) = fields.present("text")
                    && (Kind::of(text) != Kind::String
                        || raw::string(text)
                            .is_none_or(|t| t.trim().is_empty() || t.len() > MAX_LINK))
                {
                    let at = format!("links/{i}/text");
                    problems.push((
                        at.clone(),
                        format!(
                            "{at} must be a non-empty string of at most {MAX_LINK} bytes (leave text out to show the URL)"
                        ),
                    ));
                }
            }
            other => problems.push((
                format!("links/{i}"),
                format!("links/{i} must be {SHAPE}, not {}", other.article()),
            )),
        }
    }
    problems
}

/// Unicode's invisible format characters that make a text read as another: text-direction
/// marks and overrides (which show a link's characters in another order than they are
/// followed), zero-width characters and fillers, variation selectors, tags, the byte-order mark
/// and the soft hyphen: Unicode's default-ignorable characters, and the interlinear
/// annotation marks. Refused in
/// alert links here, and in key labels (`admin::check_label`).
pub fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Why `url` is no link a person can follow from the dashboard, if it is not.
fn not_a_link(url: &str) -> Option<String> {
    if url.len() > MAX_LINK {
        return Some(format!(
            "is {} bytes; at most {MAX_LINK} allowed",
            url.len()
        ));
    }
    // `https:x` parses (as `https://x/`) but is no URL as written; blanks around one are
    // dropped by the parser, as a browser drops them.
    let trimmed = url.trim();
    if let Some(c) = trimmed
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || invisible(*c))
    {
        return Some(format!(
            "holds the character U+{:04X} (a space, a control character, or an invisible one that changes how the link reads, such as a text-direction mark), which no URL holds as written; percent-encode it (a space is %20)",
            c as u32
        ));
    }
    let written = ["http://", "https://"].iter().any(|s| {
        trimmed
            .get(..s.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(s))
    });
    match url::Url::parse(url) {
        Ok(u) if written && matches!(u.scheme(), "http" | "https") => {
            (!u.username().is_empty() || u.password().is_some()).then(|| {
                "holds a user name or password, which every reader of the org's events would see; link without them".to_string()
            })
        }
        _ => Some(format!(
            "{url:?} is not an http(s) URL; expected e.g. https://runbooks.example.com/latency"
        )),
    }
}
