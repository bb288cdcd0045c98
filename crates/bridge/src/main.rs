//! The `bridge` binary: parse the command line, load and validate the configuration, run the
//! agent; exit 0 on success, 2 on a usage or configuration error, 1 otherwise.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The on-premise agent: an outbound tunnel to the service for declared internal resources.
#[derive(Debug, Parser)]
#[command(name = "bridge", version, about)]
struct Cli {
    /// Configuration file (YAML) of `run` (the default), `check` and `healthcheck`, as their
    /// own `--config` is; environment variables override it.
    #[arg(long, env = "SERVICE_BRIDGE_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent (the default).
    Run {
        /// Configuration file (YAML); environment variables override it.
        #[arg(long, env = "SERVICE_BRIDGE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Validate the configuration, then try the cloud (TLS and token) and each resource.
    Check {
        /// Configuration file (YAML); environment variables override it.
        #[arg(long, env = "SERVICE_BRIDGE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Ask a running bridge's `/health`: a container health check that needs no shell or curl.
    /// Exit 0 when it answers 200, 1 on 503 or no answer, 2 when health_check_port is 0 (no
    /// fixed port to ask) or the config cannot be read.
    Healthcheck {
        /// Configuration file (YAML); environment variables override it.
        #[arg(long, env = "SERVICE_BRIDGE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Audit log tools.
    #[command(subcommand)]
    Audit(AuditCommand),
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check the hash chain of an audit log (or of a log file with audit lines in it). Exit 0
    /// when intact (the last record's SHA-256 is printed; an empty file is ok with 0 records); 1
    /// naming the first bad line, when a file of other lines has no audit record, or when the
    /// --anchor record is gone; 2 for a malformed --anchor or a file that cannot be read
    /// (missing, a directory, no permission), so a script tells a mistyped path from tampering.
    Verify {
        /// The audit log (the config's `audit_log`), or a log with audit lines in it.
        file: PathBuf,
        /// The SHA-256 of a record, as an earlier verify printed it and kept elsewhere: that
        /// record must still be in the file, unaltered (so must every one before it).
        #[arg(long, value_name = "SHA256")]
        anchor: Option<String>,
    },
}

/// mimalloc: many small, short-lived allocations per forwarded stream.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Run { config: None }) {
        Command::Audit(AuditCommand::Verify { file, anchor }) => verify_audit(&file, anchor),
        Command::Check { config } => bridge::check::check(config.or(cli.config).as_deref()),
        Command::Healthcheck { config } => {
            bridge::healthcheck::healthcheck(config.or(cli.config).as_deref())
        }
        Command::Run { config } => bridge::run::run(config.or(cli.config).as_deref()),
    }
}

/// `bridge audit verify FILE [--anchor SHA256]`.
fn verify_audit(file: &std::path::Path, anchor: Option<String>) -> ExitCode {
    let anchor = anchor.map(|a| a.trim().to_ascii_lowercase());
    if let Some(a) = &anchor
        && (a.len() != 64 || !a.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        eprintln!(
            "--anchor: expected the 64 hex digits of a SHA-256, as `bridge audit verify` printed it, got {a:?}"
        );
        return ExitCode::from(2);
    }
    let checked = bridge::audit::verify(file).and_then(|summary| {
        bridge::audit::anchors(file, anchor.as_deref()).map(|found| (summary, found))
    });
    match checked {
        Ok((_, found)) if anchor.is_some() && found.anchored.is_none() => {
            eprintln!(
                "audit log {}: no audit record has the SHA-256 {}: the record it names was altered, or cut off with every record after it",
                file.display(),
                anchor.unwrap_or_default()
            );
            ExitCode::from(1)
        }
        // Lines, but none of them an audit record: most likely another file (the log).
        Ok((summary, _))
            if summary.records == 0 && std::fs::metadata(file).is_ok_and(|m| m.len() > 0) =>
        {
            eprintln!(
                "audit log {}: no audit record in it (lines with \"type\":\"audit\"); is it the file the config's audit_log names?",
                file.display()
            );
            ExitCode::from(1)
        }
        Ok((summary, found)) => {
            bridge::say!(
                "ok: {} audit record(s) in {} chain(s), none removed or altered",
                summary.records,
                summary.chains
            );
            if let Some(line) = summary.first_torn {
                bridge::say!(
                    "note: {} record(s) cut short by a crash or a full disk, first on line {line}, were skipped: the record after each follows the whole record before it",
                    summary.torn
                );
            }
            if let Some((line, start)) = found.anchored {
                bridge::say!(
                    "the anchored record is on line {line}, unaltered, as is every record of its chain from line {start}"
                );
            }
            if let Some(last) = &found.last {
                bridge::say!(
                    "last record's SHA-256: {last} (keep it elsewhere; `--anchor` it later to prove that its chain up to it was neither cut nor edited)"
                );
            }
            // An anchor vouches for its own chain only: the end of each, to keep them all.
            if found.chain_ends.len() > 1 {
                for (line, hash) in &found.chain_ends {
                    bridge::say!("chain ending on line {line}: last record's SHA-256 {hash}");
                }
            }
            ExitCode::SUCCESS
        }
        // The error names the file itself.
        Err(e @ bridge::audit::VerifyError::Read { .. }) => {
            eprintln!("audit log {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("audit log {}: {e}", file.display());
            ExitCode::from(1)
        }
    }
}
