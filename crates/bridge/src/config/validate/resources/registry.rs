//! `registries`: container registries, their login and the hosts their answers may name.

use crate::config::error::Origin;
use crate::config::file::FileConfig;
use crate::config::resources::{Registry, ResourceKind};

use super::{max_connections, present_and_valid};
use crate::config::validate::fields::{Ctx, Names};

/// `registries[].token_hosts` and `redirect_hosts`: `host` or `host:port` each, lowercased.
fn hosts(
    cx: &mut Ctx<'_>,
    list: Option<&Vec<serde_saphyr::Spanned<String>>>,
    key: &str,
    field: &str,
) -> Vec<String> {
    let mut hosts = Vec::new();
    for (j, item) in list.into_iter().flatten().enumerate() {
        let item_key = format!("{key}.{field}[{j}]");
        let Some(given) = cx.string(item, &item_key) else {
            continue;
        };
        let text = given.value.trim();
        // Stored as the URL parser spells it (lowercase, IDNA, the port only when given), so
        // that it compares with the hosts a registry's answers name.
        let parsed = url::Url::parse(&format!("https://{text}/"))
            .ok()
            .filter(|u| {
                u.host_str().is_some()
                    && u.path() == "/"
                    && u.username().is_empty()
                    && u.query().is_none()
                    && !text.contains(['/', '@', '?', '#'])
            });
        if let Some(u) = parsed {
            let host = u.host_str().unwrap_or_default();
            hosts.push(
                match text
                    .rsplit_once(':')
                    .filter(|(_, p)| p.parse::<u16>().is_ok())
                {
                    Some((_, port)) => format!("{host}:{port}"),
                    None => host.to_string(),
                },
            );
        } else {
            let msg = format!(
                "expected a host or host:port, like \"storage.internal\" or \"storage.internal:8443\", got {:?}",
                given.value
            );
            cx.fail(&item_key, &given.origin, msg);
        }
    }
    hosts
}

/// Why `name` cannot be part of an image name (`CLOUD/{bridge}/{registry}/{repository}`).
pub(in crate::config::validate) fn image_name_rule(name: &str) -> String {
    format!(
        "expected lowercase letters and digits, with '.', '_' or '-' only between them (it becomes part of image names: CLOUD/BRIDGE/REGISTRY/REPOSITORY), got {name:?}"
    )
}

/// The `registries` entries that are valid; every fault is reported to `cx`.
pub(super) fn registries(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Registry> {
    let mut names = Names::new(ResourceKind::Registry);
    let mut entries = Vec::new();
    let mut places = Vec::new();
    for (i, spanned) in file.registries.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("registries[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        let url_key = format!("{key}.url");
        let url = cx
            .required(entry.url.as_ref(), &url_key, &at)
            .and_then(|given| cx.url(&given, &url_key, &["http", "https"], Some("https")));
        // The API's own path, pasted: the bridge adds `/v2/` to the root itself.
        let url = url.filter(|u| {
            let api_path = matches!(u.path().trim_end_matches('/').rsplit('/').next(), Some("v2"));
            if api_path {
                let origin = entry
                    .url
                    .as_ref()
                    .map_or(at.clone(), |u| Origin::at(&u.referenced));
                cx.fail(
                    &url_key,
                    &origin,
                    format!("{u} ends in the registry API's /v2/: give the registry's root (the bridge adds /v2/ itself)"),
                );
            }
            !api_path
        });
        let auth = entry.auth.as_ref().map(|auth| {
            let (at, auth_key) = (Origin::at(&auth.referenced), format!("{key}.auth"));
            let login = cx.credentials(
                auth.value.username.as_ref(),
                auth.value.password.as_ref(),
                &at,
                &auth_key,
                false,
            );
            cx.basic_login(login, &auth_key, &at)
        });
        let allow = cx.allow_rules(entry.allow.as_ref(), &key, &at);
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        let token_hosts = hosts(cx, entry.token_hosts.as_ref(), &key, "token_hosts");
        let redirect_hosts = hosts(cx, entry.redirect_hosts.as_ref(), &key, "redirect_hosts");
        if let Some(name) = &explicit
            && !tunnel::oci::is_path_component(name)
        {
            let origin = entry
                .name
                .as_ref()
                .map_or(at.clone(), |n| Origin::at(&n.referenced));
            cx.fail(&format!("{key}.name"), &origin, image_name_rule(name));
        }
        // Checked before an entry with errors is left out, so that all its errors show at once.
        let tls_ca_file = cx.path(entry.tls_ca_file.as_ref(), &format!("{key}.tls_ca_file"));
        let (Some(url), Some(auth)) = (url, present_and_valid(auth)) else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let registry = Registry {
            name: String::new(),
            url,
            auth,
            token_hosts,
            redirect_hosts,
            allow_push: entry.allow_push.unwrap_or(false),
            allow,
            max_connections,
            tls_ca_file,
        };
        places.push((key, at, entry.name.is_none()));
        entries.push((explicit, base, registry));
    }
    let registries = names.finish(entries, |registry, name| registry.name = name);
    // A name derived from the URL's host must fit an image name too (`a--b`, `xn--…` do not).
    for (registry, (key, at, derived)) in registries.iter().zip(&places) {
        if *derived && !tunnel::oci::is_path_component(&registry.name) {
            let msg = format!(
                "{} (derived from the url); give the entry a name",
                image_name_rule(&registry.name)
            );
            cx.fail(&format!("{key}.name"), at, msg);
        }
    }
    registries
}
