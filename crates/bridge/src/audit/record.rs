//! One audit record: what the bridge decided about one request, as its line says it.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};

use crate::config::ResourceKind;

/// Whether the bridge let a request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Forwarded.
    Allowed,
    /// Refused by a rule (or because the resource is not declared).
    Denied,
}

impl Decision {
    /// The word the audit record uses, for the debug log's copy of its fields.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
        }
    }
}

/// One forwarded (or refused) request. Serialised as one JSON line by [`AuditLog::write`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When the request finished, UTC; written as RFC 3339 with milliseconds and `Z`.
    #[serde(serialize_with = "rfc3339_z")]
    pub time: DateTime<Utc>,
    /// The request id shared with the cloud's logs.
    pub request_id: String,
    /// The numeric id of the organisation whose API key asked (from the cloud).
    pub org: String,
    /// The bridge name.
    pub bridge: String,
    /// This bridge process's instance id.
    pub instance: String,
    /// The kind of resource addressed.
    pub kind: ResourceKind,
    /// The resource name.
    pub resource: String,
    /// HTTP method (`CONNECT`-like verbs for databases are the forwarder's choice).
    pub method: String,
    /// Request path; query string values are removed when written ([`strip_query_values`]).
    #[serde(serialize_with = "stripped_path")]
    pub path: String,
    /// Response status sent back to the cloud.
    pub status: u16,
    /// Bytes received from the cloud (request body).
    pub bytes_in: u64,
    /// Bytes sent to the cloud (response body).
    pub bytes_out: u64,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// The cloud-side principal that asked (API key id).
    pub principal: String,
    /// Allowed or denied.
    pub decision: Decision,
    /// The rule that decided, e.g. `default:git-fetch` or `apis[0].allow[1]`.
    pub rule: String,
    /// Database sessions only: `session_start`, `session_end` or `statement`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// How a database session ended (`session_end`: `closed`, or what failed), or `cut` for a
    /// forwarded answer that did not stream to its end (the caller left, the tunnel dropped,
    /// the drain at shutdown ran out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// `statement` only: the statement's text as the client sent it (at most 64 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
}

fn rfc3339_z<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::Millis, true))
}

fn stripped_path<S: Serializer>(path: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&strip_query_values(path))
}

/// Removes query string values (and any fragment) from `path`, keeping the parameter names:
/// `/a?token=x&service=y#f` becomes `/a?token&service` (git's `service=git-upload-pack` and
/// `service=git-receive-pack` are kept whole); so are the values of a segment's
/// parameters (`/a;jsessionid=x/b` becomes `/a;jsessionid/b`), which servers read as secrets too.
pub fn strip_query_values(path: &str) -> String {
    // An encoded `;` or `?` (refused by the path rules, but recorded) hides values alike.
    let decoded;
    let path = if path.contains('%') {
        decoded = ["%3B", "%3b", "%3F", "%3f"]
            .iter()
            .zip([";", ";", "?", "?"])
            .fold(path.to_owned(), |p, (encoded, plain)| {
                p.replace(encoded, plain)
            });
        decoded.as_str()
    } else {
        path
    };
    let path = path.split_once('#').map_or(path, |(before, _)| before);
    let (base, query) = path.split_once('?').unwrap_or((path, ""));
    let base = if base.contains(';') {
        let segments: Vec<String> = (base.split('/'))
            .map(|segment| {
                let mut parts = segment.split(';');
                let name = parts.next().unwrap_or_default();
                std::iter::once(name)
                    .chain(parts.filter(|p| !p.is_empty()).map(name_of))
                    .collect::<Vec<_>>()
                    .join(";")
            })
            .collect();
        segments.join("/")
    } else {
        base.to_owned()
    };
    let names: Vec<&str> = (query.split('&'))
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            // Git's two services are no secret, and tell a push's first request from a fetch's.
            if ["service=git-upload-pack", "service=git-receive-pack"].contains(&pair) {
                pair
            } else {
                name_of(pair)
            }
        })
        .collect();
    if names.is_empty() {
        base
    } else {
        format!("{base}?{}", names.join("&"))
    }
}

/// The name of a `name=value` parameter when it is short and name-like; `*` for a bare word or
/// a long name, which may itself be a token. Applied once, to the raw path (the record's
/// serializer does).
fn name_of(pair: &str) -> &str {
    match pair.split_once('=') {
        Some((name, _))
            if (1..=32).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-[]".contains(&b)) =>
        {
            name
        }
        _ => "*",
    }
}
