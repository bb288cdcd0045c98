//! `bench`: load generators that print numbers (never timed tests). They start the real
//! `cloud` and `bridge` binaries that sit next to this one:
//!
//! ```text
//! cargo build --release --workspace
//! target/release/bench ingest --pg-url postgres://postgres@127.0.0.1:5432/test
//! target/release/bench tunnel
//! ```

mod cpu;
mod ingest;
mod load;
mod procs;
mod tunnel;
mod upstream;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Benchmarks of the Signals API and the bridge tunnel")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Signals ingestion on SQLite (and PostgreSQL with --pg-url).
    Ingest(ingest::Args),
    /// Requests/s, latency, bulk throughput and RSS through the bridge tunnel.
    Tunnel(tunnel::Args),
    /// The tunnel benchmark's internal HTTP server, alone (also handy for `wrk`).
    Upstream(upstream::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Ingest(args) => ingest::run(args).await,
        Command::Tunnel(args) => tunnel::run(args).await,
        Command::Upstream(args) => upstream::run(args).await,
    }
}
