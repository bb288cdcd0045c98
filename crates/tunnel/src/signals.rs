//! SIGTERM and Ctrl-C (and SIGHUP, a closed terminal), as both binaries stop on them: the
//! first signal drains, the second exits at once. Shared here because the cloud and the bridge
//! must agree on it, like the rest of this crate.

/// SIGTERM, Ctrl-C and SIGHUP, listened to from the start: a second signal sent the moment the
/// first was handled is not lost (a listener made after the first would miss it). SIGHUP is a
/// stop, not a reload: a terminal closed on a process run in the foreground sends it, and its
/// default action would end the process without draining or its last audit records. A process
/// started with SIGHUP ignored (`nohup`) keeps ignoring it.
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
    #[cfg(windows)]
    ctrl_c: tokio::signal::windows::CtrlC,
}

impl Signals {
    /// Starts listening; fails only when the OS refuses a signal handler.
    pub fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
                hangup: match hangup_ignored() {
                    true => None,
                    false => Some(signal(SignalKind::hangup())?),
                },
            })
        }
        #[cfg(windows)]
        {
            Ok(Signals {
                ctrl_c: tokio::signal::windows::ctrl_c()?,
            })
        }
    }

    /// Waits for the next SIGTERM, Ctrl-C or SIGHUP.
    pub async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
            Some(_) = async {
                match &mut self.hangup {
                    Some(hangup) => hangup.recv().await,
                    None => std::future::pending().await,
                }
            } => {}
        }
        #[cfg(windows)]
        self.ctrl_c.recv().await;
    }
}

/// Whether this process was started with SIGHUP ignored (`nohup`), as Linux shows it in
/// `/proc/self/status` (`SigIgn`, a hex mask whose lowest bit is signal 1, SIGHUP). Elsewhere
/// it is taken as not ignored.
#[cfg(unix)]
fn hangup_ignored() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & 1 == 1)
}
