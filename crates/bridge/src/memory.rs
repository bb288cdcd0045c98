//! The bridge's resident memory for `max_memory_mb`, read from `/proc/self/status` at most
//! every 250 ms rather than for every stream, which would add system calls to every request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How old a reading may be.
const MAX_AGE: Duration = Duration::from_millis(250);
/// `sampled_at` before the first reading.
const NEVER: u64 = u64::MAX;

/// A cached reading of this process's resident set size.
#[derive(Debug)]
pub struct MemoryGauge {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last reading, or [`NEVER`].
    sampled_at: AtomicU64,
    rss_mb: AtomicU64,
}

impl Default for MemoryGauge {
    fn default() -> Self {
        MemoryGauge {
            epoch: Instant::now(),
            sampled_at: AtomicU64::new(NEVER),
            rss_mb: AtomicU64::new(0),
        }
    }
}

impl MemoryGauge {
    /// Resident memory in MiB, at most 250 ms old (0 where `/proc` is missing).
    pub fn rss_mb(&self) -> u64 {
        let now = self.epoch.elapsed().as_millis() as u64;
        let at = self.sampled_at.load(Ordering::Relaxed);
        if at == NEVER || now.saturating_sub(at) >= MAX_AGE.as_millis() as u64 {
            self.rss_mb
                .store(read_rss_mb().unwrap_or(0), Ordering::Relaxed);
            self.sampled_at.store(now, Ordering::Relaxed);
        }
        self.rss_mb.load(Ordering::Relaxed)
    }
}

/// A warning when `max_memory_mb` is no more than the bridge's own memory now: every stream
/// would then be refused (`bridge check` prints it, `run` logs it at start).
pub fn limit_warning(max_memory_mb: u64) -> Option<String> {
    let rss = read_rss_mb().filter(|rss| *rss >= max_memory_mb)?;
    Some(format!(
        "max_memory_mb {max_memory_mb} is no more than the bridge's own memory ({rss} MB) before any stream: every stream would be refused; raise it"
    ))
}

/// `VmRSS` of `/proc/self/status`, in kB whatever the page size (`statm` counts pages, which
/// are 64 KiB on some aarch64 kernels).
fn read_rss_mb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_plausible_size() {
        let mb = MemoryGauge::default().rss_mb();
        assert!(
            (1..10_000).contains(&mb),
            "resident memory of a test: {mb} MiB"
        );
    }
}
