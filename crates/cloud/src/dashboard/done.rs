//! What a form just did, said once on the page its redirect leads to. A revocation or a
//! removal otherwise shows only as a row gone from a table, which a screen-reader user is not
//! told. The redirect carries `?done=WHAT&name=NAME`; a name with characters that no bridge
//! name, key id or repository the dashboard shows has is left out of the sentence, so that a
//! crafted link cannot put words of its own on the page.

use url::form_urlencoded;

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
}

impl Done {
    const ALL: [Done; 4] = [
        Done::BridgeRevoked,
        Done::KeyRevoked,
        Done::WebhookRemoved,
        Done::MappingRemoved,
    ];

    fn code(self) -> &'static str {
        match self {
            Done::BridgeRevoked => "bridge-revoked",
            Done::KeyRevoked => "key-revoked",
            Done::WebhookRemoved => "webhook-removed",
            Done::MappingRemoved => "mapping-removed",
        }
    }

    /// Where the form's redirect goes: `page`, with the query that says what was done to `name`
    /// (none when empty).
    pub fn after(self, page: &str, name: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("done", self.code());
        if !name.is_empty() {
            query.append_pair("name", name);
        }
        format!("{page}?{}", query.finish())
    }

    /// The sentence for a page's query, or `None` when it says nothing done.
    pub fn said(query: Option<&str>) -> Option<String> {
        let (mut done, mut name) = (None, None);
        for (key, value) in form_urlencoded::parse(query?.as_bytes()) {
            match key.as_ref() {
                "done" => done = Self::ALL.into_iter().find(|d| d.code() == value),
                "name" if shown(&value) => name = Some(value.into_owned()),
                _ => {}
            }
        }
        let name = name.map(|n| format!(" {n}")).unwrap_or_default();
        Some(match done? {
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
        })
    }
}

/// Whether `name` is one the sentence may repeat: what bridge names, key ids and repository
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

    fn query(url: &str) -> Option<&str> {
        url.split_once('?').map(|(_, q)| q)
    }

    #[test]
    fn a_redirect_says_what_was_done_to_what() {
        let url = Done::BridgeRevoked.after("/integrations/bridge", "dc1");
        assert_eq!(url, "/integrations/bridge?done=bridge-revoked&name=dc1");
        assert_eq!(
            Done::said(query(&url)).unwrap(),
            "Bridge dc1 revoked: its tokens no longer work and its tunnels are closed."
        );
        let url = Done::MappingRemoved.after("/integrations/repositories", "acme/api");
        assert!(
            Done::said(query(&url))
                .unwrap()
                .starts_with("Mapping of acme/api removed")
        );
    }

    #[test]
    fn a_crafted_name_is_left_out_and_an_unknown_outcome_says_nothing() {
        let said = Done::said(Some("done=key-revoked&name=Call+0800+now%21")).unwrap();
        assert_eq!(said, "Key revoked: requests with it are refused.");
        assert_eq!(Done::said(Some("done=everything-deleted&name=x")), None);
        assert_eq!(Done::said(Some("name=dc1")), None);
        assert_eq!(Done::said(None), None);
    }
}
