//! One place that turns SIGTERM / Ctrl-C into a cancellation; a second signal exits at once.

use tokio_util::sync::CancellationToken;

/// SIGTERM and Ctrl-C, listened to from the start: a second signal sent the moment the first
/// was handled is not lost.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(windows)]
    ctrl_c: tokio::signal::windows::CtrlC,
}

impl Signals {
    fn listen() -> std::io::Result<Self> {
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

    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(windows)]
        self.ctrl_c.recv().await;
    }
}

/// A token cancelled at the first signal; the second signal ends the process (exit 1).
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let mut signals = match Signals::listen() {
        Ok(signals) => signals,
        Err(e) => {
            tracing::error!(cause = %e, "cannot listen for SIGTERM or Ctrl-C: this process can only be stopped with SIGKILL, without draining");
            return token;
        }
    };
    let cancel = token.clone();
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("shutdown requested; draining (send the signal again to exit at once)");
        cancel.cancel();
        signals.next().await;
        tracing::warn!("second signal: exiting without draining");
        std::process::exit(1);
    });
    token
}
