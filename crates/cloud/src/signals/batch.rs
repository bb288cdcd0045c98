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
        /// JSON pointer of the member.
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
            let name = super::validate::pointer_token(&key.0).replace('\0', "\\u0000");
            return Err(BatchError::Unreadable {
                pointer: format!("{pointer}/{name}"),
                reason:
                    "its name holds \\u0000 (the NUL character), which is stored nowhere; remove it"
                        .into(),
            });
        }
        raw::check(value).map_err(|e| {
            let at = format!("{pointer}/{}", super::validate::pointer_token(&key.0));
            BatchError::Unreadable {
                pointer: at,
                reason: unreadable(&e),
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
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn now() -> DateTime<Utc> {
        "2024-01-15T12:00:00Z".parse().unwrap()
    }

    fn errors(body: Value) -> Vec<FieldError> {
        match parse(body.to_string().as_bytes(), now()) {
            Err(BatchError::Invalid(e)) => e,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    /// JSON text nesting `levels` arrays or objects (chosen by `shape`'s bits) around `leaf`.
    fn nest(levels: usize, shape: u64, leaf: &str) -> String {
        let mut text = leaf.to_string();
        for level in 0..levels {
            text = if shape >> (level % 64) & 1 == 1 {
                format!(r#"{{"k{level}":{text},"n":{level}}}"#)
            } else {
                format!("[{text},{level}]")
            };
        }
        text
    }

    proptest::proptest! {
        /// Whatever the nesting, shape and size of a custom event's fields, an event that is
        /// accepted reads back as JSON whole, the way `GET /v1/events` reads it.
        #[test]
        fn every_accepted_event_reads_back(
            levels in 100usize..140,
            shape in proptest::prelude::any::<u64>(),
            width in 0usize..40,
            in_metadata in proptest::prelude::any::<bool>(),
        ) {
            let leaf = format!("\"{}\"", "x".repeat(width));
            let value = nest(levels, shape, &leaf);
            let body = if in_metadata {
                format!(r#"{{"type":"custom","name":"n","extra":{{"deep":{value}}}}}"#)
            } else {
                format!(r#"{{"type":"custom","name":"n","deep":{value}}}"#)
            };
            if let Ok(batch) = parse(body.as_bytes(), now()) {
                let stored = batch.events[0].body();
                proptest::prop_assert!(serde_json::from_str::<Value>(&stored).is_ok());
                let page = format!(r#"{{"events":[{stored}],"nextCursor":null}}"#);
                proptest::prop_assert!(serde_json::from_str::<Value>(&page).is_ok());
            }
            // The boundary itself: a field of 124 levels is accepted, one of 125 is not.
            let top_level = |n| format!(r#"{{"type":"custom","name":"n","deep":{}}}"#, nest(n, shape, &leaf));
            proptest::prop_assert!(parse(top_level(124).as_bytes(), now()).is_ok());
            proptest::prop_assert!(parse(top_level(125).as_bytes(), now()).is_err());
        }
    }

    #[test]
    fn the_seed_deployment_is_valid() {
        let body = json!({
            "type": "deployment", "repository": "org/repo", "service": "api",
            "version": "v1.2.3", "sha": "abc123", "environment": "production",
            "triggeredBy": "ci", "status": "success", "timestamp": "2024-01-15T10:30:00Z",
            "metadata": {"workflow": "deploy", "runId": "1", "runNumber": "7"}
        });
        let text = body.to_string();
        let batch = parse(text.as_bytes(), now()).unwrap();
        assert!(!batch.is_array);
        assert_eq!(
            batch.events[0].get_str("status").as_deref(),
            Some("success")
        );
    }

    #[test]
    fn synonyms_and_offsets_are_normalised() {
        let body = json!([
            {"type": "deployment", "service": "a", "environment": "p", "status": "Succeeded",
             "timestamp": "2024-01-15T12:30:00+02:00"},
            {"type": "alert", "service": "a", "title": "t", "severity": "critical", "status": "firing"},
        ]);
        let text = body.to_string();
        let batch = parse(text.as_bytes(), now()).unwrap();
        assert_eq!(
            batch.events[0].get_str("status").as_deref(),
            Some("success")
        );
        assert_eq!(
            batch.events[0].get_str("timestamp").as_deref(),
            Some("2024-01-15T10:30:00Z")
        );
        assert_eq!(
            batch.events[1].get_str("status").as_deref(),
            Some("triggered")
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let errs = errors(json!([
            {"type": "deployment", "service": "a", "environment": "p", "status": "success"},
            {"type": "deployment", "service": 3, "status": "exploded"},
        ]));
        let pointers: Vec<_> = errs.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(pointers, ["/1/service", "/1/environment", "/1/status"]);
        assert!(errs[2].detail.contains("rolled_back"), "{}", errs[2].detail);
    }

    #[test]
    fn timestamps_without_zone_or_in_future_are_refused() {
        let e = errors(json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T10:30:00"}));
        assert_eq!(e[0].pointer, "/timestamp");
        assert!(e[0].detail.contains("no time zone"));
        let e = errors(json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T12:06:00Z"}));
        assert!(e[0].detail.contains("future"));
        let e = errors(
            json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T10:30:00.1234567891Z"}),
        );
        assert_eq!(e[0].pointer, "/timestamp");
        assert!(
            e[0].detail.contains("10 fractional digits; at most nine"),
            "{}",
            e[0].detail
        );
        let e = errors(json!({"type": "custom", "name": "x", "timestamp": "2016-12-31T23:59:60Z"}));
        assert!(e[0].detail.contains("leap second"), "{}", e[0].detail);
        let nine = json!({"type": "custom", "name": "x", "timestamp": "2024-01-15T10:30:00.123456789+01:00"});
        assert!(parse(nine.to_string().as_bytes(), now()).is_ok());
    }

    #[test]
    fn metadata_limits() {
        let many: serde_json::Map<_, _> = (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
        let e = errors(json!({"type": "custom", "name": "x", "metadata": many}));
        assert_eq!(e[0].pointer, "/metadata");
        let e = errors(json!({"type": "custom", "name": "x", "metadata": {"a/b": {"nested": 1}}}));
        assert_eq!(e[0].pointer, "/metadata/a~1b");
        assert!(e[0].detail.ends_with("not an object"), "{}", e[0].detail);
        let long = "a".repeat(1025);
        let e = errors(json!({"type": "custom", "name": "x", "metadata": {"k": long}}));
        assert_eq!(e[0].pointer, "/metadata/k");
        assert!(
            e[0].detail
                .starts_with("metadata value \"k\" is longer than 1024 bytes"),
            "{}",
            e[0].detail
        );
    }

    #[test]
    fn resolve_by_dedup_key_needs_no_other_fields() {
        let body = json!({"type": "alert", "status": "resolve", "dedupKey": "disk-full"});
        let text = body.to_string();
        let batch = parse(text.as_bytes(), now()).unwrap();
        assert_eq!(batch.events[0].inherit_from.as_deref(), Some("disk-full"));
        let e = errors(json!({"type": "alert", "status": "resolved"}));
        assert_eq!(e.len(), 3, "{e:?}");
    }

    #[test]
    fn sizes_and_shapes() {
        assert!(matches!(
            parse(b"{nope", now()),
            Err(BatchError::Malformed(_))
        ));
        assert!(matches!(parse(b"", now()), Err(BatchError::Malformed(_))));
        let big = json!({"type": "custom", "name": "x", "blob": "a".repeat(70_000)});
        let e = parse(big.to_string().as_bytes(), now()).unwrap_err();
        assert!(matches!(e, BatchError::EventTooLarge { .. }));
        assert!(e.to_string().starts_with("the event is 70"), "{e}");
        let batch = json!([{"type": "custom", "name": "x"}, big]);
        let e = parse(batch.to_string().as_bytes(), now()).unwrap_err();
        assert!(
            e.to_string().starts_with("event /1 of the batch is 70"),
            "{e}"
        );
        let big_and_broken = format!("{{\"blob\": \"{}\"", "a".repeat(70_000));
        assert!(matches!(
            parse(big_and_broken.as_bytes(), now()),
            Err(BatchError::Malformed(_))
        ));
        let e = errors(json!([]));
        assert!(e[0].detail.contains("empty"));
        let e = errors(json!([1]));
        assert_eq!(e[0].pointer, "/0");
    }
}
