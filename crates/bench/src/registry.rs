//! `bench registry`: `skopeo copy` of an image with one big layer to a `dir:`, straight from a
//! real registry (Debian's `docker-registry`, htpasswd auth) and through `cloud` → TLS tunnel
//! → `bridge` → the same registry, interleaved, with the peak RSS of `cloud` and `bridge`
//! during the tunnelled pulls. A big layer is where a path that buffers blobs would show.

use std::process::Command;
use std::time::Instant;

use anyhow::{Result, bail};
use testkit::registry::{PASSWORD, RegistryServer, USER, oci_image};

use crate::procs::{bridge_token, start, start_bridge, status_mb};
use crate::sample::{RssSampler, median, print_memory, sync};

/// Options of `bench registry`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// MiB of random (incompressible) bytes in the image's one layer.
    #[arg(long, default_value_t = 200)]
    pub layer_mb: usize,
    /// Pulls each way, interleaved direct, tunnel, tunnel, direct, ….
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Unmeasured pulls each way first.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
}

/// One `skopeo copy` of `image` to a fresh `dir:` (deleted and synced after): seconds.
fn pull(image: &str, options: &[String]) -> Result<f64> {
    let dir = tempfile::Builder::new().prefix("bench-pull-").tempdir()?;
    let started = Instant::now();
    let out = Command::new("skopeo")
        .args(["--insecure-policy", "copy"])
        .args(options)
        .arg(image)
        .arg(format!("dir:{}", dir.path().join("image").display()))
        .output()?;
    let secs = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "skopeo copy {image}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(dir);
    sync();
    Ok(secs)
}

/// Runs the registry pull benchmark.
pub fn run(args: Args) -> Result<()> {
    let registry = RegistryServer::start();
    let work = tempfile::tempdir()?;
    let made = Instant::now();
    let content: Vec<u8> = {
        use rand::RngCore;
        let mut bytes = vec![0u8; args.layer_mb << 20];
        rand::rng().fill_bytes(&mut bytes);
        bytes
    };
    let image = oci_image(work.path(), "big.bin", &content);
    drop(content);
    registry.push(&image, "team/big", "1.0");
    sync();
    println!(
        "image team/big:1.0: one layer of {} MiB of random bytes, built and pushed in {:.1} s",
        args.layer_mb,
        made.elapsed().as_secs_f64()
    );

    let (cloud, _, api_key) = start(&[], None)?;
    let token = bridge_token(&cloud)?;
    let entry = format!(
        "registries:\n  - {{name: reg, url: {}, auth: {{username: {USER}, password: {PASSWORD}}}}}\n",
        registry.url
    );
    let bridge = start_bridge(&cloud, &token, &entry, 10)?;
    let pids = [("cloud", cloud.child.id()), ("bridge", bridge.pid())];
    let idle: Vec<f64> = pids.iter().map(|p| status_mb(p.1, "VmRSS:")).collect();
    let certs = cloud.dir.path().join("certs");
    std::fs::create_dir_all(&certs)?;
    std::fs::copy(cloud.dir.path().join("ca.pem"), certs.join("ca.crt"))?;

    let arms = [
        (
            "direct (docker-registry)",
            format!("docker://{}/team/big:1.0", registry.host),
            vec![
                "--src-tls-verify=false".to_string(),
                format!("--src-creds={USER}:{PASSWORD}"),
            ],
        ),
        (
            "tunnel (HTTPS to cloud)",
            format!("docker://localhost:{}/dc1/reg/team/big:1.0", cloud.tls_port),
            vec![
                format!("--src-cert-dir={}", certs.display()),
                format!("--src-creds=ci:{api_key}"),
            ],
        ),
    ];
    for _ in 0..args.warmup {
        for (_, image, options) in &arms {
            pull(image, options)?;
        }
    }
    println!(
        "\n== skopeo copy … dir:, {} runs each after {} unmeasured, interleaved",
        args.runs, args.warmup
    );
    let mut secs = vec![Vec::new(); arms.len()];
    let mut peak = vec![0.0f64; pids.len()];
    for i in 0..args.runs {
        let mut order: Vec<usize> = (0..arms.len()).collect();
        if i % 2 == 1 {
            order.reverse();
        }
        for k in order {
            let (label, image, options) = &arms[k];
            let sampler = RssSampler::start(pids.iter().map(|p| p.1).collect());
            let s = pull(image, options)?;
            let rss = sampler.stop();
            if k > 0 {
                for (p, m) in peak.iter_mut().zip(rss) {
                    *p = p.max(m);
                }
            }
            println!(
                "run {} {label:<26} {s:6.2} s {:7.1} MB/s",
                i + 1,
                (args.layer_mb << 20) as f64 / 1e6 / s
            );
            secs[k].push(s);
        }
    }
    let direct = median(&secs[0]);
    let tunnel = median(&secs[1]);
    println!(
        "\nmedian: direct {direct:.2} s, tunnel {tunnel:.2} s: the tunnel adds {:+.0}% (target: at most +50%)",
        100.0 * (tunnel / direct - 1.0)
    );
    print_memory(&pids, &idle, &peak, "pulls");
    println!(
        "(peak RSS: VmRSS sampled every 50 ms during the tunnelled pulls; target: each under 100 MB)"
    );
    drop(bridge);
    drop(cloud);
    drop(registry);
    Ok(())
}
