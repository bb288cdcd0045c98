//! One place that turns SIGTERM / Ctrl-C into a cancellation; a second signal exits at once.

use tokio_util::sync::CancellationToken;

/// Waits for SIGTERM or Ctrl-C.
async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// A token cancelled at the first signal; the second signal ends the process (exit 1).
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        signal().await;
        tracing::info!("shutdown requested; draining (send the signal again to exit at once)");
        cancel.cancel();
        signal().await;
        tracing::warn!("second signal: exiting without draining");
        std::process::exit(1);
    });
    token
}
