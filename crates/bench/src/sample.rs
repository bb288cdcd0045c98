//! What the transfer benchmarks (`bench git`, `bench registry`) share: the peak RSS of some
//! processes during a transfer, flushing dirty pages between runs, and medians.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::procs::{peak_rss_mb, status_mb};

/// Samples the VmRSS of some processes every 50 ms in a thread and keeps each one's maximum:
/// VmHWM is a lifetime peak, which start-up or an earlier phase could have set.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<f64>>,
}

impl RssSampler {
    /// Starts sampling `pids`.
    pub fn start(pids: Vec<u32>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut max = vec![0.0f64; pids.len()];
            loop {
                for (m, pid) in max.iter_mut().zip(&pids) {
                    *m = m.max(status_mb(*pid, "VmRSS:"));
                }
                if flag.load(Ordering::Relaxed) {
                    return max;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        RssSampler { stop, thread }
    }

    /// Stops; each process's largest VmRSS, in MB.
    pub fn stop(self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Flushes dirty pages: a clone writes as much as it receives, and the writeback of one run
/// (or of the repository's creation) would otherwise compete with the next.
pub fn sync() {
    let _ = std::process::Command::new("sync").status();
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The memory table: each process's idle RSS, its peak RSS during the `what` sampled, and its
/// lifetime peak (VmHWM).
pub fn print_memory(pids: &[(&str, u32)], idle: &[f64], peak: &[f64], what: &str) {
    println!(
        "{:<8} {:>9} {:>22} {:>14}",
        "process",
        "idle MB",
        format!("peak RSS, {what} MB"),
        "VmHWM MB"
    );
    for (k, (name, pid)) in pids.iter().enumerate() {
        println!(
            "{name:<8} {:>9.1} {:>22.1} {:>14.1}",
            idle[k],
            peak[k],
            peak_rss_mb(*pid)
        );
    }
}
