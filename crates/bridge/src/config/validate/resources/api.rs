//! `apis`: internal HTTP APIs and the credentials injected into their requests.

use crate::config::Secret;
use crate::config::error::Origin;
use crate::config::file::FileConfig;
use crate::config::resources::{Api, ApiAuth, ResourceKind};

use super::{AuthTypes, auth_type, max_connections, present_and_valid};
use crate::config::validate::fields::{Ctx, Names};

/// The `apis` entries that are valid; every fault is reported to `cx`.
pub(super) fn apis(cx: &mut Ctx<'_>, file: &FileConfig) -> Vec<Api> {
    let mut names = Names::new(ResourceKind::Api);
    let mut entries = Vec::new();
    for (i, spanned) in file.apis.iter().flatten().enumerate() {
        let (entry, at) = (&spanned.value, Origin::at(&spanned.referenced));
        let key = format!("apis[{i}]");
        let explicit = names.explicit(cx, entry.name.as_ref(), i);
        let url = cx
            .required(entry.url.as_ref(), &format!("{key}.url"), &at)
            .and_then(|given| cx.url(&given, &format!("{key}.url"), &["http", "https"], None));
        let auth = entry
            .auth
            .as_ref()
            .map(|auth| api_auth(cx, &auth.value, &Origin::at(&auth.referenced), &key));
        let allow = cx.allow_rules(entry.allow.as_ref(), &key, &at);
        let max_connections = max_connections(cx, entry.max_connections.as_ref(), &key);
        // Checked before an entry with errors is left out, so that all its errors show at once.
        let tls_ca_file = cx.path(entry.tls_ca_file.as_ref(), &format!("{key}.tls_ca_file"));
        let (Some(url), Some(auth)) = (url, present_and_valid(auth)) else {
            continue;
        };
        let base = url.host_str().unwrap_or_default().to_owned();
        let api = Api {
            name: String::new(),
            url,
            auth,
            allow,
            max_connections,
            tls_ca_file,
        };
        entries.push((explicit, base, api));
    }
    names.finish(entries, |api, name| api.name = name)
}

/// Headers an `apis[].auth` of `type: header` may not set: the bridge or HTTP own them.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];

/// `apis[].auth`: `type: basic` (the default; `username`, `password`), `bearer` (`token`) or
/// `header` (`name`, `value`).
fn api_auth(
    cx: &mut Ctx<'_>,
    auth: &crate::config::file::ApiAuthFile,
    at: &Origin,
    key: &str,
) -> Option<ApiAuth> {
    let auth_key = format!("{key}.auth");
    let types: AuthTypes<'_> = &[
        ("basic", &["username", "password"]),
        ("bearer", &["token"]),
        ("header", &["name", "value"]),
    ];
    let fields = [
        ("username", auth.username.as_ref()),
        ("password", auth.password.as_ref()),
        ("token", auth.token.as_ref()),
        ("name", auth.name.as_ref()),
        ("value", auth.value.as_ref()),
    ];
    let kind = auth_type(
        cx,
        &auth_key,
        at,
        (auth.kind.as_ref(), "basic"),
        types,
        &fields,
    )?;
    match kind.as_str() {
        "basic" => {
            let login = cx.credentials(
                auth.username.as_ref(),
                auth.password.as_ref(),
                at,
                &auth_key,
                false,
            );
            cx.basic_login(login, &auth_key, at).map(ApiAuth::Basic)
        }
        "bearer" => {
            let token_key = format!("{auth_key}.token");
            let token = cx.required(auth.token.as_ref(), &token_key, at);
            cx.header_secret(token, &token_key).map(ApiAuth::Bearer)
        }
        _ => {
            let name_key = format!("{auth_key}.name");
            let name = cx.required(auth.name.as_ref(), &name_key, at);
            let value = cx.required(auth.value.as_ref(), &format!("{auth_key}.value"), at);
            let name = name.and_then(|given| {
                let parsed = http::HeaderName::from_bytes(given.value.trim().as_bytes()).ok();
                match parsed {
                    Some(h) if !RESERVED_HEADERS.contains(&h.as_str()) => Some(h),
                    _ => {
                        let msg = format!(
                            "expected an HTTP header name such as X-API-Key (not Host, Content-Length or a hop-by-hop header), got {:?}",
                            given.value
                        );
                        cx.fail(&name_key, &given.origin, msg);
                        None
                    }
                }
            });
            let value = value.and_then(|given| {
                if http::HeaderValue::from_str(&given.value).is_ok() {
                    Some(Secret::new(given.value))
                } else {
                    cx.fail(
                        &format!("{auth_key}.value"),
                        &given.origin,
                        "expected printable text without line breaks",
                    );
                    None
                }
            });
            Some(ApiAuth::Header {
                name: name?,
                value: value?,
            })
        }
    }
}
