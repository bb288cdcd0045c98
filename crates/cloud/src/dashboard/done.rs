//! What a form just did, said on the page its redirect leads to. A revocation or a removal
//! otherwise shows only as a row gone from a table, which a screen-reader user is not told.
//! The redirect carries `?done=WHAT&name=NAME&check=…`, the check an HMAC of the two and of the
//! page's path under the session's CSRF token: a link made by anyone else (who does not know
//! that token) shows nothing, so no crafted link can put a false "revoked" on the page, and a
//! notice moved to another page (another alert's) shows nothing either. A name with characters
//! that no bridge name or key id has is left out of the sentence.

use url::form_urlencoded;

/// Hex digits of the check kept in the link (64 bits: not guessable in any number of tries a
/// server would answer).
const CHECK_LEN: usize = 16;

/// The check of `code`, `name` and the page's `path` under the session's `csrf` token.
fn check(csrf: &str, code: &str, name: &str, path: &str) -> String {
    let said = format!("{code}\n{name}\n{path}");
    let mut mac = crate::secrets::hmac_hex(csrf.as_bytes(), said.as_bytes());
    mac.truncate(CHECK_LEN);
    mac
}

/// A form's outcome that its page says in a notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// A bridge's tokens revoked and its tunnels closed.
    BridgeRevoked,
    /// A signal key or API key revoked.
    KeyRevoked,
    /// The org's webhook removed.
    WebhookRemoved,
    /// A repository's mapping to a Git source removed.
    MappingRemoved,
    /// A deployment confirmed as an alert's cause.
    CauseConfirmed,
    /// An alert's confirmed cause withdrawn.
    CauseWithdrawn,
    /// A withdrawal of a cause that was not (or no longer) confirmed: the form sent twice.
    NothingToWithdraw,
}

impl Done {
    const ALL: [Done; 7] = [
        Done::BridgeRevoked,
        Done::KeyRevoked,
        Done::WebhookRemoved,
        Done::MappingRemoved,
        Done::CauseConfirmed,
        Done::CauseWithdrawn,
        Done::NothingToWithdraw,
    ];

    fn code(self) -> &'static str {
        match self {
            Done::BridgeRevoked => "bridge-revoked",
            Done::KeyRevoked => "key-revoked",
            Done::WebhookRemoved => "webhook-removed",
            Done::MappingRemoved => "mapping-removed",
            Done::CauseConfirmed => "cause-confirmed",
            Done::CauseWithdrawn => "cause-withdrawn",
            Done::NothingToWithdraw => "nothing-to-withdraw",
        }
    }

    /// Where the form's redirect goes: `page`, with the query that says what was done to `name`
    /// (none when empty), checked under the session's `csrf` token.
    pub fn after(self, page: &str, name: &str, csrf: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("done", self.code());
        if !name.is_empty() {
            query.append_pair("name", name);
        }
        query.append_pair("check", &check(csrf, self.code(), name, page));
        format!("{page}?{}", query.finish())
    }

    /// The sentence for the query of the page at `path`, or `None` when it says nothing done,
    /// or its check is not this session's (`csrf`) and this page's.
    pub fn said(path: &str, query: Option<&str>, csrf: &str) -> Option<String> {
        let (mut done, mut name, mut checked) = (None, String::new(), String::new());
        for (key, value) in form_urlencoded::parse(query?.as_bytes()) {
            match key.as_ref() {
                "done" => done = Self::ALL.into_iter().find(|d| d.code() == value),
                "name" => name = value.into_owned(),
                "check" => checked = value.into_owned(),
                _ => {}
            }
        }
        let done = done?;
        let expected = check(csrf, done.code(), &name, path);
        if !crate::secrets::same(&expected, &checked) {
            return None;
        }
        let name = if shown(&name) {
            format!(" {name}")
        } else {
            String::new()
        };
        Some(match done {
            Done::BridgeRevoked => format!(
                "Bridge{name} revoked: its tokens no longer work and its tunnels are closed."
            ),
            Done::KeyRevoked => format!("Key{name} revoked: requests with it are refused."),
            Done::WebhookRemoved => "Webhook removed: nothing more is sent to it.".into(),
            Done::MappingRemoved => format!(
                "Mapping of{} removed: its deployments no longer list commits.",
                if name.is_empty() {
                    " the repository"
                } else {
                    &name
                }
            ),
            Done::CauseConfirmed => {
                "Cause confirmed: the deployment counts as failed in the change fail rate.".into()
            }
            Done::CauseWithdrawn => {
                "Confirmation withdrawn: the deployment no longer counts as failed for this alert."
                    .into()
            }
            Done::NothingToWithdraw => {
                "Nothing withdrawn: no confirmed cause to withdraw (withdrawn already?).".into()
            }
        })
    }
}

/// Whether `name` is one the sentence repeats: what bridge names, key ids and most repository
/// names are made of, and not too long to be one.
fn shown(name: &str) -> bool {
    (1..=200).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSRF: &str = "the-session-csrf-token";

    /// [`Done::said`] on the page a redirect to `url` shows.
    fn said_at(url: &str, csrf: &str) -> Option<String> {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        Done::said(path, Some(query), csrf)
    }

    #[test]
    fn a_redirect_says_what_was_done_to_what() {
        let url = Done::BridgeRevoked.after("/integrations/bridge", "dc1", CSRF);
        assert!(
            url.starts_with("/integrations/bridge?done=bridge-revoked&name=dc1&check="),
            "{url}"
        );
        assert_eq!(
            said_at(&url, CSRF).unwrap(),
            "Bridge dc1 revoked: its tokens no longer work and its tunnels are closed."
        );
        let url = Done::MappingRemoved.after("/integrations/repositories", "acme/api", CSRF);
        assert!(
            said_at(&url, CSRF)
                .unwrap()
                .starts_with("Mapping of acme/api removed")
        );
        let url = Done::WebhookRemoved.after("/integrations/notifications", "", CSRF);
        assert!(said_at(&url, CSRF).unwrap().starts_with("Webhook removed"));
    }

    #[test]
    fn a_link_made_elsewhere_says_nothing() {
        let url = Done::BridgeRevoked.after("/integrations/bridge", "dc1", CSRF);
        // Another session's link, an edited name, an unchecked one, an unknown outcome.
        assert_eq!(said_at(&url, "another-session"), None);
        let edited = url.replace("name=dc1", "name=production");
        assert_eq!(said_at(&edited, CSRF), None);
        assert_eq!(
            said_at("/integrations/bridge?done=bridge-revoked&name=dc1", CSRF),
            None
        );
        assert_eq!(
            said_at("/integrations/bridge?done=everything-deleted&name=x", CSRF),
            None
        );
        assert_eq!(Done::said("/integrations/bridge", None, CSRF), None);
        // The same link's query on another page (another alert's).
        let on_other = url.replace("/integrations/bridge", "/integrations/signals");
        assert_eq!(said_at(&on_other, CSRF), None);
        // A checked name the sentence cannot repeat is left out.
        let url = Done::KeyRevoked.after("/integrations/signals", "Call 0800 now!", CSRF);
        assert_eq!(
            said_at(&url, CSRF).unwrap(),
            "Key revoked: requests with it are refused."
        );
    }
}
