//! Dashboard people: users, their one-time set-password links and their server-side sessions.
//! Link and session secrets are stored as SHA-256 hashes, so a copy of the database opens no
//! session; passwords arrive here already hashed (Argon2id, by the dashboard).

use sqlx::Row;

use super::{Db, StorageError, Store, now_micros, on_db, on_writer};

/// A [`User`] from a row of `USER_COLUMNS` starting at column 0.
macro_rules! user_from {
    ($row:expr) => {
        User {
            id: $row.get(0),
            org_id: $row.get(1),
            org: $row.get(2),
            email: $row.get(3),
            role: Role::parse(&$row.get::<String, _>(4)),
            password_hash: $row.get(5),
            release_notices: $row.get::<i64, _>(6) != 0,
        }
    };
}

/// A user's role: members read, admins manage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Manages keys, tokens and users.
    Admin,
    /// Reads.
    Member,
}

impl Role {
    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    fn parse(s: &str) -> Role {
        if s == "admin" {
            Role::Admin
        } else {
            Role::Member
        }
    }
}

/// A user as sign-in sees it. Its `Debug` hides the password hash.
#[derive(Clone)]
pub struct User {
    /// Row id.
    pub id: i64,
    /// The org's id.
    pub org_id: i64,
    /// The org's slug.
    pub org: String,
    /// Lowercase email, unique across the service.
    pub email: String,
    /// Admin or member.
    pub role: Role,
    /// The Argon2id PHC string; `None` until a set-password link was used.
    pub password_hash: Option<String>,
    /// Whether the dashboard shows this user a notice about outdated bridges and new releases.
    pub release_notices: bool,
}

/// A live session and its user. Its `Debug` hides the CSRF token.
#[derive(Clone)]
pub struct Session {
    /// The signed-in user.
    pub user: User,
    /// The session's CSRF token, which every form of the session carries.
    pub csrf: String,
    /// When it was made (µs).
    pub created_at: i64,
    /// When it was last used (µs; written at most once a minute).
    pub last_seen_at: i64,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("org", &self.org)
            .field("email", &self.email)
            .field("role", &self.role)
            .field("password_hash", &self.password_hash.as_ref().map(|_| "***"))
            .field("release_notices", &self.release_notices)
            .finish()
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("user", &self.user)
            .field("csrf", &"***")
            .field("created_at", &self.created_at)
            .field("last_seen_at", &self.last_seen_at)
            .finish()
    }
}

impl Store {
    /// Creates a user without a password; fails with [`StorageError::Exists`] when the email
    /// is taken (in any org).
    pub async fn create_user(
        &self,
        org_id: i64,
        email: &str,
        role: Role,
    ) -> Result<i64, StorageError> {
        let sql = "INSERT INTO users (org_id, email, role, created_at) VALUES ($1, $2, $3, $4) \
                   ON CONFLICT (email) DO NOTHING RETURNING id";
        let now = now_micros();
        let id = on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .bind(email)
            .bind(role.as_str())
            .bind(now)
            .fetch_optional(pool)
            .await?
            .map(|r| r.get::<i64, _>(0)));
        id.ok_or_else(|| StorageError::Exists {
            what: "user",
            name: email.to_string(),
        })
    }

    /// The user with this (lowercase) email.
    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>, StorageError> {
        let sql = "SELECT u.id, u.org_id, o.slug, u.email, u.role, u.password_hash, u.release_notices \
                   FROM users u JOIN orgs o ON o.id = u.org_id WHERE u.email = $1";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(email)
            .fetch_optional(pool)
            .await?
            .map(|r| user_from!(r))))
    }

    /// Stores a set-password link (its hash) for `user_id`, valid until `expires_at` (µs). The
    /// user's other unused links stop working: an admin makes a new one when an old one may
    /// have leaked. The new link is stored first: two made at once void each other (the admin
    /// makes another) rather than both staying valid.
    pub async fn create_password_link(
        &self,
        user_id: i64,
        token_hash: &[u8],
        expires_at: i64,
    ) -> Result<(), StorageError> {
        let sql =
            "INSERT INTO password_links (token_hash, user_id, expires_at) VALUES ($1, $2, $3)";
        on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(token_hash)
            .bind(user_id)
            .bind(expires_at)
            .execute(pool)
            .await?.rows_affected());
        let void = "UPDATE password_links SET used_at = $1 \
                    WHERE user_id = $2 AND used_at IS NULL AND token_hash <> $3";
        on_writer!(&self.db, pool => sqlx::query(void)
            .bind(now_micros())
            .bind(user_id)
            .bind(token_hash)
            .execute(pool)
            .await?.rows_affected());
        Ok(())
    }

    /// The user a set-password link is for, while it is unused and unexpired.
    pub async fn password_link_user(
        &self,
        token_hash: &[u8],
    ) -> Result<Option<User>, StorageError> {
        let sql = "SELECT u.id, u.org_id, o.slug, u.email, u.role, u.password_hash, u.release_notices \
                   FROM password_links l JOIN users u ON u.id = l.user_id \
                   JOIN orgs o ON o.id = u.org_id \
                   WHERE l.token_hash = $1 AND l.used_at IS NULL AND l.expires_at > $2";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(token_hash)
            .bind(now_micros())
            .fetch_optional(pool)
            .await?
            .map(|r| user_from!(r))))
    }

    /// Uses a set-password link once: sets the user's password hash, ends the user's sessions,
    /// and returns the user; `None` when the link is unknown, used, replaced or expired.
    pub async fn use_password_link(
        &self,
        token_hash: &[u8],
        password_hash: &str,
    ) -> Result<Option<i64>, StorageError> {
        let claim = "UPDATE password_links SET used_at = $1 \
                     WHERE token_hash = $2 AND used_at IS NULL AND expires_at > $1 \
                     RETURNING user_id";
        let now = now_micros();
        let user_id = on_writer!(&self.db, pool => sqlx::query(claim)
            .bind(now)
            .bind(token_hash)
            .fetch_optional(pool)
            .await?
            .map(|r| r.get::<i64, _>(0)));
        let Some(user_id) = user_id else {
            return Ok(None);
        };
        let set = "UPDATE users SET password_hash = $1 WHERE id = $2";
        on_writer!(&self.db, pool => sqlx::query(set)
            .bind(password_hash)
            .bind(user_id)
            .execute(pool)
            .await?.rows_affected());
        self.end_sessions(user_id).await?;
        Ok(Some(user_id))
    }

    /// Stores a new session (its id's hash) for `user_id`, only while the user's password hash
    /// is still `vouched` (the one just verified or set): a sign-in racing a password change
    /// opens no session that the change should have ended. `false` when it did not hold.
    pub async fn create_session(
        &self,
        id_hash: &[u8],
        user_id: i64,
        csrf: &str,
        vouched: &str,
    ) -> Result<bool, StorageError> {
        // On PostgreSQL the user's row is locked until the session is in: a password change
        // then waits, and its ending of the user's sessions sees this one.
        let sql = match &self.db {
            Db::Sqlite { .. } => {
                "INSERT INTO sessions (id_hash, user_id, csrf, created_at, last_seen_at) \
                 SELECT $1, $2, $3, $4, $4 FROM users WHERE id = $2 AND password_hash = $5"
            }
            Db::Postgres(_) => {
                "INSERT INTO sessions (id_hash, user_id, csrf, created_at, last_seen_at) \
                 SELECT $1, $2, $3, $4, $4 FROM users WHERE id = $2 AND password_hash = $5 \
                 FOR SHARE"
            }
        };
        let inserted = on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(id_hash)
            .bind(user_id)
            .bind(csrf)
            .bind(now_micros())
            .bind(vouched)
            .execute(pool)
            .await?.rows_affected());
        Ok(inserted == 1)
    }

    /// The session with this id hash, unless it was ended. Expiry is the caller's rule.
    pub async fn session(&self, id_hash: &[u8]) -> Result<Option<Session>, StorageError> {
        let sql = "SELECT u.id, u.org_id, o.slug, u.email, u.role, u.password_hash, u.release_notices, \
                   s.csrf, s.created_at, s.last_seen_at \
                   FROM sessions s JOIN users u ON u.id = s.user_id \
                   JOIN orgs o ON o.id = u.org_id \
                   WHERE s.id_hash = $1 AND s.revoked_at IS NULL";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
        .bind(id_hash)
        .fetch_optional(pool)
        .await?
        .map(|r| Session {
            user: user_from!(r),
            csrf: r.get(7),
            created_at: r.get(8),
            last_seen_at: r.get(9),
        })))
    }

    /// Records that a session was used now.
    pub async fn touch_session(&self, id_hash: &[u8]) -> Result<(), StorageError> {
        let sql = "UPDATE sessions SET last_seen_at = $1 WHERE id_hash = $2";
        on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(now_micros())
            .bind(id_hash)
            .execute(pool)
            .await?.rows_affected());
        Ok(())
    }

    /// Ends one session (sign-out).
    pub async fn end_session(&self, id_hash: &[u8]) -> Result<(), StorageError> {
        let sql = "UPDATE sessions SET revoked_at = $1 WHERE id_hash = $2 AND revoked_at IS NULL";
        on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(now_micros())
            .bind(id_hash)
            .execute(pool)
            .await?.rows_affected());
        Ok(())
    }

    /// Turns a user's in-dashboard release notice on or off.
    pub async fn set_release_notices(&self, user_id: i64, on: bool) -> Result<(), StorageError> {
        let sql = "UPDATE users SET release_notices = $1 WHERE id = $2";
        on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(i64::from(on))
            .bind(user_id)
            .execute(pool)
            .await?.rows_affected());
        Ok(())
    }

    /// Ends every session of a user (sign-out everywhere, a new password).
    pub async fn end_sessions(&self, user_id: i64) -> Result<(), StorageError> {
        let sql = "UPDATE sessions SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL";
        on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(now_micros())
            .bind(user_id)
            .execute(pool)
            .await?.rows_affected());
        Ok(())
    }
}
