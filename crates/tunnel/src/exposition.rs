//! The two text formats `/metrics` answers in, on both sides. prometheus-client writes
//! OpenMetrics, which Prometheus asks for first; a scrape that does not ask for it (curl, an
//! older scraper, a script that greps `# TYPE service_bridge_requests_total counter`) gets the
//! Prometheus text format 0.0.4, where a counter's family carries its `_total` name.

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The content type and the text to answer a scrape whose `Accept` is `accept`, from the
/// OpenMetrics text `encoded`.
pub fn negotiate(accept: Option<&str>, encoded: String) -> (&'static str, String) {
    if wants_openmetrics(accept) {
        (OPENMETRICS, encoded)
    } else {
        (PROMETHEUS_TEXT, to_prometheus_text(&encoded))
    }
}

/// Whether `accept` lists OpenMetrics (with a weight above zero).
fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.unwrap_or_default().split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let named = parts
            .next()
            .is_some_and(|t| t.eq_ignore_ascii_case("application/openmetrics-text"));
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
        });
        named && !refused
    })
}

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition: counters' families named
/// with `_total` as their samples are, info families as gauges named `_info`, `unknown` as
/// `untyped`; no `# UNIT` or `# EOF` lines.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let kinds: std::collections::HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let renamed = |name: &str| match kinds.get(name).copied() {
        Some("counter") => format!("{name}_total"),
        Some("info") => format!("{name}_info"),
        _ => name.to_string(),
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|l| l.split_once(' ')) {
            let kind = match kind {
                "info" => "gauge",
                "unknown" => "untyped",
                other => other,
            };
            out.push_str(&format!("# TYPE {} {kind}\n", renamed(name)));
        } else if let Some((name, help)) =
            line.strip_prefix("# HELP ").and_then(|l| l.split_once(' '))
        {
            // 0.0.4 escapes only `\` and a line feed in help texts.
            let help = help.replace("\\\"", "\"");
            out.push_str(&format!("# HELP {} {help}\n", renamed(name)));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENMETRICS_TEXT: &str = "# HELP service_bridge_requests Requests \\\"forwarded\\\".\n\
# TYPE service_bridge_requests counter\n\
service_bridge_requests_total 3\n\
# HELP bridge_streams_in_flight Streams.\n\
# TYPE bridge_streams_in_flight gauge\n\
bridge_streams_in_flight 1\n\
# HELP service_bridge_request_duration_seconds Time.\n\
# TYPE service_bridge_request_duration_seconds histogram\n\
# UNIT service_bridge_request_duration_seconds seconds\n\
service_bridge_request_duration_seconds_sum 0.5\n\
service_bridge_request_duration_seconds_count 3\n\
service_bridge_request_duration_seconds_bucket{le=\"+Inf\"} 3\n\
# HELP build Build.\n\
# TYPE build info\n\
build_info{version=\"1\"} 1\n\
# EOF\n";

    #[test]
    fn counters_are_named_with_total_and_open_metrics_lines_go() {
        let text = to_prometheus_text(OPENMETRICS_TEXT);
        assert_eq!(
            text,
            "# HELP service_bridge_requests_total Requests \"forwarded\".\n\
# TYPE service_bridge_requests_total counter\n\
service_bridge_requests_total 3\n\
# HELP bridge_streams_in_flight Streams.\n\
# TYPE bridge_streams_in_flight gauge\n\
bridge_streams_in_flight 1\n\
# HELP service_bridge_request_duration_seconds Time.\n\
# TYPE service_bridge_request_duration_seconds histogram\n\
service_bridge_request_duration_seconds_sum 0.5\n\
service_bridge_request_duration_seconds_count 3\n\
service_bridge_request_duration_seconds_bucket{le=\"+Inf\"} 3\n\
# HELP build_info Build.\n\
# TYPE build_info gauge\n\
build_info{version=\"1\"} 1\n"
        );
    }

    #[test]
    fn open_metrics_only_when_asked_for() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(wants_openmetrics(Some("Application/OpenMetrics-Text")));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some(
            "application/openmetrics-text;q=0, text/plain"
        )));
        assert_eq!(negotiate(None, OPENMETRICS_TEXT.into()).0, PROMETHEUS_TEXT);
    }
}
