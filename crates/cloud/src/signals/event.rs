//! What a valid signal event is: its type, its members as received, and the canonical values
//! that replace some of them (type, status, severity, timestamp, fields a resolve inherits).
//! [`ValidEvent::body`] writes the normalised JSON that is stored and read back.

use std::borrow::Cow;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::raw::{self, Members};

/// The four kinds of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// A deployment of a service to an environment.
    Deployment,
    /// An alert from a monitoring system.
    Alert,
    /// A change (config, feature flag, infrastructure).
    Change,
    /// Anything else, named by the sender.
    Custom,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Deployment => "deployment",
            EventType::Alert => "alert",
            EventType::Change => "change",
            EventType::Custom => "custom",
        }
    }

    /// Parses the wire name, in any case (`Deployment` is `deployment`, as status synonyms are
    /// case-insensitive too).
    pub fn parse(s: &str) -> Option<Self> {
        [
            EventType::Deployment,
            EventType::Alert,
            EventType::Change,
            EventType::Custom,
        ]
        .into_iter()
        .find(|t| t.as_str().eq_ignore_ascii_case(s))
    }
}

/// One problem with one field.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct FieldError {
    /// JSON pointer (RFC 6901) to the field, e.g. `/1/status`.
    pub pointer: String,
    /// What is wrong and what was expected.
    pub detail: String,
}

/// A value that replaces (or adds) a member in the stored body.
#[derive(Debug, Clone)]
pub(crate) enum Override {
    /// A canonical word (`success`, `deployment`): plain ASCII, written quoted.
    Word(&'static str),
    /// A string, written quoted and escaped.
    Text(String),
    /// JSON text, written as it is (a field inherited from an earlier alert).
    Json(String),
}

/// A valid event, normalised.
#[derive(Debug, Clone)]
pub struct ValidEvent<'a> {
    /// Its type.
    pub kind: EventType,
    /// The members as received, borrowed from the request body.
    members: Members<'a>,
    /// Canonical values that replace or add members, sorted by key.
    overrides: Vec<(&'static str, Override)>,
    /// When it happened (`None`: use the receive time).
    pub occurred_at: Option<DateTime<Utc>>,
    /// Set for an alert resolve that must inherit its fields from the alert it closes.
    pub inherit_from: Option<String>,
}

impl<'a> ValidEvent<'a> {
    /// An event of `kind` over `members`, with canonical values to apply.
    pub(crate) fn new(
        kind: EventType,
        members: Members<'a>,
        overrides: Vec<(&'static str, Override)>,
        occurred_at: Option<DateTime<Utc>>,
        inherit_from: Option<String>,
    ) -> Self {
        let mut event = ValidEvent {
            kind,
            members,
            overrides: Vec::with_capacity(overrides.len() + 1),
            occurred_at,
            inherit_from,
        };
        for (key, value) in overrides {
            event.set(key, value);
        }
        event
    }

    fn set(&mut self, key: &'static str, value: Override) {
        match self.overrides.binary_search_by(|(k, _)| (*k).cmp(key)) {
            Ok(i) => self.overrides[i].1 = value,
            Err(i) => self.overrides.insert(i, (key, value)),
        }
    }

    fn override_of(&self, key: &str) -> Option<&Override> {
        self.overrides
            .binary_search_by(|(k, _)| (*k).cmp(key))
            .ok()
            .map(|i| &self.overrides[i].1)
    }

    /// A string field as stored (its canonical value where it has one).
    pub fn get_str(&self, key: &str) -> Option<Cow<'_, str>> {
        match self.override_of(key) {
            Some(Override::Word(w)) => Some(Cow::Borrowed(w)),
            Some(Override::Text(t)) => Some(Cow::Borrowed(t)),
            Some(Override::Json(j)) => serde_json::from_str::<String>(j).ok().map(Cow::Owned),
            None => self.members.get(key).and_then(|raw| raw::string(raw)),
        }
    }

    /// Whether a field is present and not null (as stored).
    pub fn has(&self, key: &str) -> bool {
        self.override_of(key).is_some() || self.members.present(key).is_some()
    }

    /// The JSON text of a field as stored, if present and not null.
    fn json(&self, key: &str) -> Option<Cow<'_, str>> {
        match self.override_of(key) {
            Some(Override::Word(w)) => Some(Cow::Owned(format!("\"{w}\""))),
            Some(Override::Text(t)) => serde_json::to_string(t).ok().map(Cow::Owned),
            Some(Override::Json(j)) => Some(Cow::Borrowed(j)),
            None => self
                .members
                .present(key)
                .map(|raw| Cow::Borrowed(raw.get())),
        }
    }

    /// Fills each of `fields` this event lacks (absent or null) from `source`, which gives a
    /// field's JSON text: how an alert resolve sent with only its `dedupKey` takes the rest
    /// from the alert it closes.
    pub fn inherit(&mut self, fields: &[&'static str], source: impl Fn(&str) -> Option<String>) {
        for &field in fields {
            if !self.has(field)
                && let Some(json) = source(field)
            {
                self.set(field, Override::Json(json));
            }
        }
    }

    /// The JSON text of `key` in this event, for another event to inherit.
    pub fn json_of(&self, key: &str) -> Option<String> {
        self.json(key).map(Cow::into_owned)
    }

    /// Records when the event happened if it did not say (the receive time): the stored body
    /// always carries its `timestamp`.
    pub fn default_time(&mut self, received: DateTime<Utc>) {
        if self.occurred_at.is_none() {
            self.occurred_at = Some(received);
            self.set(
                "timestamp",
                Override::Text(crate::time::format_millis(received)),
            );
        }
    }

    /// The normalised body: the members in key order (as `serde_json` maps print), canonical
    /// values in place of the received ones, everything else verbatim.
    pub fn body(&self) -> String {
        let mut out = Vec::with_capacity(
            self.members
                .iter()
                .map(|(k, v)| k.0.len() + v.get().len() + 4)
                .sum::<usize>()
                + 64,
        );
        out.push(b'{');
        let mut first = true;
        let mut write_key = |out: &mut Vec<u8>, key: &str| {
            if !first {
                out.push(b',');
            }
            first = false;
            raw::write_string(out, key);
            out.push(b':');
        };
        let mut members = self.members.iter().peekable();
        let mut overrides = self.overrides.iter().peekable();
        loop {
            let member_first = match (members.peek(), overrides.peek()) {
                (None, None) => break,
                (Some((m, _)), Some((o, _))) => m.0.as_ref() < *o,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if member_first {
                if let Some((key, value)) = members.next() {
                    write_key(&mut out, &key.0);
                    out.extend_from_slice(value.get().as_bytes());
                }
            } else if let Some((key, value)) = overrides.next() {
                // The override replaces the received member of the same name.
                if members.peek().is_some_and(|(m, _)| m.0 == *key) {
                    members.next();
                }
                write_key(&mut out, key);
                write_override(&mut out, value);
            }
        }
        out.push(b'}');
        // Every piece is UTF-8: members come from a &str, the rest from Strings.
        String::from_utf8(out).unwrap_or_default()
    }
}

fn write_override(out: &mut Vec<u8>, value: &Override) {
    match value {
        Override::Word(w) => {
            out.push(b'"');
            out.extend_from_slice(w.as_bytes());
            out.push(b'"');
        }
        Override::Text(t) => raw::write_string(out, t),
        Override::Json(j) => out.extend_from_slice(j.as_bytes()),
    }
}

/// The JSON text of a member of a stored body, for an event inheriting from it.
pub fn member_json(members: &Members<'_>, key: &str) -> Option<String> {
    members.present(key).map(|raw| raw.get().to_string())
}

/// Formats a time as the API shows it: RFC 3339, UTC, `Z`.
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(members: Members<'a>, overrides: Vec<(&'static str, Override)>) -> ValidEvent<'a> {
        ValidEvent::new(EventType::Custom, members, overrides, None, None)
    }

    #[test]
    fn the_body_merges_canonical_values_in_key_order() {
        let text = r#"{"z": {"n": [1, 2]}, "type": " custom ", "name": "x\ty", "a": null}"#;
        let mut e = event(
            raw::members(text).unwrap(),
            vec![("type", Override::Word("custom"))],
        );
        e.default_time("2024-01-15T10:30:00Z".parse().unwrap());
        assert_eq!(
            e.body(),
            r#"{"a":null,"name":"x\ty","timestamp":"2024-01-15T10:30:00.000Z","type":"custom","z":{"n": [1, 2]}}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(parsed["name"], "x\ty");
        assert_eq!(e.get_str("type").as_deref(), Some("custom"));
        assert_eq!(e.get_str("name").as_deref(), Some("x\ty"));
    }

    #[test]
    fn inherited_fields_fill_only_what_is_missing() {
        let text = r#"{"service": "mine", "title": null}"#;
        let mut e = event(raw::members(text).unwrap(), Vec::new());
        e.inherit(&["service", "title", "source"], |k| match k {
            "service" => Some("\"theirs\"".into()),
            "title" => Some("\"Disk full\"".into()),
            _ => None,
        });
        assert_eq!(e.get_str("service").as_deref(), Some("mine"));
        assert_eq!(e.get_str("title").as_deref(), Some("Disk full"));
        assert!(!e.has("source"));
        assert_eq!(e.body(), r#"{"service":"mine","title":"Disk full"}"#);
        assert_eq!(e.json_of("title").as_deref(), Some("\"Disk full\""));
    }
}
