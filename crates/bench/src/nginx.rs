//! The tunnel's peers, as the issue measured them: an nginx backend serving 1 KB of JSON behind
//! HTTP Basic, one nginx reverse proxy in front of it that injects the credentials, and two
//! nginx hops with TLS 1.3 between them (the second injects them). Each role is its own nginx
//! (one master, `worker_processes 1`) in a temp prefix, as separate machines would be separate
//! processes: one nginx with every role would serve them all from one worker, on one core.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine;

use crate::procs::free_port;

const INSTALL: &str = "apt-get install nginx-light";

/// The backend's user and password (the proxies and the bridge inject them).
pub const USER: &str = "bench";
pub const PASSWORD: &str = "bench-secret";

/// Every compiled-in temp path is set, or nginx would create them under /var/lib/nginx.
/// `keepalive_requests` is raised from 1,000 so that no client connection is closed mid-slice.
const HEAD: &str = r#"daemon off; master_process on; worker_processes 1; user root;
worker_rlimit_nofile 8192;
pid @P@/@N@.pid; error_log @P@/@N@.error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path @P@/tmp/@N@-body; proxy_temp_path @P@/tmp/@N@-proxy;
    fastcgi_temp_path @P@/tmp/@N@-fastcgi; scgi_temp_path @P@/tmp/@N@-scgi;
    uwsgi_temp_path @P@/tmp/@N@-uwsgi;
    keepalive_requests 1000000;
    @BODY@
}
"#;

/// `try_files` rather than `return 200 '…'`: `return` runs in the rewrite phase, before the
/// access phase, so `auth_basic` would never be checked. The open-file cache spares an
/// `open()` per request.
const BACKEND: &str = r#"open_file_cache max=16 inactive=1h; open_file_cache_valid 1h;
    server {
        listen 127.0.0.1:@PORT@ backlog=4096;
        root @P@/www;
        location / {
            auth_basic "bench"; auth_basic_user_file @P@/htpasswd;
            default_type application/json;
            try_files /data.json =404;
        }
    }"#;

/// A hop: keep-alive upstream (`@KEEPALIVE@` idle connections kept), HTTP/1.1
/// to it; `@SSL@` and `@TLS_IN@` to listen with TLS, `@TLS_OUT@` to speak TLS 1.3 to the next
/// hop (verifying its certificate: the handshake is rare on kept-alive connections anyway).
const HOP: &str = r#"upstream next { server 127.0.0.1:@UP@; keepalive @KEEPALIVE@; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:@PORT@ @SSL@ backlog=4096;
        @TLS_IN@
        location / {
            proxy_pass @SCHEME@://next;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            @AUTH@
            @TLS_OUT@
        }
    }"#;

const TLS_IN: &str =
    "ssl_certificate @P@/cert.pem; ssl_certificate_key @P@/key.pem; ssl_protocols TLSv1.3;";

const TLS_OUT: &str = "proxy_ssl_protocols TLSv1.3; proxy_ssl_session_reuse on;
            proxy_ssl_verify on; proxy_ssl_trusted_certificate @P@/cert.pem;
            proxy_ssl_name localhost;";

/// One nginx, stopped on drop.
pub struct Nginx {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Nginx {
    /// The pid of its one worker process (which serves every request; the master only
    /// supervises), or 0 when it has none: what the CPU accounting of a peer reads.
    pub fn worker_pid(&self) -> u32 {
        let Some(master) = self.child.as_ref().map(Child::id) else {
            return 0;
        };
        std::fs::read_to_string(format!("/proc/{master}/task/{master}/children"))
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        // SIGTERM, not SIGKILL: a killed master leaves its worker serving.
        let _ = Command::new("kill")
            .args(["-s", "TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The four nginx of the comparison; stopped before their prefix is deleted.
pub struct Peers {
    /// Serves `/` = 1 KB of JSON to Basic `USER:PASSWORD`.
    pub backend: Nginx,
    /// Plain HTTP in, credentials injected, keep-alive to the backend.
    pub one_hop: Nginx,
    /// Plain HTTP in, TLS 1.3 to `hop2`.
    pub two_hops: Nginx,
    /// TLS 1.3 in, credentials injected, keep-alive to the backend (behind `two_hops`).
    pub hop2: Nginx,
    _prefix: tempfile::TempDir,
}

/// The response body: 1,024 bytes of JSON, no `$`, quote or backslash.
pub fn json_body() -> String {
    let mut s = String::from("{\"items\":[");
    let mut i = 0;
    while s.len() < 960 {
        if i > 0 {
            s.push(',');
        }
        s += &format!("{{\"id\":{i},\"name\":\"item-{i:04}\",\"ok\":true}}");
        i += 1;
    }
    s += "],\"pad\":\"";
    let pad = 1024 - s.len() - 2;
    s += &"x".repeat(pad);
    s += "\"}";
    s
}

/// `Basic base64(USER:PASSWORD)`.
pub fn basic() -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    format!("Basic {b64}")
}

fn find_nginx() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]);
    let found = dirs.map(|d| d.join("nginx")).find(|p| p.is_file());
    found.with_context(|| format!("nginx not found (the peers of `bench tunnel`): {INSTALL}"))
}

/// Starts nginx `name` with `body` (inside `http {}`) on a free port.
fn start(nginx: &Path, prefix: &Path, name: &str, body: &str) -> Result<Nginx> {
    let port = free_port()?;
    let p = prefix.display().to_string();
    let conf = HEAD
        .replace("@BODY@", body)
        .replace("@PORT@", &port.to_string());
    let conf = conf.replace("@N@", name).replace("@P@", &p);
    let conf_path = prefix.join(format!("{name}.conf"));
    std::fs::write(&conf_path, conf)?;
    let log = std::fs::File::create(prefix.join(format!("{name}.out")))?;
    let child = Command::new(nginx)
        .arg("-p")
        .arg(prefix)
        .arg("-e")
        .arg(prefix.join(format!("{name}.error.log")))
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {} ({INSTALL})", nginx.display()))?;
    let pid = child.id().to_string();
    let mut server = Nginx {
        child: Some(child),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    // The pid file is written once the port is bound: then a connection reaches this nginx.
    loop {
        let pid_file = std::fs::read_to_string(prefix.join(format!("{name}.pid")));
        if pid_file.is_ok_and(|f| f.trim() == pid) && TcpStream::connect(server.addr).is_ok() {
            return Ok(server);
        }
        let exited = server
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        if exited.is_some() || Instant::now() > deadline {
            let log = |ext: &str| std::fs::read_to_string(prefix.join(format!("{name}.{ext}")));
            bail!(
                "nginx {name} did not start on port {port} ({exited:?}): {}{}",
                log("error.log").unwrap_or_default(),
                log("out").unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One HTTP/1.0 GET of `path` with an optional Authorization; (status, body bytes).
pub fn probe(addr: SocketAddr, path: &str, auth: Option<&str>) -> Result<(u16, usize)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(s, "GET {path} HTTP/1.0\r\nHost: bench\r\n{auth}\r\n")?;
    let mut res = Vec::new();
    s.read_to_end(&mut res)?;
    let text = String::from_utf8_lossy(&res);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status from {addr}: {text:.200}"))?;
    let body = text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len());
    Ok((status, body))
}

impl Peers {
    /// Starts the backend and the hops (each keeping `keepalive` idle upstream connections),
    /// and checks that the backend refuses an anonymous
    /// request and that each hop gets the 1 KB body without credentials from the client.
    pub fn start(keepalive: usize) -> Result<Peers> {
        let nginx = find_nginx()?;
        let prefix = tempfile::Builder::new().prefix("bench-nginx-").tempdir()?;
        let p = prefix.path();
        std::fs::create_dir_all(p.join("tmp"))?;
        std::fs::create_dir_all(p.join("www"))?;
        std::fs::write(p.join("www/data.json"), json_body())?;
        std::fs::write(p.join("htpasswd"), format!("{USER}:{{PLAIN}}{PASSWORD}\n"))?;
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "7"])
            .args([
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost",
            ])
            .arg("-keyout")
            .arg(p.join("key.pem"))
            .arg("-out")
            .arg(p.join("cert.pem"))
            .output()
            .context("running openssl (apt-get install openssl)")?;
        if !out.status.success() {
            bail!("openssl req: {}", String::from_utf8_lossy(&out.stderr));
        }
        let inject = format!("proxy_set_header Authorization \"{}\";", basic());
        let hop = |up: &Nginx, tls_in: bool, tls_out: bool, auth: bool| {
            HOP.replace("@UP@", &up.addr.port().to_string())
                .replace("@KEEPALIVE@", &keepalive.to_string())
                .replace("@SSL@", if tls_in { "ssl" } else { "" })
                .replace("@TLS_IN@", if tls_in { TLS_IN } else { "" })
                .replace("@SCHEME@", if tls_out { "https" } else { "http" })
                .replace("@TLS_OUT@", if tls_out { TLS_OUT } else { "" })
                .replace("@AUTH@", if auth { &inject } else { "" })
        };
        let backend = start(&nginx, p, "backend", BACKEND)?;
        let hop2 = start(&nginx, p, "hop2", &hop(&backend, true, false, true))?;
        let two_hops = start(&nginx, p, "hop1", &hop(&hop2, false, true, false))?;
        let one_hop = start(&nginx, p, "proxy", &hop(&backend, false, false, true))?;
        let peers = Peers {
            backend,
            one_hop,
            two_hops,
            hop2,
            _prefix: prefix,
        };
        let expect = |what: &str, got: (u16, usize), status: u16| {
            if got.0 != status || (status == 200 && got.1 != 1024) {
                bail!(
                    "{what}: status {} with {} bytes, expected {status}",
                    got.0,
                    got.1
                );
            }
            Ok(())
        };
        let addr = peers.backend.addr;
        expect("backend, anonymous", probe(addr, "/", None)?, 401)?;
        expect("backend, Basic", probe(addr, "/", Some(&basic()))?, 200)?;
        expect("one hop", probe(peers.one_hop.addr, "/", None)?, 200)?;
        expect("two hops", probe(peers.two_hops.addr, "/", None)?, 200)?;
        Ok(peers)
    }
}
