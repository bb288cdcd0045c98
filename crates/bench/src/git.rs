//! `bench git`: `git clone --mirror` of a big repository straight from a real Git server
//! (testkit's nginx + fcgiwrap + `git http-backend`, Basic auth) and through `cloud` → TLS
//! tunnel → `bridge` → the same server, interleaved, with the peak RSS of `cloud` and `bridge`
//! during the tunnelled clones. A clone is what users wait for, and a big pack is where a
//! forwarding path that buffers or copies too much would show, in time and in memory.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use testkit::git_server::{GitAuth, GitServer, git};

use crate::cpu::Meter;
use crate::procs::{Bridge, Server, bridge_token, start, start_bridge, start_from, status_mb};
use crate::sample::{RssSampler, median, print_memory, sync};

/// Options of `bench git`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// MiB of random (incompressible) 1 MiB blobs in the repository: the pack is about as big.
    #[arg(long, default_value_t = 200)]
    pub repo_mb: usize,
    /// Clones each way, interleaved direct, tunnel, tunnel, direct, … (a clone's time swings
    /// by ±30% on a 2-core VM: 9 runs give a steadier median).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Unmeasured clones each way first (cold page cache, processes' first large transfer).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Also clone through the cloud's plain-HTTP port: what is left of the tunnel's cost
    /// once the client's own TLS (which the direct clone does not do) is taken out.
    #[arg(long)]
    pub also_plain: bool,
    /// `git -c` settings for the clones through the cloud's HTTPS port, e.g.
    /// `http.version=HTTP/1.1` (git's curl otherwise negotiates HTTP/2 with the cloud).
    #[arg(long)]
    pub tunnel_config: Vec<String>,
    /// Async worker threads of `cloud` (TOKIO_WORKER_THREADS); default its own.
    #[arg(long)]
    pub cloud_threads: Option<usize>,
    /// A directory holding another build's `cloud` and `bridge`: its tunnel becomes one more
    /// arm of the same interleaved runs, so two builds are compared in the same minutes (a
    /// figure from another run is inside the VM's drift).
    #[arg(long)]
    pub compare_bin_dir: Option<std::path::PathBuf>,
}

/// Bytes of the `*.pack` files of a (bare) repository.
fn pack_bytes(repo: &Path) -> Result<u64> {
    let dir = repo.join("objects/pack");
    let mut total = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if entry.path().extension().is_some_and(|e| e == "pack") {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

/// One mirror clone into a fresh temp dir (deleted and synced after); (seconds, bytes of the
/// cloned pack).
fn clone(url: &str, config: &[&str]) -> Result<(f64, u64)> {
    let dir = tempfile::Builder::new().prefix("bench-clone-").tempdir()?;
    let mut args = Vec::new();
    for c in config {
        args.extend(["-c", c]);
    }
    args.extend(["clone", "--mirror", "--quiet", url, "m.git"]);
    let started = Instant::now();
    let out = git(dir.path(), &args, &[]);
    let secs = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "git clone --mirror failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let bytes = pack_bytes(&dir.path().join("m.git"))?;
    drop(dir);
    sync();
    Ok((secs, bytes))
}

/// One way to reach the repository, and its measured clones.
struct Arm {
    label: String,
    url: String,
    /// `git -c` settings (the cloud's CA for HTTPS).
    config: Vec<String>,
    /// The tunnel's processes (`cloud`, `bridge`), metered during this arm's clones; none
    /// for the direct clone.
    pids: Vec<(&'static str, u32)>,
    secs: Vec<f64>,
    /// The peak RSS of each of `pids` during this arm's clones.
    peak: Vec<f64>,
}

impl Arm {
    fn new(label: impl Into<String>, url: String, config: Vec<String>) -> Self {
        Arm {
            label: label.into(),
            url,
            config,
            pids: Vec::new(),
            secs: Vec::new(),
            peak: Vec::new(),
        }
    }

    fn metering(mut self, pids: Vec<(&'static str, u32)>) -> Self {
        self.peak = vec![0.0; pids.len()];
        self.pids = pids;
        self
    }

    fn clone_once(&self) -> Result<(f64, u64)> {
        let config: Vec<&str> = self.config.iter().map(String::as_str).collect();
        clone(&self.url, &config)
    }
}

/// Runs the Git clone benchmark.
pub fn run(args: Args) -> Result<()> {
    let token = format!("tok{}", uuid::Uuid::new_v4().simple());
    let server = GitServer::start(GitAuth::Basic {
        user: "x-access-token".into(),
        password: token.clone(),
    });
    let made = Instant::now();
    let repo = server.create_big_repo("big.git", args.repo_mb);
    let pack = pack_bytes(&repo)?;
    sync();
    println!(
        "repository big.git: {:.1} MB of packed objects ({} MiB of random blobs asked), made in {:.1} s",
        pack as f64 / 1e6,
        args.repo_mb,
        made.elapsed().as_secs_f64()
    );

    let sources = format!(
        "sources:\n  - {{name: code, url: {}, auth: {{type: token, token: {token}}}}}\n",
        server.url()
    );
    let this = Tunnel::start(None, args.cloud_threads, &sources)?;
    let other = match &args.compare_bin_dir {
        Some(dir) => Some(Tunnel::start(Some(dir), args.cloud_threads, &sources)?),
        None => None,
    };
    let pids = this.pids();
    let idle: Vec<f64> = pids.iter().map(|p| status_mb(p.1, "VmRSS:")).collect();

    let direct = format!(
        "http://x-access-token:{token}@127.0.0.1:{}/big.git",
        server.port()
    );
    let mut arms = vec![
        Arm::new("direct (nginx + git)", direct, Vec::new()),
        this.arm("tunnel (HTTPS to cloud)", &args.tunnel_config)?,
    ];
    if let Some(other) = &other {
        let label = format!("tunnel ({})", other.cloud.bin_dir.display());
        arms.push(other.arm(label, &args.tunnel_config)?);
    }
    if args.also_plain {
        let plain = format!(
            "http://x:{}@{}/v1/bridges/dc1/git/code/big.git",
            this.api_key, this.cloud.addr
        );
        arms.push(
            Arm::new("tunnel (plain HTTP to cloud)", plain, Vec::new()).metering(pids.clone()),
        );
    }
    for _ in 0..args.warmup {
        for arm in &arms {
            arm.clone_once()?;
        }
    }
    println!(
        "\n== git clone --mirror, {} runs each after {} unmeasured, interleaved (A B …, … B A, …)",
        args.runs, args.warmup
    );
    for i in 0..args.runs {
        let mut order: Vec<usize> = (0..arms.len()).collect();
        if i % 2 == 1 {
            order.reverse();
        }
        for k in order {
            let arm = &mut arms[k];
            let sampler = RssSampler::start(arm.pids.iter().map(|p| p.1).collect());
            let meter = Meter::start(&arm.pids);
            let (secs, bytes) = arm.clone_once()?;
            let usage = meter.stop().per_request(1);
            let rss = sampler.stop();
            for (p, m) in arm.peak.iter_mut().zip(rss) {
                *p = p.max(m);
            }
            let mut cpu = String::new();
            for (name, us) in &usage.per_request_us {
                cpu += &format!(", {name} {:.2} s CPU", us / 1e6);
            }
            println!(
                "run {} {:<29} {secs:6.2} s {:7.1} MB/s  host idle {:.0}%{cpu}",
                i + 1,
                arm.label,
                bytes as f64 / 1e6 / secs,
                100.0 * usage.idle
            );
            arm.secs.push(secs);
        }
    }
    let mb = pack as f64 / 1e6;
    println!(
        "\n{:<32} {:>9} {:>9} {:>10}",
        "git clone --mirror", "median s", "MB/s", "vs direct"
    );
    let dm = median(&arms[0].secs);
    for arm in &arms {
        let m = median(&arm.secs);
        println!(
            "{:<32} {m:>9.2} {:>9.1} {:>+9.0}%",
            arm.label,
            mb / m,
            100.0 * (m / dm - 1.0)
        );
    }
    let tm = median(&arms[1].secs);
    println!(
        "tunnel/direct {:.2}: the tunnel adds {:+.0}% (target: at most +25%)",
        tm / dm,
        100.0 * (tm / dm - 1.0)
    );
    if other.is_some() {
        println!(
            "this build/the other build {:.3} (clone time; below 1 is faster)",
            tm / median(&arms[2].secs)
        );
    }
    print_memory(&pids, &idle, &arms[1].peak, "clones");
    println!(
        "(peak RSS: VmRSS sampled every 50 ms during the tunnelled clones; target: each under 100 MB; pack {mb:.1} MB)"
    );
    drop(other);
    drop(this);
    drop(server);
    Ok(())
}

/// A `cloud` and a `bridge` (from `bin_dir`, or next to this binary) serving the Git server
/// as the source `code`.
struct Tunnel {
    // Declared first: the bridge stops before its cloud.
    bridge: Bridge,
    cloud: Server,
    api_key: String,
}

impl Tunnel {
    fn start(bin_dir: Option<&Path>, threads: Option<usize>, sources: &str) -> Result<Tunnel> {
        let (cloud, _, api_key) = match bin_dir {
            Some(dir) => start_from(dir, &[], threads)?,
            None => start(&[], threads)?,
        };
        let bridge_tok = bridge_token(&cloud)?;
        let bridge = start_bridge(&cloud, &bridge_tok, sources, 10)?;
        Ok(Tunnel {
            bridge,
            cloud,
            api_key,
        })
    }

    fn pids(&self) -> Vec<(&'static str, u32)> {
        vec![
            ("cloud", self.cloud.child.id()),
            ("bridge", self.bridge.pid()),
        ]
    }

    /// The arm that clones through this tunnel's HTTPS port, after a `git ls-remote` that
    /// proves the path works.
    fn arm(&self, label: impl Into<String>, extra_config: &[String]) -> Result<Arm> {
        let url = format!(
            "https://x:{}@localhost:{}/v1/bridges/dc1/git/code/big.git",
            self.api_key, self.cloud.tls_port
        );
        let ca = format!(
            "http.sslCAInfo={}",
            self.cloud.dir.path().join("ca.pem").display()
        );
        let ls = git(self.cloud.dir.path(), &["-c", &ca, "ls-remote", &url], &[]);
        if !ls.status.success() {
            bail!(
                "git ls-remote through the tunnel ({}) failed: {}",
                self.cloud.bin_dir.display(),
                String::from_utf8_lossy(&ls.stderr)
            );
        }
        let config = [vec![ca], extra_config.to_vec()].concat();
        Ok(Arm::new(label, url, config).metering(self.pids()))
    }
}
