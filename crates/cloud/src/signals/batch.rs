//! From request body to validated events: one event or an all-or-nothing array. The events
//! borrow from the body (see [`super::raw`]).

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

use super::event::{FieldError, ValidEvent};
use super::raw::{self, Kind, Members};
use super::validate::validate;

/// Largest single event, in bytes of its JSON text.
pub const MAX_EVENT_BYTES: usize = 64 * 1024;
/// Largest request body.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Most events in one array.
pub const MAX_BATCH_EVENTS: usize = 500;

/// Why a body could not be turned into events.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// Not JSON (400).
    #[error("the body is not valid JSON: {0}")]
    Malformed(String),
    /// JSON, but with a value no JSON reader takes back (400): a lone surrogate escape, a
    /// number beyond a 64-bit float, nesting too deep.
    #[error("the value at {pointer} cannot be stored: {reason}")]
    Unreadable {
        /// JSON pointer of the member (a NUL in a name written `\u0000`).
        pointer: String,
        /// What is wrong with it.
        reason: String,
    },
    /// One event is over [`MAX_EVENT_BYTES`] (413).
    #[error(
        "{} is {size} bytes; at most {MAX_EVENT_BYTES} bytes per event",
        event_named(pointer)
    )]
    EventTooLarge {
        /// JSON pointer of the event (`""` for a single event).
        pointer: String,
        /// Its size.
        size: usize,
    },
    /// Fields are invalid (422); nothing of the batch is stored.
    #[error("{} invalid field(s)", .0.len())]
    Invalid(Vec<FieldError>),
}

/// An event in a message: "the event" when the body is one, "event /3" in a batch.
fn event_named(pointer: &str) -> String {
    match pointer {
        "" => "the event".to_string(),
        p => format!("event {p} of the batch"),
    }
}

/// The events of one request.
#[derive(Debug)]
pub struct Batch<'a> {
    /// True when the body was an array (the answer then lists `ids`).
    pub is_array: bool,
    /// The events, in order.
    pub events: Vec<ValidEvent<'a>>,
}

fn invalid(pointer: String, detail: String) -> BatchError {
    BatchError::Invalid(vec![FieldError { pointer, detail }])
}

/// Parses and validates a whole body; one bad event rejects all.
pub fn parse(body: &[u8], now: DateTime<Utc>) -> Result<Batch<'_>, BatchError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| BatchError::Malformed(format!("the body is not UTF-8 ({e})")))?;
    // A byte order mark, which some Windows tools write, is no part of the JSON (RFC 8259 §8.1
    // lets a reader ignore it).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match text.trim_start().as_bytes().first() {
        Some(b'[') => {}
        Some(_) => return parse_one(text, now),
        None => return Err(BatchError::Malformed("the body is empty".into())),
    }
    let raws: Vec<&RawValue> = serde_json::from_str(text).map_err(malformed)?;
    let pointer = |i: usize| format!("/{i}");
    if raws.is_empty() {
        return Err(invalid(
            String::new(),
            "the array is empty; send 1 to 500 events".into(),
        ));
    }
    if raws.len() > MAX_BATCH_EVENTS {
        return Err(invalid(
            String::new(),
            format!(
                "the array holds {} events; at most {MAX_BATCH_EVENTS} per request, split it",
                raws.len()
            ),
        ));
    }
    if let Some((i, raw)) = raws
        .iter()
        .enumerate()
        .find(|(_, r)| r.get().len() > MAX_EVENT_BYTES)
    {
        return Err(BatchError::EventTooLarge {
            pointer: pointer(i),
            size: raw.get().len(),
        });
    }
    let mut errors = Vec::new();
    let mut events = Vec::with_capacity(raws.len());
    for (i, raw) in raws.iter().enumerate() {
        match Kind::of(raw) {
            Kind::Object => {
                let members = strict_members(raw.get(), &pointer(i))?;
                if let Some(event) = validate(members, &pointer(i), now, &mut errors) {
                    events.push(event);
                }
            }
            other => errors.push(not_an_object(pointer(i), other)),
        }
    }
    if errors.is_empty() {
        Ok(Batch {
            is_array: true,
            events,
        })
    } else {
        Err(BatchError::Invalid(errors))
    }
}

fn malformed(e: serde_json::Error) -> BatchError {
    BatchError::Malformed(e.to_string())
}

/// The members of the event at `pointer`, each value checked as strictly as
/// `serde_json::Value` would (see [`raw::check`]): what is stored can be read back.
fn strict_members<'a>(text: &'a str, pointer: &str) -> Result<Members<'a>, BatchError> {
    let members = raw::members(text).map_err(malformed)?;
    for (key, value) in members.iter() {
        if key.0.contains('\0') {
            let name = super::validate::pointer_token(&key.0);
            return Err(BatchError::Unreadable {
                pointer: format!("{pointer}/{name}"),
                reason:
                    "its name holds \\u0000 (the NUL character), which is stored nowhere; remove it"
                        .into(),
            });
        }
        raw::check(value).map_err(|e| {
            let at = format!(
                "{pointer}/{}{}",
                super::validate::pointer_token(&key.0),
                e.at
            );
            BatchError::Unreadable {
                pointer: at,
                reason: unreadable(&e.error),
            }
        })?;
    }
    Ok(members)
}

/// Why a value that is JSON cannot be taken back, in words: serde_json's message without its
/// line and column, which count from the value, not from the body.
fn unreadable(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let bare = text
        .strip_suffix(&format!(" at line {} column {}", e.line(), e.column()))
        .unwrap_or(&text);
    if bare.contains("hex escape") || bare.contains("surrogate") {
        "a string holds a lone UTF-16 surrogate escape (such as \\ud800 without its pair), which JSON readers refuse; send the character itself or the escape's pair".into()
    } else if bare.contains("number out of range") {
        "a number is beyond the range of a 64-bit float".into()
    } else {
        bare.to_string()
    }
}

fn not_an_object(pointer: String, kind: Kind) -> FieldError {
    FieldError {
        pointer,
        detail: format!("an event must be a JSON object, not {}", kind.article()),
    }
}

/// A body that is one event (not an array), the body's own length being the event's size.
fn parse_one(text: &str, now: DateTime<Utc>) -> Result<Batch<'_>, BatchError> {
    let size = text.trim_ascii().len();
    let is_object = text.trim_start().starts_with('{');
    if size > MAX_EVENT_BYTES || !is_object {
        // Not JSON at all (400) comes before too large (413) or not an object (422).
        let raw: &RawValue = serde_json::from_str(text).map_err(malformed)?;
        if size > MAX_EVENT_BYTES {
            return Err(BatchError::EventTooLarge {
                pointer: String::new(),
                size,
            });
        }
        return Err(BatchError::Invalid(vec![not_an_object(
            String::new(),
            Kind::of(raw),
        )]));
    }
    let members = strict_members(text, "")?;
    let mut errors = Vec::new();
    match validate(members, "", now, &mut errors) {
        Some(event) if errors.is_empty() => Ok(Batch {
            is_array: false,
            events: vec![event],
        }),
        _ => Err(BatchError::Invalid(errors)),
    }
}

#[cfg(test)]
mod tests;
