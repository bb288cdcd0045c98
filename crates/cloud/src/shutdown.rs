//! One place that turns SIGTERM / Ctrl-C into a cancellation; a second signal exits at once.

use tokio_util::sync::CancellationToken;

/// A token cancelled at the first signal; the second signal ends the process (exit 1).
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let mut signals = match tunnel::signals::Signals::listen() {
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
