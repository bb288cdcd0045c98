//! The public listeners: a deep accept backlog, and a cap on each listener's connections that
//! follows the process's open-file limit.

use tokio::net::TcpListener;

/// Most open connections per listener; beyond its cap a listener stops accepting until one
/// closes (the kernel's backlog holds the rest), so a flood of connections is bounded.
const MAX_CONNECTIONS: usize = 10_000;

/// Connections the kernel completes and queues while a listener is not accepting (at its cap,
/// or in a burst). The kernel clamps it to `net.core.somaxconn` (4,096 on current Linux); the
/// usual default of 128 turns a burst of a few hundred connections into SYN retries, a second
/// or more each.
const LISTEN_BACKLOG: u32 = 4_096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, so a restarted server
/// gets its port back at once).
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// File descriptors kept out of the listeners' caps: storage connections, the SQLite files,
/// TLS and CA files, logs.
const RESERVED_FDS: u64 = 128;

/// Fewest connections a listener's cap allows.
const MIN_CONNECTIONS: usize = 16;

/// Raises the soft open-file limit to the hard one; `Err((limit, needed))` when even that
/// leaves fewer than [`RESERVED_FDS`] plus [`MIN_CONNECTIONS`] for two listeners: below it
/// storage cannot open its files and `accept` fails with EMFILE, so `serve` refuses to start
/// rather than run without working.
pub(super) fn enough_open_files() -> Result<(), (u64, u64)> {
    let needed = RESERVED_FDS + 2 * MIN_CONNECTIONS as u64;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < needed => Err((limit, needed)),
        _ => Ok(()),
    }
}

/// Raises the soft open-file limit to the hard one (as Go and nginx setups do: the soft default
/// of 1,024 is far below what a server needs), then caps each of `listeners` so that their
/// connections together stay [`RESERVED_FDS`] under it: accepting does not fail with EMFILE,
/// and storage can still open a connection ([`enough_open_files`] refused a limit too low for
/// that at start). Warns when the cap is well below the usual one.
pub(super) fn connection_cap(listeners: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(cause = %e, "cannot read the open-file limit; assuming 1024");
            1024
        }
    };
    let per_listener = limit.saturating_sub(RESERVED_FDS) / listeners.max(1) as u64;
    let cap = usize::try_from(per_listener)
        .unwrap_or(MAX_CONNECTIONS)
        .clamp(MIN_CONNECTIONS, MAX_CONNECTIONS);
    if cap < MAX_CONNECTIONS * 9 / 10 {
        tracing::warn!(
            open_file_limit = limit,
            connections_per_listener = cap,
            "the open-file limit caps connections below {MAX_CONNECTIONS} per listener; raise the hard limit (`ulimit -Hn`, systemd LimitNOFILE=) to allow more"
        );
    }
    cap
}
