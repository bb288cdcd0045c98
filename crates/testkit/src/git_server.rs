//! A real Git smart-HTTP server for tests: nginx → fcgiwrap → `git http-backend`, the stock
//! deployment of git-http-backend(1). It is not a Rust shim on purpose: the bridge must be
//! tested against what forges really do — authentication enforced in front of git (401 with a
//! `WWW-Authenticate` challenge), chunked push bodies, streamed (unbuffered) packs, protocol v2
//! via the `Git-Protocol` header, shallow and partial clones — not against our idea of them.
//! Needs `apt-get install nginx-light fcgiwrap git`; everything lives in a temp prefix.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod git_cli;

pub use git_cli::git;
use git_cli::{COMMITTER, fast_import, run};

const INSTALL: &str = "apt-get install nginx-light fcgiwrap git";

/// What the server's nginx demands before `git http-backend` runs, as a forge would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitAuth {
    /// Anonymous: everything is served.
    None,
    /// HTTP Basic with this user and password.
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
    /// `Authorization: Bearer` with this token.
    Bearer(String),
}

/// A real Git server: nginx and fcgiwrap in front of `git http-backend`, on an ephemeral
/// port, with its repositories in a temporary directory; stopped when dropped.
pub struct GitServer {
    prefix: tempfile::TempDir,
    repos: PathBuf,
    port: u16,
    nginx: Option<Child>,
    fcgiwrap: Option<Child>,
}

const CONF: &str = r#"daemon off; master_process on; worker_processes 2; user root;
pid @P@/nginx.pid; error_log @P@/error.log info;
events { worker_connections 512; }
http {
    log_format git '$remote_addr "$request" $status $body_bytes_sent user=$remote_user proto=$http_git_protocol';
    access_log @P@/access.log git;
    # Every compiled-in temp path, or nginx creates it under /var/lib/nginx.
    client_body_temp_path @P@/tmp/body; fastcgi_temp_path @P@/tmp/fastcgi;
    proxy_temp_path @P@/tmp/proxy; scgi_temp_path @P@/tmp/scgi; uwsgi_temp_path @P@/tmp/uwsgi;
    @MAP@
    server {
        listen 127.0.0.1:@PORT@;
        client_max_body_size 0;
        # A forge that moved a repository: on this server, and to another host.
        location ~ ^/moved/(.*)$ { return 301 http://127.0.0.1:@PORT@/$1$is_args$args; }
        location ~ ^/away/(.*)$ { return 301 http://git.internal.example/$1$is_args$args; }
        location / {
            @AUTH@
            fastcgi_pass unix:@P@/fcgiwrap.sock;
            fastcgi_buffering off;
            fastcgi_request_buffering off;
            fastcgi_param SCRIPT_FILENAME @BACKEND@;
            fastcgi_param GATEWAY_INTERFACE CGI/1.1;
            fastcgi_param SERVER_PROTOCOL $server_protocol;
            fastcgi_param REQUEST_METHOD $request_method;
            fastcgi_param QUERY_STRING $query_string;
            fastcgi_param CONTENT_TYPE $content_type if_not_empty;
            fastcgi_param CONTENT_LENGTH $content_length if_not_empty;
            fastcgi_param REMOTE_ADDR $remote_addr;
            fastcgi_param REMOTE_USER $remote_user if_not_empty;
            fastcgi_param PATH_INFO $uri;
            fastcgi_param GIT_PROJECT_ROOT @P@/repos;
            fastcgi_param GIT_HTTP_EXPORT_ALL 1;
            fastcgi_param GIT_PROTOCOL $http_git_protocol if_not_empty;
            fastcgi_param GIT_CONFIG_NOSYSTEM 1;
            fastcgi_param GIT_CONFIG_COUNT 1;
            fastcgi_param GIT_CONFIG_KEY_0 safe.directory;
            fastcgi_param GIT_CONFIG_VALUE_0 *;
        }
    }
}
"#;

const BASIC: &str = r#"auth_basic "git"; auth_basic_user_file @P@/htpasswd;"#;
const BEARER_MAP: &str = r#"map $http_authorization $bearer_ok { default 0; "Bearer @T@" 1; }"#;
const BEARER: &str = r#"if ($bearer_ok = 0) {
                add_header WWW-Authenticate 'Bearer realm="git"' always;
                return 401;
            }"#;

/// Refuses what would need escaping in nginx.conf or htpasswd.
fn plain(s: &str) -> &str {
    let bad = |c: char| !c.is_ascii_graphic() || "\"'\\$;{}:".contains(c);
    let msg = "GitServer credentials must be printable ASCII without quotes, `\\ $ ; { } :`";
    assert!(!s.is_empty() && !s.contains(bad), "{msg}: {s:?}");
    s
}

fn find_bin(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]);
    let found = dirs.map(|d| d.join(name)).find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("GitServer needs `{name}`, not found: {INSTALL}"))
}

/// `git http-backend` of the `git` on PATH, so that server and client versions match.
fn http_backend() -> PathBuf {
    let out = Command::new("git").arg("--exec-path").output();
    let out = out.unwrap_or_else(|e| panic!("GitServer: cannot run `git` ({e}): {INSTALL}"));
    let exec = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let dirs = [exec, "/usr/lib/git-core".into()];
    let found = dirs
        .map(|d| d.join("git-http-backend"))
        .into_iter()
        .find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("GitServer: git-http-backend not found: {INSTALL}"))
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Spawns `cmd` with stdout and stderr into the file `log`.
fn launch(cmd: &mut Command, log: PathBuf) -> Child {
    let out = std::fs::File::create(log).expect("GitServer: cannot create a log file");
    let err = out.try_clone().expect("GitServer: cannot dup a log file");
    let child = cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn();
    let bin = cmd.get_program().to_owned();
    child.unwrap_or_else(|e| panic!("GitServer: cannot start {bin:?} ({e}): {INSTALL}"))
}

/// Any HTTP response at all (401 included) means nginx serves.
fn http_answers(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = [0u8; 5];
    s.write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_ok()
        && s.read_exact(&mut head).is_ok()
        && &head == b"HTTP/"
}

/// Direct children of `pid`: fcgiwrap's preforked workers outlive a SIGTERM to their parent.
fn children_of(pid: u32) -> Vec<u32> {
    let kids = read(format!("/proc/{pid}/task/{pid}/children").into());
    kids.split_whitespace()
        .filter_map(|k| k.parse().ok())
        .collect()
}

fn signal(pid: u32, sig: &str) {
    let mut kill = Command::new("kill");
    let _ = kill
        .args(["-s", sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// SIGTERM to the process and its direct children, SIGKILL if still there after 5 s.
fn terminate(mut child: Child) {
    let kids = children_of(child.id());
    signal(child.id(), "TERM");
    kids.iter().for_each(|k| signal(*k, "TERM"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
        kids.iter().for_each(|k| signal(*k, "KILL"));
    }
    let _ = child.wait();
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let children = self.nginx.take().into_iter().chain(self.fcgiwrap.take());
        children.for_each(terminate);
    }
}

impl GitServer {
    /// Starts the server with `auth` and waits until it answers.
    pub fn start(auth: GitAuth) -> GitServer {
        let (nginx, fcgiwrap, backend) = (find_bin("nginx"), find_bin("fcgiwrap"), http_backend());
        let prefix = tempfile::Builder::new().prefix("git-server-").tempdir();
        let prefix = prefix.expect("GitServer: cannot create a temp dir");
        let p = prefix.path().to_path_buf();
        let repos = p.join("repos");
        for d in [&repos, &p.join("tmp")] {
            std::fs::create_dir_all(d).expect("GitServer: cannot create dirs in the temp dir");
        }
        let mut server = GitServer {
            prefix,
            repos,
            port: 0,
            nginx: None,
            fcgiwrap: None,
        };
        let (map, auth) = match &auth {
            GitAuth::None => (String::new(), ""),
            GitAuth::Basic { user, password } => {
                let line = format!("{}:{{PLAIN}}{}\n", plain(user), plain(password));
                std::fs::write(p.join("htpasswd"), line).expect("GitServer: write htpasswd");
                (String::new(), BASIC)
            }
            GitAuth::Bearer(token) => (BEARER_MAP.replace("@T@", plain(token)), BEARER),
        };

        let sock = p.join("fcgiwrap.sock");
        let mut cmd = Command::new(&fcgiwrap);
        cmd.args(["-c", "4", "-s"])
            .arg(format!("unix:{}", sock.display()));
        let fcgi = server
            .fcgiwrap
            .insert(launch(&mut cmd, p.join("fcgiwrap.log")));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            let exited = fcgi.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let log = read(p.join("fcgiwrap.log"));
                panic!("GitServer: fcgiwrap made no socket in 10 s (exit: {exited:?}): {log}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }

        for _attempt in 0..10 {
            let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
            let port = port.expect("GitServer: no free loopback port").port();
            let conf = CONF.replace("@MAP@", &map).replace("@AUTH@", auth);
            let conf = conf.replace("@BACKEND@", &backend.display().to_string());
            let conf = conf.replace("@PORT@", &port.to_string());
            let conf = conf.replace("@P@", &p.display().to_string());
            std::fs::write(p.join("nginx.conf"), conf).expect("GitServer: write nginx.conf");
            let _ = std::fs::remove_file(p.join("error.log"));
            let mut cmd = Command::new(&nginx);
            cmd.arg("-p").arg(&p).arg("-e").arg(p.join("error.log"));
            cmd.arg("-c").arg(p.join("nginx.conf"));
            let child = server.nginx.insert(launch(&mut cmd, p.join("nginx.out")));
            let pid = child.id().to_string();
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + Duration::from_secs(10);
            let exit = loop {
                // nginx writes its pid file only once it has bound the port: a stranger that took
                // the port in between could answer HTTP too.
                if read(p.join("nginx.pid")).trim() == pid && http_answers(addr) {
                    server.port = port;
                    return server;
                }
                if let Ok(Some(status)) = child.try_wait() {
                    break status;
                }
                if Instant::now() > deadline {
                    let log = read(p.join("error.log"));
                    panic!("GitServer: nginx not ready on {addr} in 10 s:\n{log}");
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let errors = server.error_log() + &read(p.join("nginx.out"));
            if !errors.contains("Address already in use") {
                panic!("GitServer: nginx exited ({exit}):\n{errors}");
            }
        }
        panic!(
            "GitServer: no free port in 10 attempts:\n{}",
            server.error_log()
        );
    }

    /// `http://127.0.0.1:PORT`: the server root a bridge's Git source names.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the bare repositories live (the server's root).
    pub fn repos_dir(&self) -> &Path {
        &self.repos
    }

    /// nginx's error log so far, for a failing test's message.
    pub fn error_log(&self) -> String {
        read(self.prefix.path().join("error.log"))
    }

    /// `ADDR "METHOD URI PROTO" STATUS BYTES user=REMOTE_USER proto=GIT_PROTOCOL_HEADER`
    pub fn access_log(&self) -> String {
        read(self.prefix.path().join("access.log"))
    }

    /// A bare repository at `repos_dir/path` with `commits` commits on `main`; it allows
    /// filters, any-SHA1 wants and pushes (refusing pushes is the bridge's job).
    pub fn create_repo(&self, path: &str, commits: usize) -> PathBuf {
        let repo = self.repos.join(path);
        std::fs::create_dir_all(&repo).expect("GitServer: create repo dir");
        run(&repo, &["init", "-q", "--bare", "-b", "main"]);
        for key in [
            "uploadpack.allowFilter",
            "uploadpack.allowAnySHA1InWant",
            "http.receivepack",
        ] {
            run(&repo, &["config", key, "true"]);
        }
        for i in 1..=commits {
            self.commit(path, &format!("file{i}.txt"), &format!("content {i}\n"));
        }
        repo
    }

    /// Commits `file` = `contents` on `main` of the bare repo; returns the commit sha.
    pub fn commit(&self, path: &str, file: &str, contents: &str) -> String {
        let repo = self.repos.join(path);
        let parent = git(&repo, &["rev-parse", "-q", "--verify", "main"], &[]);
        let from = ["", "from refs/heads/main^0\n"][usize::from(parent.status.success())];
        let (head, n) = ("commit refs/heads/main", contents.len());
        let data = format!("data <<EOF\n{file}\nEOF\n{from}M 100644 inline {file}\ndata {n}\n");
        let stream = format!("{head}\n{COMMITTER} now\n{data}{contents}\n");
        fast_import(&repo, &[], |w| w.write_all(stream.as_bytes()));
        run(&repo, &["rev-parse", "main"])
    }

    /// A bare repo with at least `mb` MiB of incompressible blobs (1 MiB each, 4 per commit),
    /// written in one pack by `git fast-import`.
    pub fn create_big_repo(&self, path: &str, mb: usize) -> PathBuf {
        let repo = self.create_repo(path, 0);
        let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ mb as u64;
        let mut blob = vec![0u8; 1 << 20];
        fast_import(&repo, &["-c", "fastimport.unpackLimit=0"], |w| {
            for i in 1..=mb.max(1) {
                for chunk in blob.chunks_mut(8) {
                    // splitmix64: fast, and zlib cannot compress it.
                    state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
                }
                write!(w, "blob\nmark :{i}\ndata {}\n", blob.len())?;
                w.write_all(&blob)?;
                if i % 4 == 0 || i == mb.max(1) {
                    write!(w, "commit refs/heads/main\n{COMMITTER} now\ndata 4\nbig\n")?;
                    for m in (i - 1) / 4 * 4 + 1..=i {
                        writeln!(w, "M 100644 :{m} big/{m:05}.bin")?;
                    }
                }
            }
            Ok(())
        });
        repo
    }
}
