//! The outbound proxy: its URL (credentials masked) and the `NO_PROXY` exceptions.

use std::fmt;

use url::Url;

use super::Secret;

/// An HTTP `CONNECT` proxy URL (`http://` or `https://`). The password in its userinfo is
/// masked by `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl(Url);

impl ProxyUrl {
    /// Parses a proxy URL; a value without a scheme (`proxy.corp:3128`, as `HTTPS_PROXY` often
    /// holds) is read as `http://`. The user name and password are everything before the last
    /// `@`, taken as typed: a password from `${PROXY_PASSWORD}` may hold `@`, `#`, `/` or `?`
    /// (only `%` starts an escape: `%25` is one `%`). The error says what was expected without
    /// echoing the value, and no part of the password can be read as the host.
    pub fn parse(value: &str) -> Result<Self, String> {
        let value = value.trim();
        // A scheme is letters, digits, `+`, `-` or `.` (RFC 3986): a `://` inside a password
        // of a value written without one does not make one.
        let is_scheme = |s: &str| {
            s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        };
        let (scheme, rest) = match value.split_once("://") {
            Some((scheme, rest)) if is_scheme(scheme) => (scheme, rest),
            _ => ("http", value),
        };
        let (userinfo, address) = match rest.rsplit_once('@') {
            Some((userinfo, address)) => (Some(userinfo), address),
            None => (None, rest),
        };
        let mut url = Url::parse(&format!("{scheme}://{address}"))
            .map_err(|err| format!("expected a proxy URL like http://proxy:3128 ({err})"))?;
        if let Some(userinfo) = userinfo {
            let (user, password) = match userinfo.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (userinfo, None),
            };
            // The url crate escapes what a userinfo cannot hold; an escape typed stays one.
            if url.set_username(user).is_err() || url.set_password(password).is_err() {
                return Err("expected a proxy URL like http://user:pass@proxy:3128".to_owned());
            }
        }
        if url.scheme() != "http" {
            return Err(format!(
                "expected an http:// proxy URL (the CONNECT and its credentials go in clear to the proxy; TLS to the proxy is not supported), got scheme {:?}",
                url.scheme()
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err("expected a proxy URL with a host".to_owned());
        }
        Ok(Self(url))
    }

    /// The URL, including any credentials.
    pub fn url(&self) -> &Url {
        &self.0
    }

    /// The proxy's host.
    pub fn host(&self) -> &str {
        self.0.host_str().unwrap_or_default()
    }

    /// The proxy's port (the scheme's default when not given).
    pub fn port(&self) -> u16 {
        self.0.port_or_known_default().unwrap_or(80)
    }

    /// The user name and password from the userinfo, percent-decoded, for
    /// `Proxy-Authorization: Basic`.
    pub fn credentials(&self) -> Option<(String, Secret)> {
        if self.0.username().is_empty() {
            return None;
        }
        // `%XX` escapes decoded (userinfo never uses `+` for a space).
        let decode = |s: &str| crate::rules::decoded(s).into_owned();
        let password = self.0.password().map(decode).unwrap_or_default();
        Some((decode(self.0.username()), Secret::new(password)))
    }
}

impl fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.clone();
        if shown.password().is_some() {
            // Cannot fail: the URL already has a host, the only precondition.
            let _ = shown.set_password(Some("***"));
        }
        f.write_str(shown.as_str())
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProxyUrl({self})")
    }
}

/// Parses a `NO_PROXY` list: comma- or space-separated host names, domain suffixes
/// (`.corp.example` or `corp.example`, both matching subdomains), `host:port`, address ranges
/// (`10.0.0.0/8`, `fd00::/8`, matching an address host), or `*`.
pub fn parse_no_proxy(value: &str) -> Vec<String> {
    value
        .split([',', ' '])
        .map(|entry| entry.trim().to_ascii_lowercase())
        .filter(|entry| !entry.is_empty())
        .collect()
}

/// True when `host` (with `port`) is excluded from proxying by the `no_proxy` entries.
pub fn bypasses_proxy(no_proxy: &[String], host: &str, port: u16) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    no_proxy.iter().any(|entry| {
        if entry == "*" {
            return true;
        }
        if let Some((network, prefix)) = entry.split_once('/') {
            // `10.0.0.0/8:443`: the range on that port only.
            return match prefix.split_once(':') {
                Some((prefix, only)) => {
                    only.parse() == Ok(port) && in_range(&host, network, prefix)
                }
                None => in_range(&host, network, prefix),
            };
        }
        let (pattern, entry_port) = match entry.rsplit_once(':') {
            Some((name, p)) if !name.contains(':') || name.ends_with(']') => {
                (name, p.parse::<u16>().ok())
            }
            _ => (entry.as_str(), None),
        };
        if entry_port.is_some_and(|p| p != port) {
            return false;
        }
        let pattern = pattern
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_start_matches('*')
            .trim_start_matches('.');
        host == pattern
            || host
                .strip_suffix(pattern)
                .is_some_and(|prefix| prefix.ends_with('.'))
    })
}

/// Whether `host` is an address within `network/prefix` (`10.0.0.0/8`, `[fd00::]/8`).
fn in_range(host: &str, network: &str, prefix: &str) -> bool {
    use std::net::IpAddr;
    let network = network.trim_start_matches('[').trim_end_matches(']');
    let (Ok(host), Ok(network), Ok(prefix)) = (
        host.parse::<IpAddr>(),
        network.parse::<IpAddr>(),
        prefix.parse::<u32>(),
    ) else {
        return false;
    };
    match (host, network) {
        (IpAddr::V4(h), IpAddr::V4(n)) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            u32::from(h) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(h), IpAddr::V6(n)) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            u128::from(h) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_masks_credentials() {
        let proxy = ProxyUrl::parse("http://alice:s%40cret+x@proxy.corp:3128").unwrap();
        assert_eq!(proxy.host(), "proxy.corp");
        assert_eq!(proxy.port(), 3128);
        let (user, password) = proxy.credentials().unwrap();
        assert_eq!((user.as_str(), password.expose()), ("alice", "s@cret+x"));
        assert!(!format!("{proxy:?} {proxy}").contains("cret"));
    }

    /// A password put in from a variable is taken as typed, whatever it holds: no part of it
    /// becomes the host, the port or a fragment.
    #[test]
    fn a_password_with_url_delimiters_stays_the_password() {
        let without_scheme = ProxyUrl::parse("user:a://b@proxy.corp:3128").unwrap();
        assert_eq!(without_scheme.host(), "proxy.corp");
        assert_eq!(without_scheme.credentials().unwrap().1.expose(), "a://b");
        for password in ["a@SECRET#c", "Pa/ss?x", "p:w@d", "50%25 off"] {
            let proxy =
                ProxyUrl::parse(&format!("http://squser:{password}@127.0.0.1:3128")).unwrap();
            assert_eq!(
                (proxy.host(), proxy.port()),
                ("127.0.0.1", 3128),
                "{password}"
            );
            let (user, got) = proxy.credentials().unwrap();
            let expected = password.replace("%25", "%");
            assert_eq!((user.as_str(), got.expose()), ("squser", expected.as_str()));
            assert!(!proxy.to_string().contains("SECRET"), "{proxy}");
        }
        let err = ProxyUrl::parse("http://u:SECRET#x@proxy:notaport").unwrap_err();
        assert!(
            !err.contains("SECRET") && err.contains("invalid port"),
            "{err}"
        );
    }

    #[test]
    fn bare_host_port_means_http() {
        let proxy = ProxyUrl::parse("proxy.corp:8080").unwrap();
        assert_eq!(proxy.url().scheme(), "http");
        assert_eq!(proxy.port(), 8080);
        assert!(proxy.credentials().is_none());
        assert!(ProxyUrl::parse("socks5://proxy:1080").is_err());
    }

    #[test]
    fn no_proxy_matches_hosts_suffixes_and_ports() {
        let list = parse_no_proxy("localhost, .corp.example,internal.example:8443 ,10.0.0.1");
        assert!(bypasses_proxy(&list, "localhost", 443));
        assert!(bypasses_proxy(&list, "git.corp.example", 443));
        assert!(bypasses_proxy(&list, "corp.example", 443));
        assert!(!bypasses_proxy(&list, "notcorp.example", 443));
        assert!(bypasses_proxy(&list, "internal.example", 8443));
        assert!(!bypasses_proxy(&list, "internal.example", 443));
        assert!(bypasses_proxy(&list, "10.0.0.1", 443));
        assert!(!bypasses_proxy(&list, "cloud.example", 443));
        assert!(bypasses_proxy(&parse_no_proxy("*"), "anything", 1));
    }

    /// curl's address ranges: `127.0.0.0/8` keeps every loopback address off the proxy.
    #[test]
    fn no_proxy_matches_address_ranges() {
        let list = parse_no_proxy("127.0.0.0/8,10.1.0.0/16, fd00::/8, 0.0.0.0/0x");
        assert!(bypasses_proxy(&list, "127.0.0.1", 443));
        assert!(bypasses_proxy(&list, "127.200.3.4", 443));
        assert!(bypasses_proxy(&list, "10.1.255.1", 443));
        assert!(!bypasses_proxy(&list, "10.2.0.1", 443));
        assert!(bypasses_proxy(&list, "[fd12::1]", 443));
        assert!(!bypasses_proxy(&list, "[fe80::1]", 443));
        assert!(
            !bypasses_proxy(&list, "localhost", 443),
            "names are not addresses"
        );
        assert!(bypasses_proxy(&parse_no_proxy("0.0.0.0/0"), "192.0.2.1", 1));
        assert!(!bypasses_proxy(
            &parse_no_proxy("10.0.0.0/33"),
            "10.0.0.1",
            1
        ));
        let on_port = parse_no_proxy("10.0.0.0/8:8443");
        assert!(bypasses_proxy(&on_port, "10.1.2.3", 8443));
        assert!(!bypasses_proxy(&on_port, "10.1.2.3", 443));
    }
}
