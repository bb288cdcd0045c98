//! Validation and normalisation of one signal event (docs/api.md).
//!
//! Every problem is collected (not just the first) as a [`FieldError`] whose JSON pointer names
//! the field, so a client fixes its payload in one round trip.

use std::borrow::Cow;

use chrono::{DateTime, TimeDelta, Utc};

use super::event::{EventType, FieldError, Override, ValidEvent, format_time};
use super::raw::{self, Kind, Members};

/// Most keys in `metadata`.
pub const MAX_METADATA_KEYS: usize = 64;
/// Longest identifier-like string (service, environment, sha, …), in bytes.
pub const MAX_SHORT: usize = 1_024;
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

pub use crate::inputs::pointer_token;

struct Checker<'e, 'a> {
    prefix: &'e str,
    errors: &'e mut Vec<FieldError>,
    members: &'e Members<'a>,
}

impl<'a> Checker<'_, 'a> {
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

    /// ` (the event has "serivce": did you mean service?)` when a member the event has is
    /// the missing field `key` misspelt or in another case (`serivce`, `Service`): such a
    /// member is kept as an extra field, so without this hint the sender would read only that
    /// `key` is required.
    fn misspelt(&self, key: &str) -> String {
        self.near_miss(key, false)
            .map(|k| format!(" (the event has {k:?}: did you mean {key}?)"))
            .unwrap_or_default()
    }

    /// A member that is `key` in another case or with a letter or two wrong; with `strict`
    /// (for an optional field, where a match turns a stored event into a refused one), only
    /// another case or spelling (`time_stamp`) or one letter wrong, missing or swapped with
    /// the next (`timestmap`, `timestap`), never a longer name (`timestamps`, `timestart` and
    /// `timestep` may be fields of the sender's own).
    fn near_miss(&self, key: &str, strict: bool) -> Option<&str> {
        let fold = |s: &str| -> String {
            (s.chars().filter(|c| !matches!(c, '_' | '-')))
                .flat_map(char::to_lowercase)
                .collect()
        };
        let most = if key.len() > 5 && !strict { 2 } else { 1 };
        self.members
            .iter()
            .map(|(k, _)| std::borrow::Borrow::<str>::borrow(k))
            .filter(|k| *k != key)
            .find(|k| {
                fold(k) == fold(key)
                    || ((!strict || k.len() <= key.len())
                        && strsim::damerau_levenshtein(k, key) <= most)
            })
    }

    /// Whether a member is absent or null.
    fn missing(&self, key: &str) -> bool {
        self.members.present(key).is_none()
    }

    /// A string field: required or optional, non-empty, at most `max` bytes.
    fn string(&mut self, key: &str, required: bool, max: usize) -> Option<Cow<'a, str>> {
        self.string_of(key, required, max, false)
    }

    /// [`Self::string`], its length counted without surrounding whitespace when `trimmed` (a
    /// name is stored so).
    fn string_of(
        &mut self,
        key: &str,
        required: bool,
        max: usize,
        trimmed: bool,
    ) -> Option<Cow<'a, str>> {
        let Some(raw) = self.members.present(key) else {
            if required {
                let hint = self.misspelt(key);
                self.fail(key, format!("{key} is required (a non-empty string){hint}"));
            }
            return None;
        };
        let Some(s) = raw::string(raw) else {
            let kind = Kind::of(raw).article();
            self.fail(key, format!("{key} must be a string, not {kind}"));
            return None;
        };
        let counted = |s: &str| if trimmed { s.trim().len() } else { s.len() };
        if s.trim().is_empty() {
            self.fail(
                key,
                format!(
                    "{key} must be a non-empty string; this one is {}",
                    if s.is_empty() {
                        "empty"
                    } else {
                        "blank (whitespace only)"
                    }
                ),
            );
            None
        } else if counted(&s) > max {
            let len = counted(&s);
            self.fail(key, format!("{key} is {len} bytes; at most {max} allowed"));
            None
        } else {
            Some(s)
        }
    }

    /// A name that events are matched by (`service`, `environment`, `repository`, `version`,
    /// `sha`, `dedupKey`): a string field stored without surrounding whitespace, so that a
    /// sender's `" api\n"` is the service `api` and correlates with it.
    fn name(
        &mut self,
        key: &'static str,
        required: bool,
        overrides: &mut Vec<(&'static str, Override)>,
    ) -> Option<Cow<'a, str>> {
        let s = self.string_of(key, required, MAX_SHORT, true)?;
        let trimmed = s.trim();
        if trimmed.len() == s.len() {
            return Some(s);
        }
        let trimmed = trimmed.to_string();
        overrides.push((key, Override::Text(trimmed.clone())));
        Some(Cow::Owned(trimmed))
    }

    /// An enumerated string, with synonyms mapped to their canonical value.
    fn choice(
        &mut self,
        key: &str,
        required: bool,
        allowed: &[&'static str],
        synonym: fn(&str) -> Option<&'static str>,
    ) -> Option<&'static str> {
        let raw = self.string(key, required, MAX_SHORT)?;
        // Most senders send the canonical word already: no folding needed.
        if let Some(canonical) = allowed.iter().find(|a| **a == raw) {
            return Some(canonical);
        }
        let folded = raw.trim().to_ascii_lowercase().replace(['-', ' '], "_");
        if let Some(canonical) = allowed.iter().find(|a| **a == folded) {
            return Some(canonical);
        }
        if let Some(canonical) = synonym(&folded) {
            return Some(canonical);
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

    /// Parses an RFC 3339 time ([`crate::time::parse_rfc3339`]'s rule); one too far in the
    /// future is refused too.
    fn timestamp(&mut self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Optional, but a misspelt one would date the event silently at its receipt (and put a
        // backfilled deployment in the wrong DORA window).
        if self.missing("timestamp")
            && let Some(k) = self.near_miss("timestamp", true)
        {
            let k = k.to_string();
            self.fail(
                "timestamp",
                format!("the event has {k:?} but no timestamp: did you mean timestamp? (an event without one is dated when it is received; send the time as timestamp, or leave both out)"),
            );
            return None;
        }
        if let Some(raw) = self.members.present("timestamp")
            && raw::string(raw).is_none()
        {
            let kind = Kind::of(raw).article();
            self.fail(
                "timestamp",
                format!("timestamp must be an RFC 3339 string such as 2024-01-15T10:30:00Z, not {kind} (a number of seconds or milliseconds since 1970 is not read: format it as RFC 3339)"),
            );
            return None;
        }
        let raw = self.string("timestamp", false, 64)?;
        let why = match crate::time::parse_rfc3339(&raw) {
            Ok(t) if t <= now + MAX_FUTURE => return Some(t),
            Ok(_) => "is more than 5 minutes in the future; check the sender's clock".to_string(),
            Err(why) => why.to_string(),
        };
        self.fail("timestamp", format!("timestamp {raw:?} {why}"));
        None
    }

    /// `deployment`: the event is one, whose `commitTimestamp` DORA reads.
    fn metadata(&mut self, deployment: bool) {
        let Some(&value) = self.members.get("metadata") else {
            return;
        };
        match Kind::of(value) {
            Kind::Object => {}
            Kind::Null => return,
            other => {
                let kind = other.article();
                self.fail(
                    "metadata",
                    format!("metadata must be an object, not {kind}"),
                );
                return;
            }
        }
        // The text is a JSON object (serde_json checked it), so this parse cannot fail.
        let Ok(map) = raw::members(value.get()) else {
            return;
        };
        if map.len() > MAX_METADATA_KEYS {
            self.fail(
                "metadata",
                format!(
                    "metadata has {} keys; at most {MAX_METADATA_KEYS} allowed",
                    map.len()
                ),
            );
        }
        for (key, v) in map.iter() {
            // A key is a label that readers filter and show by: text of a value's length.
            if key.0.trim().is_empty() || key.0.len() > MAX_SHORT {
                self.fail_path(
                    &format!("metadata/{}", pointer_token(&key.0)),
                    if key.0.len() > MAX_SHORT {
                        format!(
                            "metadata key is {} bytes long; a key is a name of 1 to {MAX_SHORT} bytes, not blank",
                            key.0.len()
                        )
                    } else {
                        format!(
                            "metadata key {:?} is blank; a key is a name of 1 to {MAX_SHORT} bytes, not blank",
                            key.0
                        )
                    },
                );
                continue;
            }
            let ok = match Kind::of(v) {
                // Escapes only shorten the text, so a short raw string needs no decoding.
                Kind::String => {
                    v.get().len() <= MAX_SHORT + 2
                        || raw::string(v).is_some_and(|s| s.len() <= MAX_SHORT)
                }
                Kind::Number | Kind::Bool => true,
                _ => false,
            };
            if !ok {
                let detail = match Kind::of(v) {
                    Kind::String => format!(
                        "the value of metadata key {:?} is longer than {MAX_SHORT} bytes; shorten it, or send the text as a top-level field",
                        key.0
                    ),
                    other => format!(
                        "the value of metadata key {:?} must be a string (at most {MAX_SHORT} bytes), number or boolean, not {}",
                        key.0,
                        other.article()
                    ),
                };
                self.fail_path(&format!("metadata/{}", pointer_token(&key.0)), detail);
            } else if deployment && key.0 == COMMIT_TIMESTAMP {
                self.commit_timestamp(v);
            }
        }
    }

    /// `metadata.commitTimestamp` is read by DORA's lead time, so it is held to the rule of
    /// `timestamp` (any time, past or future): one in another form would be left out of the
    /// figures with nothing said.
    fn commit_timestamp(&mut self, v: &serde_json::value::RawValue) {
        let why = match raw::string(v) {
            Some(text) => match crate::time::parse_rfc3339(&text) {
                Ok(_) => return,
                Err(why) => format!("metadata value {COMMIT_TIMESTAMP:?} {text:?} {why}"),
            },
            None => format!(
                "metadata value {COMMIT_TIMESTAMP:?} must be an RFC 3339 time as a string (`git log -1 --format=%cI` prints one), not {}",
                Kind::of(v).article()
            ),
        };
        self.fail_path(&format!("metadata/{COMMIT_TIMESTAMP}"), why);
    }
}

/// The metadata key DORA reads a deployment's commit time from.
const COMMIT_TIMESTAMP: &str = "commitTimestamp";

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

/// Validates one event object's members. `prefix` is the pointer of the event itself (`""` or
/// `/3`).
pub fn validate<'a>(
    members: Members<'a>,
    prefix: &str,
    now: DateTime<Utc>,
    errors: &mut Vec<FieldError>,
) -> Option<ValidEvent<'a>> {
    let before = errors.len();
    let mut c = Checker {
        prefix,
        errors,
        members: &members,
    };
    let kind = match members.present("type") {
        Some(raw) => match raw::string(raw) {
            Some(t) => EventType::parse(t.trim()).or_else(|| {
                c.fail(
                    "type",
                    format!("type {t:?} is unknown; expected deployment, alert, change or custom"),
                );
                None
            }),
            None => {
                let kind = Kind::of(raw).article();
                c.fail(
                    "type",
                    format!(
                        "type must be a string, not {kind}: one of deployment, alert, change, custom"
                    ),
                );
                None
            }
        },
        None => {
            let hint = c.misspelt("type");
            c.fail(
                "type",
                format!("type is required: one of deployment, alert, change, custom{hint}"),
            );
            None
        }
    };
    let occurred_at = c.timestamp(now);
    c.metadata(kind == Some(EventType::Deployment));
    // Fields the server sets on every event it returns: one sent would be silently replaced.
    for key in ["id", "receivedAt"] {
        if members.present(key).is_some() {
            c.fail(
                key,
                format!("{key} is set by the server and returned with the event; send your own value under another name"),
            );
        }
    }
    let mut inherit_from = None;
    let mut overrides: Vec<(&'static str, Override)> = Vec::with_capacity(4);
    match kind {
        Some(EventType::Deployment) => {
            c.name("service", true, &mut overrides);
            c.name("environment", true, &mut overrides);
            if let Some(s) = c.choice("status", true, DEPLOYMENT_STATUSES, deployment_synonym) {
                overrides.push(("status", Override::Word(s)));
            }
            for key in ["repository", "version", "sha"] {
                c.name(key, false, &mut overrides);
            }
            c.string("triggeredBy", false, MAX_SHORT);
        }
        Some(EventType::Alert) => {
            let status = c.choice("status", true, ALERT_STATUSES, alert_status_synonym);
            let dedup = c.name("dedupKey", false, &mut overrides);
            let missing = ["service", "title", "severity"]
                .iter()
                .any(|k| c.missing(k));
            let resolve_by_key = status == Some("resolved") && dedup.is_some() && missing;
            if resolve_by_key {
                inherit_from = dedup.map(Cow::into_owned);
            }
            let required = !resolve_by_key;
            c.name("service", required, &mut overrides);
            c.string("title", required, MAX_TEXT);
            if let Some(s) = c.choice("severity", required, ALERT_SEVERITIES, no_synonym) {
                overrides.push(("severity", Override::Word(s)));
            }
            if let Some(s) = status {
                overrides.push(("status", Override::Word(s)));
            }
            // version, sha and repository link an alert to the deployment it runs (correlation).
            for key in ["environment", "version", "sha", "repository"] {
                c.name(key, false, &mut overrides);
            }
            c.string("source", false, MAX_SHORT);
            if let Some(links) = members.present("links") {
                for (path, detail) in super::links::problems(links) {
                    c.fail_path(&path, detail);
                }
            }
        }
        Some(EventType::Change) => {
            c.name("service", true, &mut overrides);
            c.string("summary", true, MAX_TEXT);
            for key in ["environment", "repository", "sha"] {
                c.name(key, false, &mut overrides);
            }
            for key in ["kind", "triggeredBy"] {
                c.string(key, false, MAX_SHORT);
            }
        }
        Some(EventType::Custom) => {
            c.string("name", true, MAX_SHORT);
            for key in ["service", "environment"] {
                c.name(key, false, &mut overrides);
            }
        }
        None => {}
    }
    if errors.len() > before {
        return None;
    }
    let kind = kind?;
    overrides.push(("type", Override::Word(kind.as_str())));
    if let Some(t) = occurred_at {
        overrides.push(("timestamp", Override::Text(format_time(t))));
    }
    Some(ValidEvent::new(
        kind,
        members,
        overrides,
        occurred_at,
        inherit_from,
    ))
}
