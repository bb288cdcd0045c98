//! Dashboard users made from the command line: `cloud user create` and `reset-password`
//! print a one-time set-password link, as the only way a first user gets in.

use super::AdminError;
use crate::storage::{Actor, StorageError, Store};

/// How long a set-password link is valid.
pub const LINK_VALIDITY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The base of set-password links: `--public-url`, or `https://` and the TLS listen address,
/// with loopback for an every-interface address (`0.0.0.0:8443`, a container's default), which
/// no browser can open.
pub fn link_base(public_url: Option<&str>, listen: &str) -> Result<String, AdminError> {
    let base = match public_url {
        Some(u) => u.trim().trim_end_matches('/').to_string(),
        None => match listen.parse::<std::net::SocketAddr>() {
            Ok(addr) if addr.ip().is_unspecified() => {
                let loopback = match addr {
                    std::net::SocketAddr::V4(_) => std::net::IpAddr::from([127, 0, 0, 1]),
                    std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                };
                format!(
                    "https://{}",
                    std::net::SocketAddr::new(loopback, addr.port())
                )
            }
            _ => format!("https://{listen}"),
        },
    };
    // Checked here, not by clap, which would repeat a password in the value it refuses.
    crate::public_url::parse(&base).map_err(|e| AdminError::Usage(format!("--public-url: {e}")))
}

/// A new set-password link for `user_id`.
async fn password_link(store: &Store, user_id: i64, base: &str) -> Result<String, AdminError> {
    let (secret, hash) = crate::secrets::new_secret();
    let expires =
        crate::storage::now_micros() + i64::try_from(LINK_VALIDITY.as_micros()).unwrap_or(i64::MAX);
    store.create_password_link(user_id, &hash, expires).await?;
    Ok(format!("{base}/set-password?token={secret}"))
}

/// An email address as stored: trimmed and lowercase, with one `@` between non-empty parts.
pub fn email(raw: &str) -> Result<String, AdminError> {
    let e = raw.trim().to_lowercase();
    let valid = e.len() <= 254
        && !e.chars().any(|c| c.is_whitespace() || c.is_control())
        && matches!(e.split_once('@'), Some((local, domain)) if !local.is_empty() && domain.contains('.') && !domain.contains('@'));
    if valid {
        Ok(e)
    } else {
        Err(AdminError::Usage(format!(
            "--email {raw:?} is not an email address (expected name@example.com)"
        )))
    }
}

/// `cloud user create`: returns the user's one-time set-password link.
pub async fn create_user(
    store: &Store,
    actor: &Actor,
    slug: &str,
    raw_email: &str,
    role: crate::storage::Role,
    public_url: Option<&str>,
    listen: &str,
) -> Result<String, AdminError> {
    let base = link_base(public_url, listen)?;
    let email = email(raw_email)?;
    let org_id = super::org(store, slug).await?;
    let user_id = match store.create_user(org_id, &email, role).await {
        Ok(id) => id,
        Err(StorageError::Exists { .. }) => {
            return Err(AdminError::Usage(format!(
                "a user {email:?} exists already (an email belongs to one user, in one org); `cloud user reset-password --email {email}` makes a new link"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    store
        .audit(
            org_id,
            actor,
            &format!("user.create ({})", role.as_str()),
            &email,
        )
        .await?;
    password_link(store, user_id, &base).await
}

/// `cloud user reset-password`: returns a new set-password link.
pub async fn reset_password(
    store: &Store,
    actor: &Actor,
    raw_email: &str,
    public_url: Option<&str>,
    listen: &str,
) -> Result<String, AdminError> {
    let base = link_base(public_url, listen)?;
    let email = email(raw_email)?;
    let user = store.user_by_email(&email).await?.ok_or_else(|| {
        AdminError::Usage(format!(
            "no user {email:?}; create one with `cloud user create --org ORG --email {email} --role member`"
        ))
    })?;
    store
        .audit(user.org_id, actor, "user.reset_password", &email)
        .await?;
    password_link(store, user.id, &base).await
}

#[cfg(test)]
mod tests {
    use super::link_base;

    #[test]
    fn links_open_in_a_browser_whatever_the_listen_address() {
        let base = |listen| link_base(None, listen).unwrap();
        assert_eq!(base("0.0.0.0:8443"), "https://127.0.0.1:8443");
        assert_eq!(base("[::]:8443"), "https://[::1]:8443");
        assert_eq!(base("192.0.2.7:8443"), "https://192.0.2.7:8443");
        assert_eq!(
            link_base(Some("https://signals.example.com/"), "0.0.0.0:8443").unwrap(),
            "https://signals.example.com"
        );
        assert!(link_base(Some("signals.example.com"), "0.0.0.0:8443").is_err());
    }
}
