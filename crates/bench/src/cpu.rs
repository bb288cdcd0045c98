//! CPU accounting of one run: each process's CPU time per request, and the machine's idle
//! share. It turns a ratio target into a budget anyone can check: at R requests/s on C cores,
//! everything on the path (load generator included) may spend at most C / R seconds of CPU per
//! request.

/// `/proc` reports CPU times in USER_HZ ticks, fixed at 100 per second on Linux.
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU counters taken at the start of a run.
pub struct Meter {
    procs: Vec<(&'static str, u32)>,
    ticks: Vec<u64>,
    machine: (u64, u64),
}

/// CPU ticks spent during one or more runs: per process, and the machine's idle and total.
/// Runs add up, so that interleaved slices of one load are accounted together.
#[derive(Clone, Default)]
pub struct Ticks {
    procs: Vec<(&'static str, u64)>,
    idle: u64,
    total: u64,
}

/// What a run cost, per request.
pub struct Usage {
    /// Microseconds of CPU per request, by process.
    pub per_request_us: Vec<(&'static str, f64)>,
    /// Share of the whole host's CPU time nobody used, 0 to 1 (from `/proc/stat`: on a host
    /// with more cores than the benchmark may use, this overstates the idle share).
    pub idle: f64,
}

/// User plus system ticks of a process, its exited threads included.
fn process_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    // utime and stime are the stat file's 14th and 15th fields; `fields` starts at the 3rd.
    field(11).unwrap_or(0) + field(12).unwrap_or(0)
}

/// (idle, total) ticks of the whole machine.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    (idle, cpu.iter().sum())
}

impl Meter {
    /// Starts counting for these (name, pid) processes.
    pub fn start(procs: &[(&'static str, u32)]) -> Self {
        Meter {
            procs: procs.to_vec(),
            ticks: procs.iter().map(|(_, pid)| process_ticks(*pid)).collect(),
            machine: machine_ticks(),
        }
    }

    /// The ticks spent since `start`.
    pub fn stop(self) -> Ticks {
        let (idle, total) = machine_ticks();
        Ticks {
            procs: self
                .procs
                .iter()
                .zip(&self.ticks)
                .map(|((name, pid), before)| (*name, process_ticks(*pid).saturating_sub(*before)))
                .collect(),
            idle: idle.saturating_sub(self.machine.0),
            total: total.saturating_sub(self.machine.1),
        }
    }
}

impl Ticks {
    /// Adds another run's ticks (of the same processes) to these.
    pub fn add(&mut self, other: &Ticks) {
        if self.procs.is_empty() {
            self.procs = other.procs.iter().map(|(n, _)| (*n, 0)).collect();
        }
        for ((_, mine), (_, theirs)) in self.procs.iter_mut().zip(&other.procs) {
            *mine += theirs;
        }
        self.idle += other.idle;
        self.total += other.total;
    }

    /// The cost per request, for `requests` answered requests.
    pub fn per_request(&self, requests: usize) -> Usage {
        let n = requests.max(1) as f64;
        Usage {
            per_request_us: self
                .procs
                .iter()
                .map(|(name, ticks)| (*name, *ticks as f64 / TICKS_PER_SECOND * 1e6 / n))
                .collect(),
            idle: if self.total == 0 {
                0.0
            } else {
                self.idle as f64 / self.total as f64
            },
        }
    }
}

impl Usage {
    /// CPU per request of all the measured processes together, µs.
    pub fn total_us(&self) -> f64 {
        self.per_request_us.iter().map(|(_, us)| us).sum()
    }

    /// `total 52.1 µs (client 9.6, cloud 20.4, …), idle 13%`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .per_request_us
            .iter()
            .map(|(name, us)| format!("{name} {us:.1}"))
            .collect();
        format!(
            "{:.1} µs of CPU per request ({}), CPU idle {:.0}%",
            self.total_us(),
            parts.join(", "),
            100.0 * self.idle
        )
    }
}

/// Cores of this machine.
pub fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// The CPU per request that reaching `rate` requests/s allows on this machine, µs.
pub fn budget_us(rate: f64) -> f64 {
    cores() * 1e6 / rate
}
