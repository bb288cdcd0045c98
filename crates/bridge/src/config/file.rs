//! The configuration file as written: strict (`deny_unknown_fields`), loosely typed, located.
//!
//! Every scalar keeps its line and column ([`Spanned`]) so that validation can point at it, and
//! numbers are read as `i64` and strings as `String` so that an out-of-range or misspelt value is
//! reported together with every other problem instead of stopping the parse. These types carry
//! raw secrets and therefore do not implement `Debug`.

use serde::Deserialize;
use serde_saphyr::Spanned;

/// The top level of the bridge's YAML file.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    pub token: Option<Spanned<String>>,
    pub name: Option<Spanned<String>>,
    pub api_url: Option<Spanned<String>>,
    pub heartbeat_interval: Option<Spanned<i64>>,
    pub reconnect_delay: Option<Spanned<i64>>,
    pub log_level: Option<Spanned<String>>,
    pub log_format: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub max_memory_mb: Option<Spanned<i64>>,
    pub proxy_url: Option<Spanned<String>>,
    pub tls_verify: Option<bool>,
    pub tls_ca_file: Option<Spanned<String>>,
    pub tls_cert_file: Option<Spanned<String>>,
    pub tls_key_file: Option<Spanned<String>>,
    pub state_dir: Option<Spanned<String>>,
    pub audit_log: Option<Spanned<String>>,
    pub health_check_port: Option<Spanned<i64>>,
    pub health_check_address: Option<Spanned<String>>,
    pub sources: Option<Vec<Spanned<SourceFile>>>,
    pub databases: Option<Vec<Spanned<DatabaseFile>>>,
    pub apis: Option<Vec<Spanned<ApiFile>>>,
    pub registries: Option<Vec<Spanned<RegistryFile>>>,
}

/// An entry of `sources`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourceFile {
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    pub name: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub auth: Option<Spanned<GitAuthFile>>,
    pub repositories: Option<Vec<Spanned<String>>>,
    pub allow_push: Option<bool>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub allow: Option<Vec<Spanned<AllowFile>>>,
    pub max_connections: Option<Spanned<i64>>,
    pub tls_ca_file: Option<Spanned<String>>,
}

/// `sources[].auth`: `token` (the default), `bearer` or `basic`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GitAuthFile {
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    pub token: Option<Spanned<String>>,
    pub username: Option<Spanned<String>>,
    pub password: Option<Spanned<String>>,
}

/// An entry of `databases`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DatabaseFile {
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    pub name: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub port: Option<Spanned<i64>>,
    pub database: Option<Spanned<String>>,
    pub credentials: Option<Spanned<CredentialsFile>>,
    pub max_connections: Option<Spanned<i64>>,
    pub sslmode: Option<Spanned<String>>,
    pub sslrootcert: Option<Spanned<String>>,
    pub read_only: Option<bool>,
    pub audit_statements: Option<bool>,
}

/// `databases[].credentials` and `registries[].auth`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CredentialsFile {
    pub username: Option<Spanned<String>>,
    pub password: Option<Spanned<String>>,
}

/// An entry of `apis`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApiFile {
    pub name: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub auth: Option<Spanned<ApiAuthFile>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub allow: Option<Vec<Spanned<AllowFile>>>,
    pub max_connections: Option<Spanned<i64>>,
    pub tls_ca_file: Option<Spanned<String>>,
}

/// `apis[].auth`: `basic` (the default), `bearer` or `header`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApiAuthFile {
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    pub username: Option<Spanned<String>>,
    pub password: Option<Spanned<String>>,
    pub token: Option<Spanned<String>>,
    pub name: Option<Spanned<String>>,
    pub value: Option<Spanned<String>>,
}

/// An entry of `registries`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegistryFile {
    pub name: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
    pub auth: Option<Spanned<CredentialsFile>>,
    pub token_hosts: Option<Vec<Spanned<String>>>,
    pub redirect_hosts: Option<Vec<Spanned<String>>>,
    pub allow_push: Option<bool>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub allow: Option<Vec<Spanned<AllowFile>>>,
    pub max_connections: Option<Spanned<i64>>,
    pub tls_ca_file: Option<Spanned<String>>,
}

/// `allow:` with nothing under it (every rule commented out) read as an empty list, not as no
/// key: both would admit every request, and validation refuses the empty list.
fn null_as_empty<'de, D>(d: D) -> Result<Option<Vec<Spanned<AllowFile>>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Some(
        Option::<Vec<Spanned<AllowFile>>>::deserialize(d)?.unwrap_or_default(),
    ))
}

/// An entry of an `allow` list.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AllowFile {
    pub method: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_survive_options_lists_and_structs() {
        let yaml = "name: a\napis:\n  - name: b\n    url: http://x\n    auth:\n      username: u\n";
        let file: FileConfig = serde_saphyr::from_str(yaml).unwrap();
        let name = file.name.unwrap();
        assert_eq!((name.referenced.line(), name.referenced.column()), (1, 7));
        let apis = file.apis.unwrap();
        let api = &apis[0];
        assert_eq!(api.referenced.line(), 3);
        let url = api.value.url.as_ref().unwrap();
        assert_eq!((url.referenced.line(), url.referenced.column()), (4, 10));
        let auth = api.value.auth.as_ref().unwrap();
        assert_eq!(auth.referenced.line(), 6);
    }

    #[test]
    fn unknown_keys_have_a_location() {
        let err = serde_saphyr::from_str::<FileConfig>("name: a\n\nheartbeat: 3\n")
            .err()
            .unwrap();
        let at = err.location().unwrap();
        eprintln!("{err}\n---\n{}", err.without_snippet());
        assert_eq!(at.line(), 3);
    }
}
