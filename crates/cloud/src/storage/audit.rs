//! The cloud's own audit: who created, revoked or changed what (users, keys, tokens, webhooks),
//! when and from which address. Each entry is a row an org's admins read in the dashboard and
//! a JSON line in the log (target `audit`), written by the same call so the two never differ.

use sqlx::Row;

use super::{StorageError, Store, now_micros, on_db, on_writer};

/// Who did something: a dashboard user and their address, or an admin command on the host.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The user's email, or `cli:USER` for an admin command.
    pub who: String,
    /// The client's IP address, or `local` for an admin command.
    pub address: String,
}

impl Actor {
    /// The person running an admin command on this host (`$USER`, else `$LOGNAME`, else the
    /// process's user id as `uid=N`, as under cron, systemd or in a container).
    pub fn cli() -> Actor {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| format!("uid={}", rustix::process::getuid().as_raw()));
        Actor {
            who: format!("cli:{user}"),
            address: "local".into(),
        }
    }
}

/// One audit entry as read back.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    /// When (µs).
    pub at: i64,
    /// Who ([`Actor::who`]).
    pub actor: String,
    /// From where ([`Actor::address`]).
    pub address: String,
    /// What was done, such as `api_key.revoke`.
    pub action: String,
    /// To what: an id, a name or an email.
    pub target: String,
}

/// The insert of one audit entry: `(org_id, at, actor, address, action, target)`; also run
/// inside a transaction with the change it records ([`Store::confirm_cause`]).
pub(super) const AUDIT_INSERT: &str = "INSERT INTO audit_log (org_id, at, actor, address, action, target) \
                                       VALUES ($1, $2, $3, $4, $5, $6)";

/// The log line of an audit entry, written as it is stored.
pub(super) fn log_audit(org_id: i64, actor: &Actor, action: &str, target: &str) {
    tracing::info!(target: "audit", org_id, actor = %actor.who, address = %actor.address, action, object = target, "audit");
}

impl Store {
    /// Records that `actor` did `action` to `target` in org `org_id`, and logs it as a JSON
    /// line with the target `audit`.
    pub async fn audit(
        &self,
        org_id: i64,
        actor: &Actor,
        action: &str,
        target: &str,
    ) -> Result<(), StorageError> {
        log_audit(org_id, actor, action, target);
        on_writer!(&self.db, pool => sqlx::query(AUDIT_INSERT)
            .bind(org_id)
            .bind(now_micros())
            .bind(&actor.who)
            .bind(&actor.address)
            .bind(action)
            .bind(target)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// The org's newest audit entries, newest first, older than entry `before` when given.
    pub async fn audit_entries(
        &self,
        org_id: i64,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<(i64, AuditEntry)>, StorageError> {
        let sql = "SELECT id, at, actor, address, action, target FROM audit_log \
                   WHERE org_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| (r.get(0), AuditEntry {
                at: r.get(1),
                actor: r.get(2),
                address: r.get(3),
                action: r.get(4),
                target: r.get(5),
            }))
            .collect()))
    }
}
