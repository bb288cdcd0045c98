//! The registry of live tunnels: every connected instance of every bridge, by org and bridge
//! name, and the views `GET /v1/bridges` shows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tunnel::ResourceInfo;

/// One live tunnel: one process of a bridge.
pub struct Instance {
    /// The bridge process's random id.
    pub id: String,
    /// The bridge's release version.
    pub version: String,
    /// The id of the bridge token it connected with.
    pub token_id: String,
    /// What it declares (names and kinds).
    pub resources: Vec<ResourceInfo>,
    /// When the tunnel opened.
    pub connected_at: DateTime<Utc>,
    /// Last heartbeat round trip.
    pub last_heartbeat: Mutex<DateTime<Utc>>,
    /// Streams currently forwarded through it.
    pub in_flight: AtomicUsize,
    /// HTTP/2 client over the upgraded connection (the cloud is the client).
    pub sender: hyper::client::conn::http2::SendRequest<Body>,
    /// Cancelled to close the tunnel (revocation, missed heartbeats, shutdown): it takes no
    /// new stream, and the streams open on it may finish (a shutdown's drain).
    pub closed: CancellationToken,
    /// Cancelled to end the tunnel's connection at once, its open streams too (a revoked
    /// token, a bridge that stopped answering): hyper would keep it running for them.
    pub severed: CancellationToken,
    /// The bridge is shutting down: its tunnel takes no new stream (HTTP/2 `GOAWAY`), though
    /// the streams in flight finish. New requests go to other instances.
    pub draining: AtomicBool,
    /// [`Instance::close_revoked`] has begun: the bridge is told once, not by each caller.
    pub revoking: AtomicBool,
}

impl Instance {
    /// Closes the tunnel because its token was revoked, after telling the bridge so through it
    /// (at most a second): the bridge then reports `unauthorized` at once and retries slowly,
    /// instead of reconnecting first to learn it. It takes no new stream meanwhile. A bridge
    /// that heard it is recorded as refused, as one refused at connect is: the dashboard shows
    /// it as still running with a revoked token. False when another caller had begun it.
    pub async fn close_revoked(&self, store: &crate::storage::Store) -> bool {
        if self.revoking.swap(true, Ordering::Relaxed) {
            return false;
        }
        self.draining.store(true, Ordering::Relaxed);
        let notice = axum::http::Request::post(tunnel::REVOKED_PATH)
            .header(
                tunnel::HEADER_REFUSAL,
                "the bridge token was revoked; create a new one with `cloud bridge-token create`",
            )
            .body(Body::empty());
        if let Ok(notice) = notice {
            let mut sender = self.sender.clone();
            let heard = tokio::time::timeout(Duration::from_secs(1), sender.send_request(notice))
                .await
                .is_ok_and(|answer| answer.is_ok_and(|a| a.status().is_success()));
            if heard && let Err(e) = store.bridge_token_refused(&self.token_id).await {
                tracing::debug!(cause = %e, "cannot record a refused bridge token");
            }
        }
        self.closed.cancel();
        self.severed.cancel();
        true
    }
}

/// Live instances one bridge may have (each a process with its own tunnel).
pub const MAX_INSTANCES: usize = 16;
/// Live tunnels one org may have, all its bridges together.
pub const MAX_ORG_TUNNELS: usize = 256;

fn over_limit(
    bridges: &HashMap<(i64, String), Bridge>,
    org_id: i64,
    bridge: &str,
) -> Option<String> {
    let live = |b: &Bridge| {
        b.instances
            .iter()
            .filter(|i| !i.closed.is_cancelled())
            .count()
    };
    let mine = bridges.get(&(org_id, bridge.to_string())).map_or(0, live);
    if mine >= MAX_INSTANCES {
        return Some(format!(
            "bridge {bridge:?} already has {mine} live instances, the most one bridge may have; stop one, or give another site's bridge a name of its own"
        ));
    }
    let org: usize = bridges
        .iter()
        .filter(|((org, _), _)| *org == org_id)
        .map(|(_, b)| live(b))
        .sum();
    (org >= MAX_ORG_TUNNELS).then(|| {
        format!("the org already has {org} live bridge tunnels, the most one org may have; stop bridges it no longer needs")
    })
}

/// Instances of one bridge.
#[derive(Default)]
struct Bridge {
    instances: Vec<Arc<Instance>>,
}

/// How long after the last instance of a bridge that declared a resource went away a request
/// for it is told to retry (503), not that the bridge declares no such resource (404): an
/// instance restarting in a rollout is back within it.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(60);

/// Every connected bridge, by (org id, bridge name).
#[derive(Default)]
pub struct Registry {
    bridges: Mutex<HashMap<(i64, String), Bridge>>,
    /// The resources of instances that went away in the last [`RECONNECT_GRACE`], with when,
    /// by (org id, bridge name); each resource once, at its latest departure.
    departed: Mutex<HashMap<(i64, String), Vec<Departed>>>,
}

/// Most departed resources remembered per bridge (the oldest go first).
const MAX_DEPARTED: usize = 512;

/// A resource of an instance that went away, and when.
type Departed = (Instant, ResourceInfo);

/// A bridge as `GET /v1/bridges` shows it.
#[derive(Debug, Serialize)]
pub struct BridgeView {
    /// Its name.
    pub name: String,
    /// Its live instances.
    pub instances: Vec<InstanceView>,
}

/// An instance as `GET /v1/bridges` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// Instance id.
    pub id: String,
    /// Bridge version.
    pub version: String,
    /// Declared resources.
    pub resources: Vec<ResourceInfo>,
    /// When it connected.
    #[serde(serialize_with = "crate::time::serialize_millis")]
    pub connected_at: DateTime<Utc>,
    /// Last heartbeat.
    #[serde(serialize_with = "crate::time::serialize_millis")]
    pub last_heartbeat: DateTime<Utc>,
    /// Streams in flight.
    pub in_flight: usize,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(i64, String), Bridge>> {
        self.bridges.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why one more tunnel of `bridge` would be too many: [`MAX_INSTANCES`] live instances of
    /// one bridge, [`MAX_ORG_TUNNELS`] of one org. A token holder cannot hold open as many
    /// tunnels as the process has file descriptors, which every tenant shares.
    pub fn over_limit(&self, org_id: i64, bridge: &str) -> Option<String> {
        over_limit(&self.lock(), org_id, bridge)
    }

    /// Adds a live tunnel, unless that would pass a limit ([`Registry::over_limit`], checked
    /// again here for tunnels that were upgraded at the same time); then says why.
    pub fn add(&self, org_id: i64, bridge: &str, instance: Arc<Instance>) -> Option<String> {
        let mut bridges = self.lock();
        if let Some(why) = over_limit(&bridges, org_id, bridge) {
            return Some(why);
        }
        bridges
            .entry((org_id, bridge.to_string()))
            .or_default()
            .instances
            .push(instance);
        None
    }

    /// Removes a tunnel (it closed), remembering its resources for [`RECONNECT_GRACE`].
    pub fn remove(&self, org_id: i64, bridge: &str, instance: &Arc<Instance>) {
        {
            let mut bridges = self.lock();
            if let Some(b) = bridges.get_mut(&(org_id, bridge.to_string())) {
                b.instances.retain(|i| !Arc::ptr_eq(i, instance));
                if b.instances.is_empty() {
                    bridges.remove(&(org_id, bridge.to_string()));
                }
            }
        }
        let now = Instant::now();
        let fresh = |(at, _): &Departed| now.duration_since(*at) < RECONNECT_GRACE;
        let mut departed = self.departed.lock().unwrap_or_else(|e| e.into_inner());
        // Every bridge's list is pruned as it grows past a few, this bridge's at each
        // departure: the map holds about the last minute's departures, each bridge's at most
        // MAX_DEPARTED, however often a token holder reconnects with new names.
        if departed.len() > 1024 {
            departed.retain(|_, list| {
                list.retain(fresh);
                !list.is_empty()
            });
        }
        let list = departed.entry((org_id, bridge.to_string())).or_default();
        // The same resource whatever its globs: kind and name.
        let same = |a: &ResourceInfo, b: &ResourceInfo| a.kind == b.kind && a.name == b.name;
        list.retain(|d| fresh(d) && !instance.resources.iter().any(|r| same(r, &d.1)));
        // Kind and name are what is looked up: the globs are not kept.
        list.extend(instance.resources.iter().map(|r| {
            let mut kept = r.clone();
            kept.repositories = None;
            (now, kept)
        }));
        let over = list.len().saturating_sub(MAX_DEPARTED);
        list.drain(..over);
    }

    /// Whether an instance of `bridge` that declared `kind` `name` went away less than
    /// [`RECONNECT_GRACE`] ago: the resource is likely back in a moment.
    pub fn recently_declared(
        &self,
        org_id: i64,
        bridge: &str,
        kind: tunnel::ResourceKind,
        name: &str,
    ) -> bool {
        let departed = self.departed.lock().unwrap_or_else(|e| e.into_inner());
        departed
            .get(&(org_id, bridge.to_string()))
            .is_some_and(|list| {
                list.iter().any(|(at, r)| {
                    at.elapsed() < RECONNECT_GRACE && r.kind == kind && r.name == name
                })
            })
    }

    /// The live instances of a bridge (draining ones too: they still carry streams).
    pub fn instances(&self, org_id: i64, bridge: &str) -> Vec<Arc<Instance>> {
        self.lock()
            .get(&(org_id, bridge.to_string()))
            .map(|b| {
                b.instances
                    .iter()
                    .filter(|i| !i.closed.is_cancelled())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The instances of a bridge that take new streams (live, not draining), least busy first.
    pub fn ready(&self, org_id: i64, bridge: &str) -> Vec<Arc<Instance>> {
        let mut list = self.instances(org_id, bridge);
        list.retain(|i| !i.draining.load(Ordering::Relaxed));
        list.sort_by_key(|i| i.in_flight.load(Ordering::Relaxed));
        list
    }

    /// Every bridge of an org, for `GET /v1/bridges`.
    pub fn list(&self, org_id: i64) -> Vec<BridgeView> {
        let mut out: Vec<BridgeView> = self
            .lock()
            .iter()
            .filter(|((org, _), _)| *org == org_id)
            .map(|((_, name), b)| BridgeView {
                name: name.clone(),
                instances: b
                    .instances
                    .iter()
                    .map(|i| InstanceView {
                        id: i.id.clone(),
                        version: i.version.clone(),
                        resources: i.resources.clone(),
                        connected_at: i.connected_at,
                        last_heartbeat: *i.last_heartbeat.lock().unwrap_or_else(|e| e.into_inner()),
                        in_flight: i.in_flight.load(Ordering::Relaxed),
                    })
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Closes every tunnel (shutdown).
    pub fn close_all(&self) {
        for b in self.lock().values() {
            for i in &b.instances {
                i.closed.cancel();
            }
        }
    }
}
