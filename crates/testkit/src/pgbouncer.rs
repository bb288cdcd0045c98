//! PgBouncer (Debian package `pgbouncer`) in session mode, trusting local clients: the pooler
//! people put in front of a database, or of the cloud's PostgreSQL port. Run as `postgres` when
//! root (it refuses root); stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::pg_cluster::{as_server_user, give_to_server_user};

/// A running PgBouncer. It is stopped through its pid file, since the `runuser` in front of it
/// (as root) does not pass signals on.
pub struct Bouncer {
    child: Child,
    pidfile: PathBuf,
    /// Its loopback port.
    pub port: u16,
    /// Its log file.
    pub log: PathBuf,
}

impl Bouncer {
    /// Starts PgBouncer in `dir` (handed to the server user), serving database `name` from
    /// `server` (a `[databases]` value: `host=… port=… dbname=… user=… password=…`) to the
    /// client user `client` without a password, with `extra` lines in its `[pgbouncer]` section.
    pub fn start(
        dir: &Path,
        name: &str,
        server: &str,
        client: &str,
        extra: &str,
    ) -> Result<Bouncer, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let users = dir.join("users.txt");
        let (log, pidfile) = (dir.join("pgbouncer.log"), dir.join("pgbouncer.pid"));
        let ini = dir.join("pgbouncer.ini");
        let written = std::fs::write(&users, format!("\"{client}\" \"\"\n")).and_then(|()| {
            std::fs::write(
                &ini,
                format!(
                    "[databases]\n{name} = {server}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}\npool_mode = session\nlog_connections = 0\nlog_disconnections = 0\nlogfile = {}\npidfile = {}\n{extra}",
                    users.display(),
                    log.display(),
                    pidfile.display(),
                ),
            )
        });
        written.map_err(|e| format!("cannot write pgbouncer's files in {}: {e}", dir.display()))?;
        give_to_server_user(dir);
        let child = as_server_user("pgbouncer")
            .arg(&ini)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run pgbouncer (Debian package pgbouncer): {e}"))?;
        let bouncer = Bouncer {
            child,
            pidfile,
            port,
            log,
        };
        for _ in 0..400 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(bouncer);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err(format!("pgbouncer did not listen on {port}"))
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.pidfile) {
            let _ = Command::new("kill").args(["-TERM", pid.trim()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
