//! The one format of every time the server makes (`receivedAt`, `connectedAt`,
//! `lastHeartbeat`): RFC 3339 in UTC with milliseconds and `Z`, e.g.
//! `2026-11-26T14:03:07.512Z`. An event's own `timestamp` is the sender's and keeps the
//! precision it was sent with. Times read from clients (an event's `timestamp`, a query's
//! `since` and `until`) are held to one rule, [`parse_rfc3339`].

use chrono::{DateTime, Datelike, NaiveDateTime, SecondsFormat, Utc};

/// Why a client's time is refused; the message follows the time as quoted by the caller
/// (`timestamp "…" has no time zone; …`).
#[derive(Debug, thiserror::Error)]
pub enum TimeError {
    /// Not RFC 3339 at all.
    #[error("is not an RFC 3339 time; expected e.g. 2024-01-15T10:30:00Z")]
    NotRfc3339,
    /// An offset written `+0100`, as `date +%z` prints it: RFC 3339 writes `+01:00`.
    #[error("has its offset without a colon ({0}); RFC 3339 writes it {1}")]
    OffsetWithoutColon(String, String),
    /// A date and time without `Z` or an offset.
    #[error("has no time zone; add Z (UTC) or an offset such as +02:00")]
    NoZone,
    /// More fractional digits than nanoseconds.
    #[error(
        "has {0} fractional digits; at most nine (nanoseconds) are kept, so send nine or fewer"
    )]
    TooPrecise(usize),
    /// Second 60, which no stored time can hold.
    #[error(
        "is a leap second (second 60), which is stored nowhere; send :59 with its fraction, or the next second"
    )]
    LeapSecond,
    /// Before 0000-01-01T00:00:00Z in UTC (shown), which RFC 3339 cannot write.
    #[error(
        "is before the year 0000 once its offset is applied ({0}), which RFC 3339 cannot write back; send a time from 0000-01-01T00:00:00Z on"
    )]
    BeforeYearZero(String),
    /// After 9999-12-31T23:59:59.999999999Z in UTC (shown), which RFC 3339 cannot write.
    #[error(
        "is after the year 9999 once its offset is applied ({0}), which RFC 3339 cannot write back; send a time up to 9999-12-31T23:59:59Z"
    )]
    AfterYear9999(String),
}

/// A client's RFC 3339 time in UTC: with a zone, at most nine fractional digits, no leap
/// second, from year 0000 to 9999 (UTC), so that every time accepted can be stored and written
/// back as it was meant.
pub fn parse_rfc3339(raw: &str) -> Result<DateTime<Utc>, TimeError> {
    let t = DateTime::parse_from_rfc3339(raw).map_err(|_| {
        if NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S%.f").is_ok() {
            TimeError::NoZone
        } else if let Some((zone, fixed)) = offset_without_colon(raw) {
            // Said only when the colon is all it lacks: a leap second stays a leap second.
            let whole = format!("{}{fixed}", &raw[..raw.len() - zone.len()]);
            match parse_rfc3339(&whole) {
                Ok(_) => TimeError::OffsetWithoutColon(zone, fixed),
                Err(other) => other,
            }
        } else {
            TimeError::NotRfc3339
        }
    })?;
    // "YYYY-MM-DDTHH:MM:SS" is 19 characters; a fraction follows its dot.
    let digits = raw
        .get(19..)
        .and_then(|r| r.strip_prefix('.'))
        .map_or(0, |r| r.chars().take_while(char::is_ascii_digit).count());
    if digits > 9 {
        return Err(TimeError::TooPrecise(digits));
    }
    if t.timestamp_subsec_nanos() >= 1_000_000_000 {
        return Err(TimeError::LeapSecond);
    }
    let t = t.to_utc();
    let shown = || t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    if t.year() < 0 {
        return Err(TimeError::BeforeYearZero(shown()));
    }
    if t.year() > 9999 {
        return Err(TimeError::AfterYear9999(shown()));
    }
    Ok(t)
}

/// `raw`'s offset and how RFC 3339 writes it, when `raw` is a valid time but for the colon its
/// offset lacks (`…+0100`).
fn offset_without_colon(raw: &str) -> Option<(String, String)> {
    let (head, zone) = raw.split_at_checked(raw.len().checked_sub(5)?)?;
    let (sign, digits) = zone.split_at_checked(1)?;
    if !matches!(sign, "+" | "-") || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let fixed = format!("{sign}{}:{}", &digits[..2], &digits[2..]);
    DateTime::parse_from_rfc3339(&format!("{head}{fixed}"))
        .is_ok()
        .then(|| (zone.to_string(), fixed))
}

/// A query's bound, `micros` since the epoch, as an answer echoes it: to the microsecond it
/// was compared at, and with three digits, as the server's own times, when it is a whole
/// millisecond.
pub fn format_bound(micros: i64) -> String {
    let t = DateTime::from_timestamp_micros(micros).unwrap_or_default();
    let digits = if micros % 1000 == 0 {
        SecondsFormat::Millis
    } else {
        SecondsFormat::Micros
    };
    t.to_rfc3339_opts(digits, true)
}

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
    use super::*;

    #[test]
    fn client_times_are_held_to_one_rule() {
        let refused = |raw: &str| parse_rfc3339(raw).unwrap_err().to_string();
        assert!(refused("2026-11-26T14:03:07").contains("no time zone"));
        assert_eq!(
            refused("2024-01-15T10:30:00+0100"),
            "has its offset without a colon (+0100); RFC 3339 writes it +01:00"
        );
        assert!(refused("2024-01-15T10:30:00.5-0530").ends_with("writes it -05:30"));
        assert!(refused("2016-12-31T23:59:60+0100").contains("leap second"));
        assert!(refused("2024-01-15+0100").contains("not an RFC 3339"));
        assert!(refused("2024-01-15T10:30:00é100").contains("not an RFC 3339"));
        assert!(refused("yesterday").contains("not an RFC 3339"));
        assert!(refused("2026-11-26T14:03:07.1234567891Z").contains("10 fractional"));
        assert!(refused("2016-12-31T23:59:60Z").contains("leap second"));
        assert!(refused("0000-01-01T00:00:00+01:00").contains("-0001-12-31T23:00:00Z"));
        assert!(refused("9999-12-31T23:59:59-23:59").contains("after the year 9999"));
        assert!(parse_rfc3339("9999-12-31T23:59:59Z").is_ok());
        assert_eq!(
            parse_rfc3339("2026-11-26T14:03:07.123456789+01:00").unwrap(),
            parse_rfc3339("2026-11-26T13:03:07.123456789Z").unwrap()
        );
    }

    #[test]
    fn bounds_are_echoed_to_the_microsecond() {
        let at = parse_rfc3339("2026-11-26T13:03:07.0005Z")
            .unwrap()
            .timestamp_micros();
        assert_eq!(format_bound(at), "2026-11-26T13:03:07.000500Z");
        assert_eq!(format_bound(at - 500), "2026-11-26T13:03:07.000Z");
    }

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
