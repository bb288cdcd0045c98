//! `sources`: Git servers, their authentication and `repositories` globs.

use crate::config::Secret;
use crate::config::error::Origin;
use crate::config::file::FileConfig;
use crate::config::resources::{Credentials, GitAuth, GitSource, ResourceKind};

use super::{AuthTypes, auth_type, max_connections, present_and_valid};
use crate::config::validate::fields::{Ctx, Names};

/// The `sources` entries that are valid; every fault is reported to `cx`.
pub(super) fn sources(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<GitSource> {
    let mut names = Names::new(ResourceKind::Git);
    let mut entries = Vec::new();
    for (i, spanned) in file.sources.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("sources[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        cx.kind(entry.kind.as_ref(), &format!("{key}.type"), &["git"]);
        let url = cx
            .required(entry.url.as_ref(), &format!("{key}.url"), &at)
            .and_then(|given| cx.url(&given, &format!("{key}.url"), &["http", "https"], None));
        let auth = entry
            .auth
            .as_ref()
            .map(|auth| git_auth(cx, &auth.value, &Origin::at(&auth.referenced), &key));
        let repositories = repositories(cx, entry.repositories.as_ref(), &key);
        let allow = cx.allow_rules(entry.allow.as_ref(), &key, &at);
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        // Checked before an entry with errors is left out, so that all its errors show at once.
        let tls_ca_file = cx.path(entry.tls_ca_file.as_ref(), &format!("{key}.tls_ca_file"));
        let (Some(url), Some(auth), Some(repositories)) =
            (url, present_and_valid(auth), repositories)
        else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let source = GitSource {
            name: String::new(),
            url,
            auth,
            repositories,
            allow_push: entry.allow_push.unwrap_or(false),
            allow,
            max_connections,
            tls_ca_file,
        };
        entries.push((explicit, base, source));
    }
    names.finish(entries, |source, name| source.name = name)
}

/// `sources[].auth`: `type: token` (the default; `token`, optional `username`), `bearer`
/// (`token`) or `basic` (`username`, `password`).
fn git_auth(
    cx: &mut Ctx<'_>,
    auth: &crate::config::file::GitAuthFile,
    at: &Origin,
    key: &str,
) -> Option<GitAuth> {
    let auth_key = format!("{key}.auth");
    let types: AuthTypes<'_> = &[
        ("token", &["token", "username"]),
        ("bearer", &["token"]),
        ("basic", &["username", "password"]),
    ];
    let fields = [
        ("token", auth.token.as_ref()),
        ("username", auth.username.as_ref()),
        ("password", auth.password.as_ref()),
    ];
    let kind = auth_type(
        cx,
        &auth_key,
        at,
        (auth.kind.as_ref(), "token"),
        types,
        &fields,
    )?;
    let token_key = format!("{auth_key}.token");
    match kind.as_str() {
        "token" => {
            let token = cx.required(auth.token.as_ref(), &token_key, at);
            let username = cx
                .optional(auth.username.as_ref(), &format!("{auth_key}.username"))
                .map(|given| given.value);
            // Sent as HTTP Basic: the user name is checked as a Basic login's.
            let login = token.map(|token| Credentials {
                username: username.unwrap_or_default(),
                password: Secret::new(token.value),
            });
            let login = cx.basic_login(login, &auth_key, at)?;
            Some(GitAuth::Token {
                username: Some(login.username).filter(|u| !u.is_empty()),
                token: login.password,
            })
        }
        "bearer" => {
            let token = cx.required(auth.token.as_ref(), &token_key, at);
            cx.header_secret(token, &token_key).map(GitAuth::Bearer)
        }
        _ => {
            let login = cx.credentials(
                auth.username.as_ref(),
                auth.password.as_ref(),
                at,
                &auth_key,
                false,
            );
            cx.basic_login(login, &auth_key, at).map(GitAuth::Basic)
        }
    }
}

/// `sources[].repositories`: globs of repository paths, each starting with a letter, digit or
/// `*` (a path relative to the source's `url`), without `..` or `\\`.
fn repositories(
    cx: &mut Ctx<'_>,
    list: Option<&Vec<serde_saphyr::Spanned<String>>>,
    key: &str,
) -> Option<Vec<String>> {
    let mut globs = Vec::new();
    let mut ok = true;
    for (j, item) in list.into_iter().flatten().enumerate() {
        let item_key = format!("{key}.repositories[{j}]");
        let Some(given) = cx.string(item, &item_key) else {
            ok = false;
            continue;
        };
        let glob = given.value.trim().trim_start_matches('/').to_string();
        let bad = glob.is_empty()
            || glob.contains('\\')
            || glob.contains('?')
            || glob.split('/').any(|seg| seg == ".." || seg == ".");
        if bad {
            let msg = format!(
                "expected a repository path or glob relative to the source's url, like \"team/*\" or \"infra/deploy.git\", got {:?}",
                given.value
            );
            cx.fail(&item_key, &given.origin, msg);
            ok = false;
        } else {
            globs.push(glob);
        }
    }
    ok.then_some(globs)
}
