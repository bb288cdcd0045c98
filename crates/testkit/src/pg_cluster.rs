//! A throwaway PostgreSQL cluster that requires SCRAM over TCP, made with the machine's
//! `initdb` for one test and removed after it: the tests of databases through the bridge need
//! a server whose authentication is real (the machine's own server trusts everyone).
//! PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres` user.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::tls::TestCa;

/// The cluster's login (its superuser), whose password the bridge's entry holds.
pub const USER: &str = "app";
/// `USER`'s password.
pub const PASSWORD: &str = "db-SECRET-password-7";
/// A database created in every cluster.
pub const DATABASE: &str = "orders";

/// A running cluster; stopped and deleted on drop.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// The TCP port on 127.0.0.1.
    pub port: u16,
    /// With `ssl = on`: the CA that signed the server's certificate (for `sslrootcert`).
    pub ca_file: Option<PathBuf>,
}

/// The newest installed PostgreSQL's binaries.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries (Debian package postgresql) in /usr/lib/postgresql")
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("an initdb under /usr/lib/postgresql/*/bin")
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// A command for `program` as the `postgres` user when this process is root (PostgreSQL and
/// PgBouncer refuse to run as root), as itself otherwise.
pub fn as_server_user(program: impl AsRef<std::ffi::OsStr>) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Hands `path` (recursively) to the `postgres` user when this process is root, so that a
/// server run by [`as_server_user`] may read it.
pub fn give_to_server_user(path: &Path) {
    if is_root() {
        ok(
            Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(path)
                .output()
                .unwrap(),
            "chown",
        );
    }
}

/// Runs a server binary, as `postgres` when this process is root.
fn run(bin: &Path, args: &[&str]) -> Output {
    let mut cmd = as_server_user(bin);
    cmd.args(args).env("LC_ALL", "C.UTF-8");
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()))
}

fn ok(out: Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PgCluster {
    /// Starts a cluster that requires SCRAM-SHA-256 for TCP; with `ssl`, it serves TLS with
    /// a certificate for `localhost` from a test CA and refuses plain TCP.
    pub fn start(ssl: bool) -> PgCluster {
        Self::start_sized(ssl, 40)
    }

    /// [`PgCluster::start`] with the server's `max_connections`.
    pub fn start_sized(ssl: bool, max_connections: u32) -> PgCluster {
        Self::start_full(ssl, max_connections, None)
    }

    /// A cluster without TLS whose `pg_hba.conf` TCP lines are `hba` (after a trusted local
    /// socket), such as `host all legacy 127.0.0.1/32 md5`.
    pub fn start_with_hba(hba: &str) -> PgCluster {
        Self::start_full(false, 40, Some(hba))
    }

    fn start_full(ssl: bool, max_connections: u32, tcp_hba: Option<&str>) -> PgCluster {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("pg-cluster-")
            .tempdir()
            .expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&pwfile, std::fs::Permissions::from_mode(0o644)).unwrap();
        ok(
            run(
                &bin.join("initdb"),
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-U",
                    USER,
                    &format!("--pwfile={}", pwfile.display()),
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "--no-instructions",
                ],
            ),
            "initdb",
        );
        let mut ca_file = None;
        let mut conf = String::from(
            "listen_addresses = '127.0.0.1'\npassword_encryption = 'scram-sha-256'\nfsync = off\nsynchronous_commit = off\n",
        );
        conf.push_str(&format!("max_connections = {max_connections}\n"));
        conf.push_str(&format!(
            "unix_socket_directories = '{}'\n",
            dir.path().display()
        ));
        let custom = tcp_hba.map(|lines| format!("local all all trust\n{lines}\n"));
        let hba = if let Some(custom) = &custom {
            custom.as_str()
        } else if ssl {
            let ca = TestCa::new();
            ca_file = Some(ca.write_pem(dir.path(), "db-ca.pem"));
            let (cert, key) = ca.server_pem("localhost");
            let (cert_path, key_path) = (data.join("server.crt"), data.join("server.key"));
            write_as_server(&cert_path, &cert);
            write_as_server(&key_path, &key);
            conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
            "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhostnossl all all 127.0.0.1/32 reject\n"
        } else {
            "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
        };
        write_as_server(&data.join("pg_hba.conf"), hba);
        let mut last = String::new();
        for _ in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            let mut with_port = conf.clone();
            with_port.push_str(&format!("port = {port}\n"));
            write_as_server(&data.join("postgresql.auto.conf"), &with_port);
            let out = run(
                &bin.join("pg_ctl"),
                &[
                    "-D",
                    data.to_str().unwrap(),
                    "-l",
                    dir.path().join("log").to_str().unwrap(),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
            );
            if out.status.success() {
                let cluster = PgCluster {
                    dir,
                    bin,
                    port,
                    ca_file,
                };
                cluster.psql_local(&format!("CREATE DATABASE {DATABASE}"));
                return cluster;
            }
            last = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
        }
        panic!("the PostgreSQL cluster did not start in 10 attempts:\n{last}");
    }

    /// Runs `sql` as the superuser over the cluster's Unix socket (trusted), on `orders`
    /// once it exists.
    pub fn psql_local(&self, sql: &str) -> String {
        let db = if sql.starts_with("CREATE DATABASE") {
            "postgres"
        } else {
            DATABASE
        };
        let out = Command::new("psql")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", self.dir.path().to_str().unwrap()])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .output()
            .expect("psql (Debian package postgresql-client)");
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The directory of the cluster's Unix socket (trusted: no password).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

/// Writes a file in the data directory, owned by the server's user and private to it.
fn write_as_server(path: &Path, contents: &str) {
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    give_to_server_user(path);
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = run(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }
}
