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

/// Installs the global subscriber. `level` is a level (`info`) or an `EnvFilter` directive.
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
