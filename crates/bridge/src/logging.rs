//! Logs: one JSON object per line with the documented fields (`timestamp` UTC with `Z`, `level`,
//! `message`, `bridge_name`, `version`) plus the event's own fields; or text for humans.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogFormat, LogLevel};

/// Formats each event as the JSON log entry of docs/bridge.md.
struct SeedJson {
    bridge_name: String,
}

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            Value::String(format!("{value:?}")),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
}

impl<S, N> FormatEvent<S, N> for SeedJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        );
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warn",
            tracing::Level::INFO => "info",
            _ => "debug",
        };
        line.insert("level".into(), Value::String(level.into()));
        let message = fields
            .0
            .remove("message")
            .unwrap_or(Value::String(String::new()));
        line.insert("message".into(), message);
        line.insert(
            "bridge_name".into(),
            Value::String(self.bridge_name.clone()),
        );
        line.insert("version".into(), Value::String(crate::VERSION.into()));
        for (k, v) in fields.0 {
            line.entry(k).or_insert(v);
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Installs the global subscriber (stdout).
pub fn init(format: LogFormat, level: LogLevel, bridge_name: &str) {
    let directive = format!("{},h2=warn,hyper=warn,rustls=warn", level.as_str());
    let filter = EnvFilter::try_new(directive).unwrap_or_else(|_| EnvFilter::new("info"));
    // A log that cannot be written (stdout a closed pipe) is dropped, not reported on stderr:
    // that report panics when stderr is closed too, and the task that logged would die with
    // it (the signal handler's, say, leaving SIGTERM unheard).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Json => builder
            .event_format(SeedJson {
                bridge_name: bridge_name.to_string(),
            })
            .try_init(),
        // Colour only for a person at a terminal, never escape codes in a redirected file.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
    };
}
