//! What the bridge knows about its own connection, shared by the tunnel loop and `/health`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// `connection_status` of `/health`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// First attempt in progress.
    Connecting,
    /// Tunnel up.
    Connected,
    /// Lost; trying again.
    Reconnecting,
    /// The cloud rejected the token (it will not fix itself).
    Unauthorized,
    /// Stopped (shutdown).
    Disconnected,
}

impl Connection {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Connection::Connecting => "connecting",
            Connection::Connected => "connected",
            Connection::Reconnecting => "reconnecting",
            Connection::Unauthorized => "unauthorized",
            Connection::Disconnected => "disconnected",
        }
    }
}

struct Inner {
    connection: Connection,
    last_heartbeat: Option<DateTime<Utc>>,
    last_heartbeat_at: Option<Instant>,
    resource_failures: usize,
    /// Why the cloud said it is closing the tunnel for good (a revoked token), until the
    /// tunnel loop takes it.
    revoked: Option<String>,
    /// Shutting down: finishing the streams in flight, taking no new one.
    draining: bool,
}

/// Shared status.
pub struct Status {
    started: Instant,
    heartbeat_interval: Duration,
    inner: Mutex<Inner>,
}

/// `/health` body.
#[derive(Debug, serde::Serialize)]
pub struct Health {
    /// healthy, degraded or unhealthy.
    pub status: &'static str,
    /// Release version.
    pub version: &'static str,
    /// Seconds since start.
    pub uptime_seconds: u64,
    /// Last heartbeat round trip (UTC), or null.
    pub last_heartbeat: Option<String>,
    /// connecting, connected, reconnecting, unauthorized, disconnected.
    pub connection_status: &'static str,
    /// True from the first SIGTERM until exit: the tunnel takes no new stream while those in
    /// flight finish (the cloud sends new ones to other instances).
    pub draining: bool,
}

impl Status {
    /// A fresh status, `connecting`.
    pub fn new(heartbeat_interval: Duration) -> Self {
        Status {
            started: Instant::now(),
            heartbeat_interval,
            inner: Mutex::new(Inner {
                connection: Connection::Connecting,
                last_heartbeat: None,
                last_heartbeat_at: None,
                resource_failures: 0,
                revoked: None,
                draining: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the connection state.
    pub fn set(&self, c: Connection) {
        let mut inner = self.lock();
        if c == Connection::Connected && inner.connection != Connection::Connected {
            // A new tunnel: the last connection's heartbeat says nothing about this one.
            inner.last_heartbeat_at = None;
        }
        inner.connection = c;
    }

    /// The connection state.
    pub fn connection(&self) -> Connection {
        self.lock().connection
    }

    /// Records a heartbeat from the cloud.
    pub fn heartbeat(&self) {
        let mut inner = self.lock();
        inner.last_heartbeat = Some(Utc::now());
        inner.last_heartbeat_at = Some(Instant::now());
    }

    /// Time since the last heartbeat (or since `since` when none came on this connection).
    pub fn heartbeat_age(&self, since: Instant) -> Duration {
        let last = self
            .lock()
            .last_heartbeat_at
            .filter(|t| *t >= since)
            .unwrap_or(since);
        last.elapsed()
    }

    /// Marks the bridge as shutting down (`draining` in `/health`).
    pub fn drain(&self) {
        self.lock().draining = true;
    }

    /// Records the cloud's word that it is closing the tunnel because the token was revoked.
    pub fn revoked(&self, reason: String) {
        self.lock().revoked = Some(reason);
    }

    /// The reason given by [`Status::revoked`] on the tunnel that just ended, if any.
    pub fn take_revocation(&self) -> Option<String> {
        self.lock().revoked.take()
    }

    /// How many declared resources failed their last check.
    pub fn set_resource_failures(&self, n: usize) {
        self.lock().resource_failures = n;
    }

    /// The `/health` view: healthy needs a live tunnel and a heartbeat within 3 intervals.
    pub fn health(&self) -> Health {
        let inner = self.lock();
        let fresh = inner
            .last_heartbeat_at
            .is_some_and(|t| t.elapsed() <= self.heartbeat_interval * 3);
        let status = match inner.connection {
            Connection::Connected if fresh && inner.resource_failures == 0 => "healthy",
            Connection::Connected if fresh => "degraded",
            // Just connected: the first heartbeat is not due yet.
            Connection::Connected
                if inner.last_heartbeat_at.is_none() && inner.resource_failures == 0 =>
            {
                "healthy"
            }
            Connection::Connected if inner.last_heartbeat_at.is_none() => "degraded",
            _ => "unhealthy",
        };
        Health {
            status,
            version: crate::VERSION,
            uptime_seconds: self.started.elapsed().as_secs(),
            last_heartbeat: inner
                .last_heartbeat
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            connection_status: inner.connection.as_str(),
            draining: inner.draining,
        }
    }
}
