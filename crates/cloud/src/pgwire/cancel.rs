//! Cancel keys: each session's client gets a process id and secret key made up by the cloud;
//! a `CancelRequest` that presents them is sent, through the tunnel, to the database with the
//! server's own pair. A request that matches nothing is ignored, as PostgreSQL does.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::auth::Principal;
use crate::relay::{RelayState, open_database};

/// The session a client-side cancel key stands for.
#[derive(Clone)]
struct Target {
    principal: Principal,
    bridge: String,
    database: String,
    process_id: i32,
    secret_key: i32,
}

/// Live sessions' cancel keys, by the pair the client was given.
#[derive(Default)]
pub struct Cancels(Mutex<HashMap<(i32, i32), Target>>);

/// Removes a session's key when the session ends.
pub struct Registered {
    cancels: std::sync::Arc<Cancels>,
    key: (i32, i32),
}

impl Registered {
    /// The pair the client was given (and a cancel request names).
    pub fn key(&self) -> (i32, i32) {
        self.key
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.cancels.lock().remove(&self.key);
    }
}

impl Cancels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(i32, i32), Target>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the server's `(process_id, secret_key)` for a session; returns the pair to
    /// hand the client, valid until the guard drops.
    pub fn register(
        self: &std::sync::Arc<Self>,
        principal: &Principal,
        bridge: &str,
        database: &str,
        server: (i32, i32),
    ) -> ((i32, i32), Registered) {
        let target = Target {
            principal: principal.clone(),
            bridge: bridge.to_string(),
            database: database.to_string(),
            process_id: server.0,
            secret_key: server.1,
        };
        let mut map = self.lock();
        let key = loop {
            let key = (rand::random::<i32>() & i32::MAX, rand::random::<i32>());
            if !map.contains_key(&key) {
                break key;
            }
        };
        map.insert(key, target);
        (
            key,
            Registered {
                cancels: self.clone(),
                key,
            },
        )
    }

    /// Forwards a client's `CancelRequest` for `(process_id, secret_key)`, if it names a live
    /// session (of `caller_org`, when the caller is known: the upgrade route's key).
    pub async fn cancel(
        &self,
        relay: &RelayState,
        process_id: i32,
        secret_key: i32,
        caller_org: Option<i64>,
    ) {
        let Some(target) = self
            .lock()
            .get(&(process_id, secret_key))
            .filter(|t| caller_org.is_none_or(|org| org == t.principal.org_id))
            .cloned()
        else {
            tracing::debug!("a cancel request matched no session");
            return;
        };
        match open_database(
            relay,
            &target.principal,
            &target.bridge,
            &target.database,
            true,
        )
        .await
        {
            Ok(mut stream) => {
                // The bridge closes the stream once it has passed the request on.
                let _ = tunnel::postgres::send_cancel(
                    &mut stream.io,
                    target.process_id,
                    target.secret_key,
                )
                .await;
            }
            Err(problem) => {
                tracing::warn!(bridge = %target.bridge, database = %target.database, why = %problem.detail, "cancel request not forwarded");
            }
        }
    }
}
