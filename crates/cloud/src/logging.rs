//! Log setup: JSON lines by default (`timestamp`, `level`, `message`, fields), text for humans.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::time::ChronoUtc;

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// The levels `--log-level` takes alone.
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Reads `--log-level`: a level, or comma-separated filter directives each of which is a
/// level or `TARGET=LEVEL` (`info,h2=warn`). A bare word that is not a level would read as a
/// target and silence every other log line, errors included: `warnn` is refused instead.
pub fn parse_level(value: &str) -> Result<String, String> {
    let expected = "expected one of debug, info, warn, error (or trace, off), or directives like `info,h2=warn`";
    for directive in value.split(',') {
        let directive = directive.trim();
        let level = directive
            .rsplit_once('=')
            .map_or(directive, |(_, level)| level);
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
            return Err(format!("{directive:?} is not a log level: {expected}"));
        }
    }
    EnvFilter::try_new(value)
        .map(|_| value.to_string())
        .map_err(|e| format!("{e}: {expected}"))
}

/// Installs the global subscriber. `level` is what [`parse_level`] accepted.
pub fn init(format: LogFormat, level: &str, to_stderr: bool) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let timer = ChronoUtc::new("%Y-%m-%dT%H:%M:%S%.3fZ".into());
    // A log that cannot be written (stdout a closed pipe) is dropped, not reported on stderr:
    // that report panics when stderr is closed too, and the task that logged would die with
    // it (the signal handler's, say, leaving SIGTERM unheard).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_timer(timer)
        .with_target(false)
        .log_internal_errors(false);
    let result = match (format, to_stderr) {
        (LogFormat::Json, false) => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        (LogFormat::Json, true) => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_writer(std::io::stderr)
            .try_init(),
        // Colour only for a person at a terminal, never escape codes in a redirected file.
        (LogFormat::Text, false) => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
        (LogFormat::Text, true) => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .try_init(),
    };
    let _ = result;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives_are_taken_and_typos_refused() {
        for good in [
            "info",
            "WARN",
            "debug",
            "info,h2=warn",
            "cloud=debug",
            "off",
        ] {
            assert_eq!(parse_level(good).as_deref(), Ok(good), "{good}");
        }
        for bad in ["warnn", "inf", "", "warning", "info,h2", "h2=loud"] {
            let err = parse_level(bad).unwrap_err();
            assert!(err.contains("is not a log level"), "{bad}: {err}");
        }
    }
}
