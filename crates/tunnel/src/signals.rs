//! SIGTERM and Ctrl-C, as both binaries stop on them: the first signal drains, the second exits
//! at once. Shared here because the cloud and the bridge must agree on it, like the rest of
//! this crate.

/// SIGTERM and Ctrl-C, listened to from the start: a second signal sent the moment the first
/// was handled is not lost (a listener made after the first would miss it).
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
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
            })
        }
        #[cfg(windows)]
        {
            Ok(Signals {
                ctrl_c: tokio::signal::windows::ctrl_c()?,
            })
        }
    }

    /// Waits for the next SIGTERM or Ctrl-C.
    pub async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(windows)]
        self.ctrl_c.recv().await;
    }
}
