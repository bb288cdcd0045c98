//! The one format of every time the server makes (`receivedAt`, `connectedAt`,
//! `lastHeartbeat`): RFC 3339 in UTC with milliseconds and `Z`, e.g.
//! `2026-11-26T14:03:07.512Z`. An event's own `timestamp` is the sender's and keeps the
//! precision it was sent with.

use chrono::{DateTime, SecondsFormat, Utc};

/// `t` as RFC 3339, UTC, milliseconds, `Z`.
pub fn format_millis(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// serde's `serialize_with` for a server-made time.
pub fn serialize_millis<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_millis(*t))
}

#[cfg(test)]
mod tests {
    #[test]
    fn always_three_digits() {
        let whole = chrono::DateTime::parse_from_rfc3339("2026-11-26T14:03:07Z").unwrap();
        assert_eq!(
            super::format_millis(whole.to_utc()),
            "2026-11-26T14:03:07.000Z"
        );
        let fine =
            chrono::DateTime::parse_from_rfc3339("2026-11-26T14:03:07.512345678+01:00").unwrap();
        assert_eq!(
            super::format_millis(fine.to_utc()),
            "2026-11-26T13:03:07.512Z"
        );
    }
}
