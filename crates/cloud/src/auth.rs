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

/// Marks a request that came in on the loopback listener of the cloud's own Git client: it is
/// authenticated with [`KeyCache::authenticate_internal`], and nothing else is accepted there.
#[derive(Clone, Copy, Debug)]
pub struct InternalCaller;

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

/// The principal of an internal key, as audit records and the bridge see it.
pub const INTERNAL_PRINCIPAL: &str = "cloud-commits";

/// Most key ids cached (found or not); a full cache starts again empty.
const MAX_CACHED: usize = 100_000;

/// A key row as cached: `None` when the id has no key; and when it was read.
type Cached = (Option<Arc<ApiKeyRow>>, Instant);

/// Caches key rows so a busy client does not cost a database read per request. Ids found to
/// have no row are cached too: an unknown id then costs what a known id with a wrong secret
/// does (a cache hit and one hash comparison), so timing does not tell which ids exist.
#[derive(Default)]
pub struct KeyCache {
    rows: Mutex<HashMap<String, Cached>>,
    signal_keys: Mutex<HashMap<String, (i64, Instant)>>,
    internal: InternalSecret,
    /// Bumped by [`KeyCache::forget_all`]: a row read from storage before a revocation was
    /// seen is not cached after it (it may be the row as it was before the revocation).
    generation: std::sync::atomic::AtomicU64,
}

/// What an internal key starts with: `sigint_{org id}_{HMAC of the org id, hex}`.
const INTERNAL_PREFIX: &str = "sigint_";

/// 256 random bits made at start and never stored or sent: the cloud's own Git client (the
/// commits of a deployment, read through the relay) acts for an org with a key derived from
/// them, which no other process and no restart of this one accepts.
struct InternalSecret([u8; 32]);

impl Default for InternalSecret {
    fn default() -> Self {
        let mut secret = [0; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut secret);
        InternalSecret(secret)
    }
}

impl InternalSecret {
    fn mac(&self, org_id: i64) -> String {
        secrets::hmac_hex(&self.0, org_id.to_string().as_bytes())
    }

    /// The org an internal key acts for, when it is one of this process's.
    fn org_of(&self, presented: &str) -> Option<i64> {
        let (org, mac) = presented.strip_prefix(INTERNAL_PREFIX)?.split_once('_')?;
        let org_id: i64 = org.parse().ok()?;
        let expected = self.mac(org_id);
        secrets::same(&expected, mac).then_some(org_id)
    }
}

/// How often a server asks whether any key was revoked (by any process: the CLI, another
/// server), dropping its caches when one was.
const REVOCATION_POLL: Duration = Duration::from_secs(1);

/// Pulls the presented API key out of the headers (borrowed from them for Bearer).
fn presented_key(headers: &HeaderMap) -> Result<Cow<'_, str>, Problem> {
    // Two could be read differently by a proxy in front and by this service.
    if tunnel::hop::repeated(headers, header::AUTHORIZATION) {
        return Err(Problem::bad_request(
            "more than one Authorization header; send one",
        ));
    }
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| {
            Problem::unauthorized(
                "missing Authorization header; send Authorization: Bearer <API key>, or HTTP Basic with the API key as the password (any user name: git and skopeo do this when the key is in the URL or --creds)",
            )
        })?
        .to_str()
        .map_err(|_| Problem::unauthorized("the Authorization header is not valid text"))?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        if rest.trim().is_empty() {
            // What `-H "Authorization: Bearer $KEY"` sends when the variable is unset.
            return Err(Problem::unauthorized(
                "the Authorization header says Bearer but carries no key (was the shell variable holding it empty?); send Authorization: Bearer <API key>",
            ));
        }
        return Ok(Cow::Borrowed(rest.trim()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| Problem::unauthorized("the Basic credentials are not valid base64"))?;
        let (_, password) = decoded.split_once(':').unwrap_or(("", &decoded));
        if password.is_empty() {
            // What a client sends when it was given no credentials (skopeo without --creds).
            return Err(Problem::unauthorized(
                "no API key was given (the Basic credentials carry no password, as a client given no login sends them); give the API key as the password (skopeo: --creds ci:$API_KEY; podman or docker: echo \"$API_KEY\" | podman login -u ci --password-stdin HOST; git: https://x:$API_KEY@HOST/…)",
            ));
        }
        return Ok(Cow::Owned(password.to_string()));
    }
    // The scheme is not echoed: a key sent without `Bearer ` would be the "scheme".
    Err(Problem::unauthorized(
        "unsupported Authorization scheme; use Authorization: Bearer <API key>, or HTTP Basic with the API key as the password",
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
        self.authenticate_key(store, &presented).await
    }

    /// Authenticates an API key given as such (the PostgreSQL front end's password).
    pub async fn authenticate_key(
        &self,
        store: &Store,
        presented: &str,
    ) -> Result<Principal, Problem> {
        let invalid = || match secrets::named_kind(presented) {
            Some(other) if !presented.starts_with(Kind::ApiKey.prefix()) => {
                Problem::unauthorized(format!(
                    "that is {other}, not an API key (sigapi_…); create one with `cloud api-key create --org ORG`"
                ))
            }
            _ => Problem::unauthorized(
                "the API key is not valid (mistyped, cut, or revoked); an admin of your org makes a new one on the dashboard's Integrations: Signals page or with `cloud api-key create --org ORG`",
            ),
        };
        let (id, secret) = secrets::parse(Kind::ApiKey, presented).ok_or_else(invalid)?;
        let Some(row) = self.api_key_row(store, id, true).await? else {
            let _ = secrets::verify(secret, &secrets::NO_HASH);
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

    /// The live (not revoked) API key `id`'s row, from the cache or the store; `used` records
    /// its use when read from the store (a request presented it, not a recheck).
    async fn api_key_row(
        &self,
        store: &Store,
        id: &str,
        used: bool,
    ) -> Result<Option<Arc<ApiKeyRow>>, Problem> {
        let cached = {
            let rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
            rows.get(id)
                .filter(|(_, at)| at.elapsed() < CACHE_TTL)
                .map(|(row, _)| row.clone())
        };
        if let Some(row) = cached {
            return Ok(row);
        }
        let generation = self.generation();
        let row = store
            .api_key(id)
            .await
            .map_err(|e| storage_unavailable(&e))?
            .map(Arc::new);
        if used && row.is_some() {
            touch(store, Credential::ApiKey, id);
        }
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation() != generation {
            return Ok(row);
        }
        // Unknown ids (a flood of made-up keys, say) go first: they never push out the keys
        // in use.
        make_room(&mut rows, MAX_CACHED, Option::is_some);
        rows.insert(id.to_string(), (row.clone(), Instant::now()));
        Ok(row)
    }

    /// Whether the API key of `principal` (authenticated earlier) is still live: what a
    /// long-lived session asks now and then, so that revoking a key ends it. Cached like
    /// [`KeyCache::authenticate_key`], whose caches a revocation drops within about a second.
    /// `true` when the store cannot say (a session is not cut for a storage hiccup).
    pub async fn is_live(&self, store: &Store, principal: &Principal) -> bool {
        let Some(id) = principal.key_id.strip_prefix(Kind::ApiKey.prefix()) else {
            return true;
        };
        match self.api_key_row(store, id, false).await {
            Ok(row) => row.is_some(),
            Err(_) => true,
        }
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
        let generation = self.generation();
        let org = store
            .signal_key_org(key)
            .await
            .map_err(|e| storage_unavailable(&e))?;
        if let Some(org) = org {
            touch(store, Credential::SignalKey, key);
            let mut keys = self.signal_keys.lock().unwrap_or_else(|e| e.into_inner());
            if self.generation() != generation {
                return Ok(Some(org));
            }
            make_room(&mut keys, MAX_CACHED, |_| true);
            keys.insert(key.to_string(), (org, Instant::now()));
        }
        Ok(org)
    }

    /// Authenticates a request of the cloud's own Git client (on the loopback listener, which
    /// takes nothing else): only an internal key of this process.
    pub fn authenticate_internal(&self, headers: &HeaderMap) -> Result<Principal, Problem> {
        let presented = presented_key(headers)?;
        match self.internal.org_of(&presented) {
            Some(org_id) => Ok(Principal {
                org_id,
                key_id: INTERNAL_PRINCIPAL.to_string(),
            }),
            None => Err(Problem::unauthorized(
                "this listener serves the cloud's own Git client only",
            )),
        }
    }

    /// A key acting for `org_id` that only this process accepts, for the cloud's own requests
    /// through its relay (a Git client reading a deployment's commits).
    pub fn internal_key(&self, org_id: i64) -> String {
        format!("{INTERNAL_PREFIX}{org_id}_{}", self.internal.mac(org_id))
    }

    /// Forgets every cached key: the next request of each reads it again.
    pub fn forget_all(&self) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys = self.signal_keys.lock().unwrap_or_else(|e| e.into_inner());
        // Under both locks: a read that finished before this cannot cache its row after it.
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        rows.clear();
        keys.clear();
    }

    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Until `shutdown`: every [`REVOCATION_POLL`], drops the caches when a key was revoked
    /// since the last look, so that a revocation takes effect within about a second whatever
    /// process made it, despite the caches' 30 s.
    pub async fn watch_revocations(self: Arc<Self>, store: Store, shutdown: CancellationToken) {
        let mut seen = store.last_revocation().await.unwrap_or_default();
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
                Err(e) => store.background_failure(&e, "cannot check for revoked keys"),
            }
        }
    }
}

/// Makes room for one more entry in a cache of `max`: when full, drops expired entries and
/// those `keep` rejects, and everything only if that frees nothing.
fn make_room<V>(cache: &mut HashMap<String, (V, Instant)>, max: usize, keep: impl Fn(&V) -> bool) {
    if cache.len() < max {
        return;
    }
    cache.retain(|_, (value, at)| keep(value) && at.elapsed() < CACHE_TTL);
    if cache.len() >= max {
        cache.clear();
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

#[cfg(test)]
mod tests;
