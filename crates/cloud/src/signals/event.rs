//! Validation and normalisation of one signal event (DESIGN.md, "Signals API").
//!
//! Every problem is collected (not just the first) as a [`FieldError`] whose JSON pointer names
//! the field, so a client fixes its payload in one round trip.

use chrono::{DateTime, NaiveDateTime, SecondsFormat, TimeDelta, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

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

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "deployment" => EventType::Deployment,
            "alert" => EventType::Alert,
            "change" => EventType::Change,
            "custom" => EventType::Custom,
            _ => return None,
        })
    }
}

/// One problem with one field.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FieldError {
    /// JSON pointer (RFC 6901) to the field, e.g. `/1/status`.
    pub pointer: String,
    /// What is wrong and what was expected.
    pub detail: String,
}

/// Most keys in `metadata`.
pub const MAX_METADATA_KEYS: usize = 64;
/// Longest identifier-like string (service, environment, sha, …), in bytes.
const MAX_SHORT: usize = 1_024;
/// Longest free text (title, summary), in bytes.
const MAX_TEXT: usize = 8_192;
/// How far in the future a timestamp may be (clock skew allowance).
const MAX_FUTURE: TimeDelta = TimeDelta::minutes(5);

const DEPLOYMENT_STATUSES: &[&str] = &[
    "queued",
    "pending",
    "in_progress",
    "success",
    "failure",
    "error",
    "cancelled",
    "rolled_back",
];
const ALERT_SEVERITIES: &[&str] = &["critical", "error", "warning", "info"];
const ALERT_STATUSES: &[&str] = &["triggered", "acknowledged", "resolved"];

/// A valid event, normalised.
#[derive(Debug, Clone)]
pub struct ValidEvent {
    /// Its type.
    pub kind: EventType,
    /// The normalised body (status and timestamp normalised, unknown fields kept).
    pub body: Map<String, Value>,
    /// When it happened (`None`: use the receive time).
    pub occurred_at: Option<DateTime<Utc>>,
    /// Set for an alert resolve that must inherit its fields from the alert it closes.
    pub inherit_from: Option<String>,
}

impl ValidEvent {
    /// A string field of the body.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.body.get(key).and_then(Value::as_str)
    }
}

/// Escapes a key for use in a JSON pointer.
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

struct Checker<'a> {
    prefix: &'a str,
    errors: &'a mut Vec<FieldError>,
}

impl Checker<'_> {
    fn fail(&mut self, key: &str, detail: impl Into<String>) {
        self.fail_path(&pointer_token(key), detail);
    }

    /// Like `fail`, for a path of already escaped tokens (`metadata/runId`).
    fn fail_path(&mut self, path: &str, detail: impl Into<String>) {
        self.errors.push(FieldError {
            pointer: format!("{}/{path}", self.prefix),
            detail: detail.into(),
        });
    }

    /// A string field: required or optional, non-empty, at most `max` bytes.
    fn string<'b>(
        &mut self,
        body: &'b Map<String, Value>,
        key: &str,
        required: bool,
        max: usize,
    ) -> Option<&'b str> {
        match body.get(key) {
            None | Some(Value::Null) if required => {
                self.fail(key, format!("{key} is required (a non-empty string)"));
                None
            }
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => {
                self.fail(key, format!("{key} must be a non-empty string"));
                None
            }
            Some(Value::String(s)) if s.len() > max => {
                self.fail(
                    key,
                    format!("{key} is {} bytes; at most {max} allowed", s.len()),
                );
                None
            }
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                self.fail(
                    key,
                    format!("{key} must be a string, not {}", json_kind(other)),
                );
                None
            }
        }
    }

    /// An enumerated string, with synonyms mapped to their canonical value.
    fn choice(
        &mut self,
        body: &Map<String, Value>,
        key: &str,
        required: bool,
        allowed: &[&str],
        synonym: fn(&str) -> Option<&'static str>,
    ) -> Option<String> {
        let raw = self.string(body, key, required, MAX_SHORT)?;
        let folded = raw.trim().to_ascii_lowercase().replace(['-', ' '], "_");
        if allowed.contains(&folded.as_str()) {
            return Some(folded);
        }
        if let Some(canonical) = synonym(&folded) {
            return Some(canonical.to_string());
        }
        self.fail(
            key,
            format!(
                "{key} {raw:?} is not allowed; expected one of: {}",
                allowed.join(", ")
            ),
        );
        None
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn deployment_synonym(s: &str) -> Option<&'static str> {
    Some(match s {
        "succeeded" | "successful" | "succeed" | "ok" => "success",
        "failed" | "fail" => "failure",
        "canceled" => "cancelled",
        "running" | "started" | "inprogress" => "in_progress",
        "rolledback" | "rollback" => "rolled_back",
        _ => return None,
    })
}

fn alert_status_synonym(s: &str) -> Option<&'static str> {
    Some(match s {
        "firing" | "trigger" | "open" => "triggered",
        "ok" | "resolve" | "closed" => "resolved",
        "ack" | "acknowledge" => "acknowledged",
        _ => return None,
    })
}

fn no_synonym(_: &str) -> Option<&'static str> {
    None
}

/// Parses an RFC 3339 time; a time without a zone or too far in the future is refused.
fn timestamp(
    c: &mut Checker<'_>,
    body: &Map<String, Value>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let raw = c.string(body, "timestamp", false, 64)?;
    match DateTime::parse_from_rfc3339(raw) {
        Ok(t) => {
            let t = t.with_timezone(&Utc);
            if t > now + MAX_FUTURE {
                c.fail(
                    "timestamp",
                    format!("timestamp {raw:?} is more than 5 minutes in the future; check the sender's clock"),
                );
                return None;
            }
            Some(t)
        }
        Err(_) if NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S%.f").is_ok() => {
            c.fail(
                "timestamp",
                format!(
                    "timestamp {raw:?} has no time zone; add Z (UTC) or an offset such as +02:00"
                ),
            );
            None
        }
        Err(_) => {
            c.fail(
                "timestamp",
                format!(
                    "timestamp {raw:?} is not an RFC 3339 time; expected e.g. 2024-01-15T10:30:00Z"
                ),
            );
            None
        }
    }
}

fn metadata(c: &mut Checker<'_>, body: &Map<String, Value>) {
    let Some(value) = body.get("metadata") else {
        return;
    };
    let Value::Object(map) = value else {
        if !value.is_null() {
            c.fail(
                "metadata",
                format!("metadata must be an object, not {}", json_kind(value)),
            );
        }
        return;
    };
    if map.len() > MAX_METADATA_KEYS {
        c.fail(
            "metadata",
            format!(
                "metadata has {} keys; at most {MAX_METADATA_KEYS} allowed",
                map.len()
            ),
        );
    }
    for (key, v) in map {
        let ok = match v {
            Value::String(s) => s.len() <= MAX_SHORT,
            Value::Number(_) | Value::Bool(_) => true,
            _ => false,
        };
        if !ok {
            c.fail_path(
                &format!("metadata/{}", pointer_token(key)),
                format!(
                    "metadata value {key:?} must be a string (at most {MAX_SHORT} bytes), number or boolean, not {}",
                    json_kind(v)
                ),
            );
        }
    }
}

/// Validates one event object. `prefix` is the pointer of the event itself (`""` or `/3`).
pub fn validate(
    value: Value,
    prefix: &str,
    now: DateTime<Utc>,
    errors: &mut Vec<FieldError>,
) -> Option<ValidEvent> {
    let Value::Object(mut body) = value else {
        errors.push(FieldError {
            pointer: prefix.to_string(),
            detail: format!("an event must be a JSON object, not {}", json_kind(&value)),
        });
        return None;
    };
    let before = errors.len();
    let mut c = Checker { prefix, errors };
    let kind = match body.get("type") {
        Some(Value::String(t)) => EventType::parse(t.trim()).or_else(|| {
            c.fail(
                "type",
                format!("type {t:?} is unknown; expected deployment, alert, change or custom"),
            );
            None
        }),
        _ => {
            c.fail(
                "type",
                "type is required: one of deployment, alert, change, custom",
            );
            None
        }
    };
    let occurred_at = timestamp(&mut c, &body, now);
    metadata(&mut c, &body);
    let mut inherit_from = None;
    let mut normalised: Vec<(&str, String)> = Vec::new();
    match kind {
        Some(EventType::Deployment) => {
            c.string(&body, "service", true, MAX_SHORT);
            c.string(&body, "environment", true, MAX_SHORT);
            if let Some(s) = c.choice(
                &body,
                "status",
                true,
                DEPLOYMENT_STATUSES,
                deployment_synonym,
            ) {
                normalised.push(("status", s));
            }
            for key in ["repository", "version", "sha", "triggeredBy"] {
                c.string(&body, key, false, MAX_SHORT);
            }
        }
        Some(EventType::Alert) => {
            let status = c.choice(&body, "status", true, ALERT_STATUSES, alert_status_synonym);
            let dedup = c.string(&body, "dedupKey", false, MAX_SHORT);
            let missing = ["service", "title", "severity"]
                .iter()
                .any(|k| body.get(*k).is_none_or(Value::is_null));
            let resolve_by_key =
                status.as_deref() == Some("resolved") && dedup.is_some() && missing;
            if resolve_by_key {
                inherit_from = dedup.map(str::to_string);
            }
            let required = !resolve_by_key;
            c.string(&body, "service", required, MAX_SHORT);
            c.string(&body, "title", required, MAX_TEXT);
            if let Some(s) = c.choice(&body, "severity", required, ALERT_SEVERITIES, no_synonym) {
                normalised.push(("severity", s));
            }
            if let Some(s) = status {
                normalised.push(("status", s));
            }
            for key in ["environment", "source"] {
                c.string(&body, key, false, MAX_SHORT);
            }
            if let Some(links) = body.get("links").filter(|l| !l.is_array() && !l.is_null()) {
                let kind = json_kind(links);
                c.fail(
                    "links",
                    format!("links must be an array of URLs or {{href, text}} objects, not {kind}"),
                );
            }
        }
        Some(EventType::Change) => {
            c.string(&body, "service", true, MAX_SHORT);
            c.string(&body, "summary", true, MAX_TEXT);
            for key in ["environment", "kind", "triggeredBy", "repository", "sha"] {
                c.string(&body, key, false, MAX_SHORT);
            }
        }
        Some(EventType::Custom) => {
            c.string(&body, "name", true, MAX_SHORT);
            for key in ["service", "environment"] {
                c.string(&body, key, false, MAX_SHORT);
            }
        }
        None => {}
    }
    if errors.len() > before {
        return None;
    }
    let kind = kind?;
    for (key, value) in normalised {
        body.insert(key.to_string(), Value::String(value));
    }
    body.insert("type".into(), Value::String(kind.as_str().into()));
    if let Some(t) = occurred_at {
        body.insert("timestamp".into(), Value::String(format_time(t)));
    }
    Some(ValidEvent {
        kind,
        body,
        occurred_at,
        inherit_from,
    })
}

/// Formats a time as the API shows it: RFC 3339, UTC, `Z`.
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}
