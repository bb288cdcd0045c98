//! Field-level checks shared by the top level and the resource lists: expanded strings,
//! ranged integers, URLs, logins, `allow` rules and resource names. Each records what is wrong
//! in [`Ctx::problems`] and returns `None`, so one pass reports everything.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_saphyr::Spanned;
use url::Url;

use crate::config::Secret;
use crate::config::env::Env;
use crate::config::error::{Origin, Problem};
use crate::config::expand::expand;
use crate::config::file::AllowFile;
use crate::config::resources::{
    AllowRule, Credentials, NAME_RULE, ResourceKind, claim_unique, derive_name, is_valid_name,
};

/// A value and where it came from.
pub(crate) struct Given<T> {
    pub value: T,
    pub origin: Origin,
}

/// A file integer with its place.
pub(crate) fn located(value: &Spanned<i64>) -> Given<i64> {
    Given {
        value: value.value,
        origin: Origin::at(&value.referenced),
    }
}

/// The validation pass: the environment and the problems found so far.
pub(crate) struct Ctx<'a> {
    pub env: &'a dyn Env,
    pub problems: Vec<Problem>,
}

impl Ctx<'_> {
    /// Records a problem with `key`.
    pub fn fail(&mut self, key: &str, origin: &Origin, message: impl Into<String>) {
        self.problems
            .push(Problem::new(key, origin.clone(), message));
    }

    /// A file string with `${NAME}` references expanded.
    pub fn string(&mut self, value: &Spanned<String>, key: &str) -> Option<Given<String>> {
        let origin = Origin::at(&value.referenced);
        match expand(&value.value, self.env) {
            Ok(value) => Some(Given { value, origin }),
            Err(errors) => {
                for error in errors {
                    self.fail(key, &origin, error.message());
                }
                None
            }
        }
    }

    /// An optional file string, expanded.
    pub fn optional(
        &mut self,
        value: Option<&Spanned<String>>,
        key: &str,
    ) -> Option<Given<String>> {
        value.and_then(|value| self.string(value, key))
    }

    /// An optional file path: non-empty when given.
    pub fn path(&mut self, value: Option<&Spanned<String>>, key: &str) -> Option<PathBuf> {
        let given = self.optional(value, key)?;
        if given.value.trim().is_empty() {
            self.fail(
                key,
                &given.origin,
                "expected a file path, got an empty string",
            );
            return None;
        }
        Some(PathBuf::from(given.value))
    }

    /// A required, non-empty file string; `parent` locates the entry when the key is missing.
    pub fn required(
        &mut self,
        value: Option<&Spanned<String>>,
        key: &str,
        parent: &Origin,
    ) -> Option<Given<String>> {
        let Some(value) = value else {
            self.fail(key, parent, "required");
            return None;
        };
        let given = self.string(value, key)?;
        if given.value.trim().is_empty() {
            self.fail(key, &given.origin, "must not be empty");
            return None;
        }
        Some(given)
    }

    /// The environment variable `var` when set and non-empty, else the file's value.
    pub fn overridden(
        &mut self,
        file: Option<&Spanned<String>>,
        key: &str,
        var: &'static str,
    ) -> Option<Given<String>> {
        match self.env.get_non_empty(var) {
            Some(value) => Some(Given {
                value,
                origin: Origin::Env(var),
            }),
            None => self.optional(file, key),
        }
    }

    /// An integer in `range`, else a problem saying `expected`.
    pub fn int(
        &mut self,
        value: Option<Given<i64>>,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
        expected: &str,
    ) -> Option<i64> {
        let given = value?;
        if range.contains(&given.value) {
            Some(given.value)
        } else {
            let msg = format!("expected {expected}, got {}", given.value);
            self.fail(key, &given.origin, msg);
            None
        }
    }

    /// The environment variable `var` parsed as an integer when set, else the file's value.
    pub fn overridden_int(
        &mut self,
        file: Option<&Spanned<i64>>,
        key: &str,
        var: &'static str,
    ) -> Option<Given<i64>> {
        let Some(text) = self.env.get_non_empty(var) else {
            return file.map(located);
        };
        let origin = Origin::Env(var);
        match text.trim().parse() {
            Ok(value) => Some(Given { value, origin }),
            Err(_) => {
                self.fail(
                    key,
                    &origin,
                    format!("expected a whole number, got {text:?}"),
                );
                None
            }
        }
    }

    /// An absolute URL with one of `schemes`, a host and no credentials. When the value has
    /// no `://` and `bare_scheme` is given, that scheme is assumed. The value is not echoed.
    pub fn url(
        &mut self,
        given: &Given<String>,
        key: &str,
        schemes: &[&str],
        bare_scheme: Option<&str>,
    ) -> Option<Url> {
        let expected = format!("expected an absolute {} URL", schemes.join(" or "));
        let text = match bare_scheme {
            Some(scheme) if !given.value.contains("://") => format!("{scheme}://{}", given.value),
            _ => given.value.trim().to_owned(),
        };
        let url = match Url::parse(&text) {
            Ok(url) => url,
            Err(err) => {
                self.fail(key, &given.origin, format!("{expected} ({err})"));
                return None;
            }
        };
        if !schemes.contains(&url.scheme()) {
            self.fail(
                key,
                &given.origin,
                format!("{expected}, got scheme {:?}", url.scheme()),
            );
        } else if url.host_str().is_none_or(str::is_empty) {
            self.fail(key, &given.origin, format!("{expected} with a host"));
        } else if url.port() == Some(0) {
            self.fail(
                key,
                &given.origin,
                "port 0 is no port to connect to: give the port the server listens on (or none for the scheme's own)",
            );
        } else if !url.username().is_empty() || url.password().is_some() {
            let why = if key == "api_url" {
                "the cloud's URL takes no credentials: the bridge signs in with its token (SERVICE_BRIDGE_TOKEN or `token:`)"
            } else {
                "credentials belong in `auth`, not in the URL"
            };
            self.fail(key, &given.origin, why);
        } else if url.query().is_some() || url.fragment().is_some() {
            self.fail(
                key,
                &given.origin,
                "expected a base URL without ?query or #fragment (the caller's path and query are appended to it)",
            );
        } else {
            return Some(url);
        }
        None
    }

    /// A resource's `allow` list (its entry at `entry`). An empty list is refused: written out,
    /// it reads as "nothing", yet no rules means every request.
    pub fn allow_rules(
        &mut self,
        list: Option<&Vec<Spanned<AllowFile>>>,
        key: &str,
        entry: &Origin,
    ) -> Vec<AllowRule> {
        if list.is_some_and(Vec::is_empty) {
            let msg = "an empty list (or the key with nothing under it) is refused: it reads as admitting no request, which no entry is for; list the rules to admit, or leave the key out to admit every request";
            self.fail(&format!("{key}.allow"), entry, msg);
        }
        let mut rules = Vec::new();
        for (i, rule) in list.into_iter().flatten().enumerate() {
            let key = format!("{key}.allow[{i}]");
            let at = Origin::at(&rule.referenced);
            let method = self.required(rule.value.method.as_ref(), &format!("{key}.method"), &at);
            let path = self.required(rule.value.path.as_ref(), &format!("{key}.path"), &at);
            let method = method.and_then(|m| {
                let upper = m.value.trim().to_ascii_uppercase();
                if upper == "*" || upper.bytes().all(|b| b.is_ascii_uppercase()) {
                    Some(upper)
                } else {
                    let msg = "expected an HTTP method such as GET, or * for any";
                    self.fail(&format!("{key}.method"), &m.origin, msg);
                    None
                }
            });
            let path = path.and_then(|p| {
                let msg = if !(p.value.starts_with('/') || p.value.starts_with('*')) {
                    "expected a path pattern starting with / or *"
                } else if p.value.contains(['?', '#', ' ']) {
                    "expected a path pattern without ?query, #fragment or spaces: rules match the path as sent (a space is %20, the query is not part of it), so this one would match nothing"
                } else {
                    return Some(p.value);
                };
                self.fail(&format!("{key}.path"), &p.origin, msg);
                None
            });
            if let (Some(method), Some(path)) = (method, path) {
                rules.push(AllowRule { method, path });
            }
        }
        rules
    }

    /// A login (`credentials` or `auth`) at `at`: username required, password required unless
    /// `password_optional`.
    pub fn credentials(
        &mut self,
        username: Option<&Spanned<String>>,
        password: Option<&Spanned<String>>,
        at: &Origin,
        key: &str,
        password_optional: bool,
    ) -> Option<Credentials> {
        let username = self.required(username, &format!("{key}.username"), at);
        let password_key = format!("{key}.password");
        let password = match (password, password_optional) {
            (Some(p), _) => self.string(p, &password_key).map(|g| Secret::new(g.value)),
            (None, true) => Some(Secret::default()),
            (None, false) => {
                self.fail(&password_key, at, "required");
                None
            }
        };
        Some(Credentials {
            username: username?.value,
            password: password?,
        })
    }

    /// A secret sent as it is in an HTTP header (a bearer token, the bridge's own token): text
    /// a header can carry. A line break (the last line of a secret file, read whole) would
    /// otherwise leave the request without its credential.
    pub fn header_secret(&mut self, given: Option<Given<String>>, key: &str) -> Option<Secret> {
        let given = given?;
        if http::HeaderValue::from_str(&given.value).is_ok() {
            return Some(Secret::new(given.value));
        }
        let why = if given.value.ends_with(['\n', '\r']) {
            "it ends with a line break, as a file's last line does: remove it"
        } else {
            "it holds a control character or a line break"
        };
        let msg = format!("expected printable text without line breaks ({why})");
        self.fail(key, &given.origin, msg);
        None
    }

    /// The user name of an HTTP Basic login, which the server splits from the password at the
    /// first `:`.
    pub fn basic_login(
        &mut self,
        login: Option<Credentials>,
        key: &str,
        at: &Origin,
    ) -> Option<Credentials> {
        let login = login?;
        if login.username.contains(':') {
            self.fail(
                &format!("{key}.username"),
                at,
                "must not contain `:`: HTTP Basic splits the user name from the password at the first colon (a colon belongs in the password)",
            );
            return None;
        }
        Some(login)
    }

    /// An optional `type` key that, when given, must be one of `allowed` (case-insensitive).
    pub fn kind(&mut self, value: Option<&Spanned<String>>, key: &str, allowed: &[&str]) {
        if let Some(given) = self.optional(value, key) {
            let lower = given.value.trim().to_ascii_lowercase();
            if !allowed.contains(&lower.as_str()) {
                let msg = format!("expected {}, got {:?}", allowed.join(" or "), given.value);
                self.fail(key, &given.origin, msg);
            }
        }
    }
}

/// Names within one resource list: explicit names first (checked and unique), then names
/// derived from each entry and made unique.
pub(crate) struct Names {
    kind: ResourceKind,
    list: &'static str,
    taken: HashMap<String, usize>,
}

impl Names {
    /// Names for the list of `kind` (`apis`, ...).
    pub fn new(kind: ResourceKind) -> Self {
        Self {
            kind,
            list: kind.list_key(),
            taken: HashMap::new(),
        }
    }

    /// Checks entry `index`'s explicit `name` and claims it.
    pub fn explicit(
        &mut self,
        cx: &mut Ctx<'_>,
        value: Option<&Spanned<String>>,
        index: usize,
    ) -> Option<String> {
        let key = format!("{}[{index}].name", self.list);
        let given = cx.optional(value, &key)?;
        if !is_valid_name(&given.value) {
            cx.fail(
                &key,
                &given.origin,
                format!("expected {NAME_RULE}, got {:?}", given.value),
            );
            return None;
        }
        if let Some(first) = self.taken.get(&given.value) {
            let msg = format!(
                "{:?} is already the name of {}[{first}]",
                given.value, self.list
            );
            cx.fail(&key, &given.origin, msg);
            return None;
        }
        self.taken.insert(given.value.clone(), index);
        Some(given.value)
    }

    /// Gives each entry its explicit name or a unique derived one.
    pub fn finish<T>(
        self,
        entries: Vec<(Option<String>, String, T)>,
        set: impl Fn(&mut T, String),
    ) -> Vec<T> {
        let fallback = self.kind.as_str();
        let mut taken = self.taken.into_keys().collect();
        entries
            .into_iter()
            .map(|(explicit, base, mut entry)| {
                let name = explicit
                    .unwrap_or_else(|| claim_unique(&derive_name(&base, fallback), &mut taken));
                set(&mut entry, name);
                entry
            })
            .collect()
    }
}
