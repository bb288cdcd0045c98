//! `bench`: load generators that print numbers (never timed tests). They start the real
//! `cloud` and `bridge` binaries that sit next to this one:
//!
//! ```text
//! cargo build --release --workspace
//! target/release/bench ingest --pg-url postgres://postgres@127.0.0.1:5432/test
//! target/release/bench tunnel
//! target/release/bench git
//! target/release/bench dashboard
//! target/release/bench correlate --pg-url postgres://postgres@127.0.0.1:5432/test
//! target/release/bench db
//! target/release/bench audit
//! ```

mod audit;
mod correlate;
mod cpu;
mod dashboard;
mod db;
mod fill;
mod git;
mod ingest;
mod load;
mod nginx;
mod peers;
mod procs;
mod registry;
mod sample;
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
    /// Requests/s, latency, bulk throughput and RSS through the bridge tunnel, and the tunnel
    /// against nginx hops (needs nginx and wrk).
    Tunnel(tunnel::Args),
    /// `git clone --mirror` of a big repository, direct and through the tunnel, with the peak
    /// RSS of cloud and bridge (needs git, nginx and fcgiwrap).
    Git(git::Args),
    /// `skopeo copy` of an image with a big layer, direct and through the tunnel, with the
    /// peak RSS of cloud and bridge (needs docker-registry, skopeo and htpasswd).
    Registry(registry::Args),
    /// The suspects of an alert among 100,000 deployments and 100,000 alerts.
    Correlate(correlate::Args),
    /// `pgbench -S` through the cloud's PostgreSQL port, directly and through PgBouncer, and
    /// the RSS of 100 idle sessions (needs pgbench and pgbouncer).
    Db(db::Args),
    /// The dashboard's timeline and services pages over a million events (SQLite).
    Dashboard(dashboard::Args),
    /// The tunnel benchmark's internal HTTP server, alone (also handy for `wrk`).
    Upstream(upstream::Args),
    /// How long the bridge's statement audit takes to mask 64 KiB texts, ordinary ones and
    /// ones made to be read slowly.
    Audit(audit::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Ingest(args) => ingest::run(args).await,
        Command::Tunnel(args) => tunnel::run(args).await,
        Command::Git(args) => git::run(args),
        Command::Registry(args) => registry::run(args),
        Command::Dashboard(args) => dashboard::run(args).await,
        Command::Correlate(args) => correlate::run(args).await,
        Command::Db(args) => db::run(args).await,
        Command::Upstream(args) => upstream::run(args).await,
        Command::Audit(args) => audit::run(args),
    }
}
