//! The `cloud` binary: parse the command line, set up logs, run, map errors to exit codes
//! (0 success, 2 usage or configuration, 1 anything else).

use std::process::ExitCode;
use std::time::Duration;

use cloud::admin::{self, AdminError};
use cloud::cli::{
    BridgeTokenCommand, Cli, Command, DbProxyArgs, KeyCommand, OrgCommand, RoleArg, ServeArgs,
    StorageArgs, UserCommand, WebhookCommand,
};
use cloud::metrics::Metrics;
use cloud::server::{self, ServeOptions};
use cloud::storage::{Backend, Credential, OpenMode, Store};

/// mimalloc: the request path allocates many small, short-lived objects, which glibc's malloc
/// serves at a high cost in CPU under load (docs/benchmarks.md has the measurement).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse_or_exit();
    let serving = matches!(cli.command, Command::Serve(_) | Command::DbProxy(_));
    let level = cli
        .log_level
        .clone()
        .unwrap_or_else(|| if serving { "info" } else { "warn" }.to_string());
    cloud::logging::init(cli.log_format, &level, !serving);
    let workers = match worker_threads() {
        Ok(workers) => workers,
        Err(why) => {
            eprintln!("error: {why}");
            return ExitCode::from(2);
        }
    };
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli.command));
    // Storage is flushed by now; a name lookup still blocking a thread (a stuck resolver, for
    // a webhook) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("error: {message}");
            for note in cloud::cli::env_notes(&message) {
                eprintln!("{note}");
            }
            ExitCode::from(2)
        }
        Err(Failure::Other(err)) => {
            let said = said_once(&err);
            // The log's collector hears of a server's failure; an admin command's log and its
            // error would both go to the terminal, which hears it once.
            if serving {
                tracing::error!(cause = %said, "cloud failed");
            }
            eprintln!("error: {said}");
            ExitCode::from(1)
        }
    }
}

/// An error and its causes, each said once: a cause whose words the message before it already
/// holds (errors that quote their source) is left out.
fn said_once(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let words = cause.to_string();
        if !text.contains(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
    }
    text
}

/// Async worker threads: one per core but one (at least one), so that the busy threads that are
/// not workers (the SQLite writer, the kernel's network work for the tunnels' bytes) have a
/// core rather than competing with a worker on each; and the relay's HTTP/2 connection task
/// and its streams then share a thread, with no lock contention inside h2 (on 2 cores, more
/// events and tunnelled requests per second than two workers, for fewer `/livez` a second:
/// docs/benchmarks.md). `TOKIO_WORKER_THREADS=N` (tokio's own variable) sets it. One worker
/// runs as tokio's current-thread runtime, as the bridge does: the same one thread, without
/// the work-stealing scheduler's hand-offs.
/// A value that is no whole number from 1 up is refused, not ignored.
fn worker_threads() -> Result<usize, String> {
    match std::env::var("TOKIO_WORKER_THREADS") {
        Err(_) => Ok(std::thread::available_parallelism()
            .map_or(1, |n| n.get().saturating_sub(1).max(1))),
        Ok(v) => v.trim().parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
            format!(
                "the environment variable TOKIO_WORKER_THREADS is {v:?}: give a whole number of async worker threads from 1 up, or unset it for one per core but one"
            )
        }),
    }
}

enum Failure {
    Usage(String),
    Other(anyhow::Error),
}

impl From<AdminError> for Failure {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Usage(m) => Failure::Usage(m),
            other => Failure::Other(other.into()),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

/// Warns when the link's default base (`--listen`, no `--public-url`) has nothing answering:
/// a `serve` on another address gets a link that would not open, and its one-time token would
/// be spent on nothing. Said only above a link made, not above an error.
fn warn_if_unreachable(link: &cloud::cli::LinkArgs, made: &Result<String, AdminError>) {
    if link.public_url.is_some() || made.is_err() {
        return;
    }
    let Ok(base) = admin::link_base(None, &link.listen) else {
        return;
    };
    let address = base.trim_start_matches("https://");
    let answers = std::net::ToSocketAddrs::to_socket_addrs(address)
        .ok()
        .and_then(|mut all| all.next())
        .is_some_and(|to| {
            std::net::TcpStream::connect_timeout(&to, std::time::Duration::from_millis(500)).is_ok()
        });
    if !answers {
        eprintln!(
            "warning: nothing answers at {address}: if `cloud serve` listens elsewhere, give this command the same --listen (or --public-url), or the link below will not open"
        );
    }
}

fn backend(storage: &StorageArgs) -> Result<Backend, Failure> {
    Backend::choose(&storage.data_dir, storage.database_url.as_deref())
        .map_err(|e| Failure::Usage(e.to_string()))
}

async fn open(storage: &StorageArgs) -> Result<Store, Failure> {
    Store::open(&backend(storage)?, Metrics::new(), OpenMode::MustExist)
        .await
        .map_err(|e| match e {
            e if e.is_configuration() => Failure::Usage(e.to_string()),
            e => Failure::Other(e.into()),
        })
}

async fn run(command: Command) -> Result<(), Failure> {
    let mut problems = command.value_problems();
    if !problems.is_empty() {
        // The storage is looked at too, so that one run says everything that is wrong.
        if let Some(storage) = command.storage() {
            match open(storage).await {
                Ok(store) => store.close().await,
                Err(Failure::Usage(why)) => problems.push(why),
                Err(Failure::Other(_)) => {}
            }
        }
        return Err(Failure::Usage(cloud::cli::together(
            &problems,
            "; nothing was done",
        )));
    }
    let command = match command {
        Command::Serve(args) => return serve(args).await,
        Command::DbProxy(args) => return db_proxy(args).await,
        admin => admin,
    };
    // Every admin command names its storage (`Command::storage`); the links of the user
    // commands are checked before it is opened.
    let Some(storage) = command.storage().cloned() else {
        return Err(Failure::Usage("this command takes no storage".into()));
    };
    if let Command::User(
        UserCommand::Create { link, .. } | UserCommand::ResetPassword { link, .. },
    ) = &command
    {
        admin::link_base(link.public_url.as_deref(), &link.listen)?;
    }
    let store = open(&storage).await?;
    let output = admin_command(&store, command).await;
    store.close().await;
    println!("{}", output?);
    Ok(())
}

/// Runs one admin command on the opened `store`: what it prints, or why it failed.
async fn admin_command(store: &Store, command: Command) -> Result<String, AdminError> {
    let actor = cloud::storage::Actor::cli();
    let actor = &actor;
    match command {
        Command::Serve(_) | Command::DbProxy(_) => {
            unreachable!("serve and db-proxy return before any admin command")
        }
        Command::Org(OrgCommand::Create { slug, .. }) => {
            admin::create_org(store, actor, &slug).await
        }
        Command::Org(OrgCommand::List { output, .. }) => admin::list_orgs(store, output).await,
        Command::SignalKey(KeyCommand::Create { org, name, .. }) => {
            admin::create_signal_key(store, actor, &org, name.as_deref()).await
        }
        Command::ApiKey(KeyCommand::Create { org, name, .. }) => {
            admin::create_api_key(store, actor, &org, name.as_deref()).await
        }
        Command::SignalKey(KeyCommand::List { org, output, .. }) => {
            admin::list_keys(store, &org, Credential::SignalKey, output).await
        }
        Command::ApiKey(KeyCommand::List { org, output, .. }) => {
            admin::list_keys(store, &org, Credential::ApiKey, output).await
        }
        Command::BridgeToken(BridgeTokenCommand::List { org, output, .. }) => {
            admin::list_keys(store, &org, Credential::BridgeToken, output).await
        }
        Command::SignalKey(KeyCommand::Revoke { org, id, .. }) => {
            admin::revoke_key(store, actor, &org, Credential::SignalKey, &id).await
        }
        Command::ApiKey(KeyCommand::Revoke { org, id, .. }) => {
            admin::revoke_key(store, actor, &org, Credential::ApiKey, &id).await
        }
        Command::BridgeToken(BridgeTokenCommand::Create { org, name, .. }) => {
            admin::create_bridge_token(store, actor, &org, &name).await
        }
        Command::BridgeToken(BridgeTokenCommand::Revoke { org, name, id, .. }) => {
            admin::revoke_bridge_tokens(store, actor, &org, &name, id.as_deref()).await
        }
        Command::User(UserCommand::Create {
            org,
            email,
            role,
            link,
            ..
        }) => {
            let role = match role {
                RoleArg::Admin => cloud::storage::Role::Admin,
                RoleArg::Member => cloud::storage::Role::Member,
            };
            let (public_url, listen) = (link.public_url.as_deref(), &link.listen);
            let out =
                admin::create_user(store, actor, &org, &email, role, public_url, listen).await;
            warn_if_unreachable(&link, &out);
            out
        }
        Command::User(UserCommand::ResetPassword { email, link, .. }) => {
            let (public_url, listen) = (link.public_url.as_deref(), &link.listen);
            let out = admin::reset_password(store, actor, &email, public_url, listen).await;
            warn_if_unreachable(&link, &out);
            out
        }
        Command::Webhook(WebhookCommand::Set {
            org,
            url,
            webhook_allow_private,
            bridge_release,
            ..
        }) => {
            let url = admin::WebhookUrl {
                url: &url,
                allow_private: webhook_allow_private,
                release: &bridge_release,
            };
            admin::set_webhook(store, actor, &org, url).await
        }
        Command::Webhook(WebhookCommand::Remove { org, .. }) => {
            admin::remove_webhook(store, actor, &org).await
        }
    }
}

async fn db_proxy(args: DbProxyArgs) -> Result<(), Failure> {
    let api_key = match std::env::var("CLOUD_API_KEY") {
        Ok(key) if !key.trim().is_empty() => Ok(key.trim().to_string()),
        Ok(_) => Err(true),
        // Bytes that are no text: kept (as U+FFFD) for the check that names them.
        Err(std::env::VarError::NotUnicode(raw)) => Ok(raw.to_string_lossy().trim().to_string()),
        Err(std::env::VarError::NotPresent) => Err(false),
    };
    let options = cloud::pgwire::proxy::ProxyOptions {
        api_url: args.api_url,
        ca_file: args.ca_file,
        bridge: args.bridge,
        database: args.database,
        listen: args.listen,
        api_key,
    };
    cloud::pgwire::proxy::run(options, cloud::shutdown::on_signal())
        .await
        .map_err(|e| Failure::Usage(e.to_string()))
}

/// `cloud serve`. A data directory this start made and left empty (it failed before writing
/// anything: an unreachable database, say) is removed again; one with files stays.
async fn serve(args: ServeArgs) -> Result<(), Failure> {
    let dir = args.storage.data_dir.clone();
    let existed = dir.exists();
    let served = serve_with(args).await;
    if served.is_err() && !existed {
        let _ = std::fs::remove_dir(&dir);
    }
    served
}

async fn serve_with(args: ServeArgs) -> Result<(), Failure> {
    // Every mistake in the options, the files they name and the addresses is said at once.
    let mut problems: Vec<String> = Vec::new();
    let settings = args.settings().map_err(|p| problems.extend(p)).ok();
    let backend = Backend::choose(&args.storage.data_dir, args.storage.database_url.as_deref())
        .map_err(|e| problems.push(e.to_string()))
        .ok();
    let tls_files = args.tls_cert.clone().zip(args.tls_key.clone());
    let prepared = server::prepare(
        tls_files.as_ref(),
        args.client_ca.as_ref(),
        &args.storage.data_dir,
        backend.as_ref(),
    )
    .map_err(|p| problems.extend(p.iter().map(ToString::to_string)))
    .ok();
    let listeners = args.listen_addresses().map(|(tls, plain)| {
        let bind = |flag: &str, addr: std::net::SocketAddr| {
            cloud::server::listen(addr)
                .map_err(|e| format!("{flag} {addr}: cannot listen there: {e}"))
        };
        (
            bind("--listen", tls),
            plain.map(|addr| bind("--http-listen", addr)).transpose(),
        )
    });
    let (tls_listener, http_listener) = match listeners {
        Some((tls, plain)) => (
            tls.map_err(|e| problems.push(e)).ok(),
            plain.map_err(|e| problems.push(e)).ok(),
        ),
        None => (None, None),
    };
    let (Some(settings), Some(backend), Some(prepared), Some(tls_listener), Some(http_listener)) =
        (settings, backend, prepared, tls_listener, http_listener)
    else {
        return Err(Failure::Usage(cloud::cli::together(
            &problems,
            " with `cloud serve`'s options; nothing was started",
        )));
    };
    // Clients trust the cloud's own CA through this file, unless it serves the operator's.
    let own_ca = (args.tls_cert.is_none()).then(|| {
        let file = args.storage.data_dir.join("ca.pem");
        cloud::tls::OwnCa {
            file: std::path::absolute(&file)
                .unwrap_or(file)
                .display()
                .to_string(),
            names: ["localhost", "127.0.0.1", "::1"]
                .into_iter()
                .map(String::from)
                .chain(settings.tls_names.iter().map(|n| n.to_ascii_lowercase()))
                .collect(),
        }
    });
    let options = ServeOptions {
        backend,
        data_dir: args.storage.data_dir,
        tls_names: settings.tls_names,
        signal_rate_limit: settings.signal_rate_limit,
        ingest_memory: settings.ingest_memory_mb as usize * 1024 * 1024,
        drain_timeout: Duration::from_secs(settings.drain_timeout),
        header_read_timeout: Duration::from_secs(settings.header_read_timeout),
        forward_timeout: Duration::from_secs(settings.forward_timeout),
        publishing: cloud::app::Publishing {
            bridge_release: settings.bridge_release,
            public_url: settings.public_url,
            tls_port: tls_listener
                .local_addr()
                .map_or(settings.listen.port(), |a| a.port()),
            own_ca,
            webhook_allow_private: args.webhook_allow_private,
        },
        webhook_first_retry: Duration::from_secs_f64(settings.webhook_first_retry),
        webhook_allow_private: args.webhook_allow_private,
        metrics_token: settings.metrics_token,
    };
    let shutdown = cloud::shutdown::on_signal();
    server::run(options, prepared, tls_listener, http_listener, shutdown)
        .await
        .map_err(|e| match e {
            e @ (server::ServeError::TlsFiles(_)
            | server::ServeError::ClientCa(_)
            | server::ServeError::DataDir(_)
            | server::ServeError::DataDirIsFile(_)
            | server::ServeError::DataDirOfSqlite(_)
            | server::ServeError::CreateDataDir { .. }) => Failure::Usage(e.to_string()),
            server::ServeError::Storage(e) if e.is_configuration() => Failure::Usage(e.to_string()),
            e => Failure::Other(e.into()),
        })
}
