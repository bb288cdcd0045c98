//! Query strings as the API's routes read them: one wording for every route's parameter
//! mistakes (unknown, missing, empty, not a time, an empty window), so that a script's typo
//! is said the same way wherever it lands.

use crate::problem::Problem;

/// A query parameter holding an RFC 3339 time, in µs; a 400 naming it when it is not one. Times
/// are compared to the microsecond (events keep up to nine fractional digits, but are indexed
/// by the microsecond): a bound's finer digits are dropped, as an event's are, so a client
/// writing nanoseconds (Go's RFC3339Nano) is read, not refused.
pub fn time_param(name: &str, value: Option<&str>) -> Result<Option<i64>, Problem> {
    value
        .map(|v| {
            crate::time::parse_rfc3339(v)
                .map_err(|why| {
                    // A `+` not percent-encoded reached us as a space.
                    let space = v.rsplit_once(' ').filter(|(time, zone)| {
                        zone.contains(':')
                            && matches!(
                                crate::time::parse_rfc3339(time),
                                Err(crate::time::TimeError::NoZone)
                            )
                    });
                    let why = match space {
                        Some((time, zone)) => format!(
                            "is not an RFC 3339 time; a + in a URL is a space: send {time}%2B{zone}"
                        ),
                        None => why.to_string(),
                    };
                    Problem::bad_request(format!("query parameter {name}={v:?} {why}"))
                })
                .map(|t| t.timestamp_micros())
        })
        .transpose()
}

/// A route's query string that does not read as its parameters, as a 400 in the words of the
/// other messages: the unknown or missing parameter by name, and the `known` ones.
pub fn query_problem(
    rejection: &axum::extract::rejection::QueryRejection,
    known: &[&str],
) -> Problem {
    let text = rejection.body_text();
    let quoted = |after: &str| {
        let start = text.find(after)? + after.len();
        let name = text[start..].strip_prefix('`')?;
        name.split_once('`').map(|(name, _)| name.to_string())
    };
    let known = known.join(", ");
    let detail = if let Some(name) = quoted("unknown field ") {
        format!("unknown query parameter {name:?}; known parameters: {known}")
    } else if let Some(name) = quoted("duplicate field ") {
        format!("query parameter {name:?} is given more than once; give it once")
    } else if let Some(name) = quoted("missing field ") {
        format!("query parameter {name:?} is required; known parameters: {known}")
    } else {
        let cause = text
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&text);
        format!("cannot read the query string ({cause}); known parameters: {known}")
    };
    Problem::bad_request(detail)
}

/// `service` and `environment` filters without surrounding whitespace, as events store those
/// names (docs/api.md), so that `service=%20api` finds `api`.
pub fn trim_names(service: &mut Option<String>, environment: &mut Option<String>) {
    for name in [service, environment].into_iter().flatten() {
        if name.trim().len() != name.len() {
            *name = name.trim().to_string();
        }
    }
}

/// The `service` and `environment` filters of a query, refused when empty: no event has an
/// empty one, so such a filter is a mistake (an unset variable in a script), said rather than
/// answered with an empty page or empty figures.
pub fn filter_params(service: Option<&str>, environment: Option<&str>) -> Result<(), Problem> {
    for (name, value, every) in [
        ("service", service, "a service"),
        ("environment", environment, "an environment"),
    ] {
        if value.is_some_and(|v| v.trim().is_empty()) {
            return Err(Problem::bad_request(format!(
                "query parameter {name} is empty; give {every}, or leave the parameter out for every {name}"
            )));
        }
    }
    Ok(())
}

/// A window `[since, until)` that holds nothing is a mistake in the query, said as such; two
/// bounds that differ only beyond the microsecond are said to be equal there.
pub fn window(since: Option<i64>, until: Option<i64>) -> Result<(), Problem> {
    const BEFORE: &str =
        "query parameter since must be before until (since is inclusive, until exclusive)";
    match (since, until) {
        (Some(since), Some(until)) if since == until => Err(Problem::bad_request(format!(
            "{BEFORE}; to the microsecond, at which times are compared, both are {}",
            chrono::DateTime::from_timestamp_micros(since)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        ))),
        (Some(since), Some(until)) if since > until => Err(Problem::bad_request(BEFORE)),
        _ => Ok(()),
    }
}

/// A route that takes no query parameters refuses any, as the routes that take some refuse
/// unknown ones: a misspelt filter never passes silently.
pub fn no_query(uri: &axum::http::Uri) -> Result<(), Problem> {
    match uri.query().filter(|q| !q.is_empty()) {
        None => Ok(()),
        Some(q) => {
            let name = q.split(['&', '=']).next().unwrap_or(q);
            Err(Problem::bad_request(format!(
                "unknown query parameter {name:?}: {} takes no query parameters",
                uri.path()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Page {
        limit: Option<u32>,
        service: String,
    }

    fn said(query: &str) -> String {
        let uri: axum::http::Uri = format!("/v1/events?{query}").parse().unwrap();
        let rejection = axum::extract::Query::<Page>::try_from_uri(&uri).unwrap_err();
        super::query_problem(&rejection, &["limit", "service"]).detail
    }

    #[test]
    fn a_query_mistake_names_the_parameter() {
        assert_eq!(
            said("service=a&limit=1&limit=2"),
            "query parameter \"limit\" is given more than once; give it once"
        );
        assert_eq!(
            said("service=a&limt=1"),
            "unknown query parameter \"limt\"; known parameters: limit, service"
        );
        assert_eq!(
            said("limit=1"),
            "query parameter \"service\" is required; known parameters: limit, service"
        );
    }

    #[test]
    fn a_bad_time_says_what_is_missing() {
        let said = |v| super::time_param("since", Some(v)).unwrap_err().detail;
        assert!(
            said("2024-01-15T10:00:00").contains("has no time zone; add Z"),
            "{}",
            said("2024-01-15T10:00:00")
        );
        assert!(
            said("2024-01-15T10:00:00 01:00").contains("send 2024-01-15T10:00:00%2B01:00"),
            "{}",
            said("2024-01-15T10:00:00 01:00")
        );
        assert_eq!(
            said("yesterday"),
            "query parameter since=\"yesterday\" is not an RFC 3339 time; expected e.g. 2024-01-15T10:30:00Z"
        );
        assert_eq!(
            super::time_param("since", Some("2024-01-15T10:00:00+01:00")).unwrap(),
            Some(1_705_309_200_000_000)
        );
        // Held to an event's rule: what ingest refuses is no bound either.
        assert!(said("2016-12-31T23:59:60Z").contains("leap second"));
        assert!(said("2026-11-30T01:00:00.1234567891Z").contains("10 fractional digits"));
        assert!(said("0000-01-01T00:00:00+01:00").contains("before the year 0000"));
    }
}
