//! Notifications to org webhooks (docs/notifications.md): when a connected bridge instance
//! runs a release older than the one this cloud ships, when the cloud starts shipping a newer
//! release, and when a new alert has a strong suspect (docs/correlation.md), each org with a
//! webhook gets a signed JSON POST. Notifications
//! are queued in storage and delivered with retries and back-off, so a receiver that is down,
//! or a restart of the cloud, loses none.
//!
//! One task does both halves every [`TICK`]: [`watch`] queues what is new, [`send`] starts
//! the attempts that are due, each recording its own outcome as it ends (an attempt outlives
//! the round, so a receiver that does not answer holds up nothing else). It reads the live
//! tunnels through [`LiveBridges`] and correlation's answers through [`Insight`], and never
//! imports those features.

pub mod guard;
mod send;
pub mod sign;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::insight::Insight;
use crate::live::LiveBridges;
use crate::storage::Store;

/// A webhook URL as shown to anyone but the org's admins, and in errors and logs: its origin
/// (`https://hooks.example.com/…`), since the path of a webhook URL often holds a token.
pub fn origin_only(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!("{}/…", u.origin().ascii_serialization()),
        Err(_) => "…".into(),
    }
}

/// How often the notifier looks for news and due deliveries.
const TICK: Duration = Duration::from_secs(1);

/// The notifier's parts and settings.
pub struct Notifier {
    store: Store,
    live: Arc<dyn LiveBridges>,
    insight: Arc<dyn Insight>,
    release: String,
    first_retry: Duration,
    allow_private: bool,
    client: reqwest::Client,
    /// Attempts under way, each recording its own outcome.
    in_flight: send::InFlight,
    /// Which org and webhook each attempt under way is for.
    busy: send::Busy,
    /// Notifications queued by this process (webhook id, dedup key): skips a storage round
    /// trip every tick for what storage would refuse as a duplicate anyway.
    queued: HashSet<(i64, String)>,
    /// Alerts whose suspects were already looked at for a webhook (its id, the alert's), with
    /// the alert's time, to forget them once out of the window. A webhook set again (a new
    /// id) looks at the last 15 minutes' alerts anew, as a restarted process would.
    examined: HashMap<(i64, String), i64>,
}

impl Notifier {
    /// A notifier for bridges of `release`; a failed delivery is retried after `first_retry`,
    /// then twice as long each time; webhooks at non-public addresses only with
    /// `allow_private`.
    pub fn new(
        store: Store,
        live: Arc<dyn LiveBridges>,
        insight: Arc<dyn Insight>,
        release: String,
        (first_retry, allow_private): (Duration, bool),
    ) -> Notifier {
        Notifier {
            store,
            live,
            insight,
            release,
            first_retry,
            allow_private,
            client: send::client(allow_private),
            in_flight: tokio::task::JoinSet::new(),
            busy: Default::default(),
            queued: HashSet::new(),
            examined: HashMap::new(),
        }
    }

    /// Runs until `shutdown`. A delivery cut short by shutdown (an attempt under way, or one
    /// whose outcome was not recorded yet) stays queued and is retried by the next start, with
    /// the same id.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.round() => {}
            }
        }
    }

    async fn round(&mut self) {
        if let Err(e) = self.watch().await {
            (self.store).background_failure(&e, "cannot queue bridge release notifications");
        }
        if let Err(e) = self.send_due().await {
            (self.store).background_failure(&e, "cannot deliver webhook notifications");
        }
    }
}
