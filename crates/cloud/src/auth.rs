//! Who is calling: the API key from `Authorization: Bearer …` (or HTTP Basic with the key as
//! password, for git, docker and skopeo), checked against its stored hash.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use base64::Engine;
use tokio_util::sync::CancellationToken;

use crate::problem::{Problem, storage_unavailable};
use crate::secrets::{self, Kind};
use crate::storage::{ApiKeyRow, Credential, Store};

/// The address a connection came from, put in each request's extensions by the server loop.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// How long a verified key row is reused before it is read again.
const CACHE_TTL: Duration = Duration::from_secs(30);

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The org the key acts for.
    pub org_id: i64,
    /// The key's public id with its kind's prefix (`sigapi_…`), for audit records and the
    /// internal systems a bridge forwards to; never the secret.
    pub key_id: String,
}

/// Most key ids cached (found or not); a full cache starts again empty.
const MAX_CACHED: usize = 100_000;

/// A key row as cached: `None` when the id has no key; and when it was read.
type Cached = (Option<Arc<ApiKeyRow>>, Instant);

/// Compared against when no row exists, so that an unknown id costs what a wrong secret does.
const NO_HASH: [u8; 32] = [0; 32];

/// Caches key rows so a busy client does not cost a database read per request. Ids found to
/// have no row are cached too: an unknown id then costs what a known id with a wrong secret
/// does (a cache hit and one hash comparison), so timing does not tell which ids exist.
#[derive(Default)]
pub struct KeyCache {
    rows: Mutex<HashMap<String, Cached>>,
    signal_keys: Mutex<HashMap<String, (i64, Instant)>>,
}

/// How often a server asks whether any key was revoked (by any process: the CLI, another
/// server), dropping its caches when one was.
const REVOCATION_POLL: Duration = Duration::from_secs(1);

/// Pulls the presented API key out of the headers (borrowed from them for Bearer).
fn presented_key(headers: &HeaderMap) -> Result<Cow<'_, str>, Problem> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| {
            Problem::unauthorized(
                "missing Authorization header; send Authorization: Bearer <API key>",
            )
        })?
        .to_str()
        .map_err(|_| Problem::unauthorized("the Authorization header is not valid text"))?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        return Ok(Cow::Borrowed(rest.trim()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| Problem::unauthorized("the Basic credentials are not valid base64"))?;
        let (_, password) = decoded.split_once(':').unwrap_or(("", &decoded));
        return Ok(Cow::Owned(password.to_string()));
    }
    // The scheme is not echoed: a key sent without `Bearer ` would be the "scheme".
    Err(Problem::unauthorized(
        "unsupported Authorization scheme; use Authorization: Bearer <API key>",
    ))
}

impl KeyCache {
    /// Authenticates the request's API key.
    pub async fn authenticate(
        &self,
        store: &Store,
        headers: &HeaderMap,
    ) -> Result<Principal, Problem> {
        let presented = presented_key(headers)?;
        let invalid = || {
            Problem::unauthorized(
                "the API key is not valid; create one with `cloud api-key create --org ORG`",
            )
        };
        let (id, secret) = secrets::parse(Kind::ApiKey, &presented).ok_or_else(invalid)?;
        let cached = {
            let rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
            rows.get(id)
                .filter(|(_, at)| at.elapsed() < CACHE_TTL)
                .map(|(row, _)| row.clone())
        };
        let row = match cached {
            Some(row) => row,
            None => {
                let row = store
                    .api_key(id)
                    .await
                    .map_err(|e| storage_unavailable(&e))?
                    .map(Arc::new);
                if row.is_some() {
                    touch(store, Credential::ApiKey, id);
                }
                let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
                if rows.len() >= MAX_CACHED {
                    rows.clear();
                }
                rows.insert(id.to_string(), (row.clone(), Instant::now()));
                row
            }
        };
        let Some(row) = row else {
            let _ = secrets::verify(secret, &NO_HASH);
            return Err(invalid());
        };
        if !secrets::verify(secret, &row.secret_hash) {
            return Err(invalid());
        }
        Ok(Principal {
            org_id: row.org_id,
            key_id: format!("{}{id}", Kind::ApiKey.prefix()),
        })
    }

    /// The org owning a live signal key (cached like API keys).
    pub async fn signal_key_org(&self, store: &Store, key: &str) -> Result<Option<i64>, Problem> {
        if let Some((org, _)) = self
            .signal_keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .filter(|(_, at)| at.elapsed() < CACHE_TTL)
        {
            return Ok(Some(*org));
        }
        let org = store
            .signal_key_org(key)
            .await
            .map_err(|e| storage_unavailable(&e))?;
        if let Some(org) = org {
            touch(store, Credential::SignalKey, key);
            let mut keys = self.signal_keys.lock().unwrap_or_else(|e| e.into_inner());
            if keys.len() >= MAX_CACHED {
                keys.clear();
            }
            keys.insert(key.to_string(), (org, Instant::now()));
        }
        Ok(org)
    }

    /// Forgets every cached key: the next request of each reads it again.
    pub fn forget_all(&self) {
        self.rows.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.signal_keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Until `shutdown`: every [`REVOCATION_POLL`], drops the caches when a key was revoked
    /// since the last look, so that a revocation takes effect within about a second whatever
    /// process made it, despite the caches' 30 s.
    pub async fn watch_revocations(self: Arc<Self>, store: Store, shutdown: CancellationToken) {
        let mut seen = store.last_revocation().await.unwrap_or(0);
        loop {
            tokio::select! {
                () = tokio::time::sleep(REVOCATION_POLL) => {}
                () = shutdown.cancelled() => return,
            }
            match store.last_revocation().await {
                Ok(latest) if latest != seen => {
                    seen = latest;
                    self.forget_all();
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(cause = %e, "cannot check for revoked keys; will retry"),
            }
        }
    }
}

/// Records, without waiting for it, that a credential was used (once per cache load: at most
/// about every 30 s per key and server).
fn touch(store: &Store, kind: Credential, id: &str) {
    let (store, id) = (store.clone(), id.to_string());
    tokio::spawn(async move {
        if let Err(e) = store.touch(kind, &id).await {
            tracing::debug!(cause = %e, "cannot record a key's last use");
        }
    });
}
