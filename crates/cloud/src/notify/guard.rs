//! Webhooks reach public addresses only, unless the operator allows others
//! (`--webhook-allow-private`): an org admin sets the URL, and the cloud must not become their
//! way into the service's own network (its loopback, metadata endpoints, internal hosts). Names
//! are resolved by [`PublicOnly`], which drops every non-public address, so a name that points
//! inside (or rebinds there later) is refused at connection time; literal IP hosts, and
//! `localhost` names, are checked by [`host_allowed`].

use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether `ip` is a public unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && v4.octets()[2] == 0)
                || (a == 198 && (b == 18 || b == 19))
                || (a == 192 && b == 88 && v4.octets()[2] == 99)
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            let first = seg[0];
            // Forms that carry an IPv4 address: NAT64 (64:ff9b::/96, 64:ff9b:1::/48), 6to4
            // (2002::/16) and the deprecated IPv4-compatible ::a.b.c.d.
            let embedded = |hi: u16, lo: u16| {
                IpAddr::V4(std::net::Ipv4Addr::from(
                    (u32::from(hi) << 16) | u32::from(lo),
                ))
            };
            if first == 0x64 && seg[1] == 0xff9b {
                // The well-known prefix embeds the address in its last 32 bits; the local-use
                // /48 may embed it elsewhere: refuse it.
                return seg[2] == 0 && is_public(embedded(seg[6], seg[7]));
            }
            if first == 0x2002 {
                return is_public(embedded(seg[1], seg[2]));
            }
            if seg[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified() {
                return is_public(embedded(seg[6], seg[7]));
            }
            // IPv4-translated (::ffff:0:a.b.c.d, RFC 2765).
            if seg[..4] == [0; 4] && seg[4] == 0xffff && seg[5] == 0 {
                return is_public(embedded(seg[6], seg[7]));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                // Site-local (deprecated, still routed inside some networks).
                || (first & 0xffc0) == 0xfec0
                // Teredo (2001::/32, whose client address is hidden in it), benchmarking
                // (2001:2::/48) and documentation (2001:db8::/32, 3fff::/20).
                || (first == 0x2001 && (seg[1] == 0 || seg[1] == 0xdb8 || (seg[1] == 2 && seg[2] == 0)))
                || (first == 0x3fff && seg[1] < 0x1000)
                // Discard-only (100::/64).
                || seg[..4] == [0x100, 0, 0, 0])
        }
    }
}

/// Checks a webhook URL as an admin gives it (the dashboard's form, `cloud webhook set`):
/// absolute `https://` or `http://` with a host, no credentials in it, and unless
/// `allow_private`, no literal non-public address nor `localhost` name, which every delivery
/// would refuse.
pub fn webhook_url(raw: &str, allow_private: bool) -> Result<String, String> {
    let url = well_formed(raw)?;
    if !allow_private {
        host_allowed(&url).map_err(|why| format!("url: {why}"))?;
    }
    Ok(url)
}

/// [`webhook_url`]'s form check.
fn well_formed(raw: &str) -> Result<String, String> {
    let url = raw.trim();
    if url.is_empty() {
        return Err(
            "url is required: give the receiver's address, such as https://hooks.example.com/signals"
                .to_string(),
        );
    }
    match url::Url::parse(url) {
        // `https:///host` reads as `https://host`, but names no host as typed.
        Ok(u)
            if matches!(u.scheme(), "https" | "http")
                && u.host().is_some()
                && url.split_once("://").is_some_and(|(_, rest)| !rest.starts_with('/'))
                && u.username().is_empty()
                && u.password().is_none() =>
        {
            Ok(url.to_string())
        }
        Ok(u) if !matches!(u.scheme(), "https" | "http") => Err(format!(
            "url must start with https:// or http://, not {}: (webhooks are HTTP POSTs)",
            u.scheme()
        )),
        // A password in it is not repeated back onto the page.
        Ok(u) if u.password().is_some() || !u.username().is_empty() => Err(
            "url holds a user name or password, which would be sent to and logged by every proxy on the way: expected an address such as https://hooks.example.com/signals, authenticated by the signature instead".to_string(),
        ),
        // Nor one that does not read as a URL (it may hold a password or a token all the same):
        // the parser's reason says what is wrong with it.
        Err(e) => {
            use url::ParseError as P;
            let what = match e {
                P::RelativeUrlWithoutBase | P::RelativeUrlWithCannotBeABaseBase => {
                    "url is not an absolute address"
                }
                P::EmptyHost
                | P::IdnaError
                | P::InvalidDomainCharacter
                | P::InvalidIpv4Address
                | P::InvalidIpv6Address => "url's host is not valid",
                P::InvalidPort => "url's port is not valid",
                _ => "url cannot be read",
            };
            Err(format!(
                "{what} ({e}): expected such as https://hooks.example.com/signals, without a user name or password in it"
            ))
        }
        Ok(_) => Err(
            "url names no host after its scheme (https:///… has a third slash): expected such as https://hooks.example.com/signals".to_string(),
        ),
    }
}

/// `Err` with the reason when `url`'s host is a literal non-public IP address, or `localhost`
/// or a name under it (which resolve to loopback by definition, RFC 6761).
pub fn host_allowed(url: &str) -> Result<(), String> {
    let host = url::Url::parse(url).ok().and_then(|u| match u.host() {
        Some(url::Host::Ipv4(ip)) => Some(Err(IpAddr::V4(ip))),
        Some(url::Host::Ipv6(ip)) => Some(Err(IpAddr::V6(ip))),
        Some(url::Host::Domain(name)) => Some(Ok(name.trim_end_matches('.').to_ascii_lowercase())),
        None => None,
    });
    match host {
        Some(Err(ip)) if !is_public(ip) => Err(refusal(&ip.to_string())),
        Some(Ok(name)) if name == "localhost" || name.ends_with(".localhost") => {
            Err(refusal(&format!("{name} (a loopback name)")))
        }
        _ => Ok(()),
    }
}

fn refusal(what: &str) -> String {
    NotPublic(what.to_string()).to_string()
}

/// A webhook host that resolved to non-public addresses only: the delivery's error shows this
/// alone, not the HTTP client's "dns error" around it (the lookup itself worked).
#[derive(Debug, thiserror::Error)]
#[error(
    "{0} is not a public address: webhooks go to public addresses only; `cloud serve --webhook-allow-private` allows others"
)]
pub struct NotPublic(String);

/// A resolver that keeps public addresses only.
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| is_public(a.ip()))
                .collect();
            if public.is_empty() {
                let all: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                return Err(NotPublic(format!("{host} ({})", all.join(", "))).into());
            }
            let addrs: Addrs = Box::new(public.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        for inside in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:0:10.0.0.1",
            "fec0::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
            "3fff::1",
            "2001:2::1",
            "100::1",
            "192.88.99.1",
        ] {
            assert!(!is_public(inside.parse().unwrap()), "{inside}");
        }
        for outside in ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "3fff:1000::1"] {
            assert!(is_public(outside.parse().unwrap()), "{outside}");
        }
        assert!(host_allowed("http://127.0.0.1:9/hook").is_err());
        assert!(host_allowed("http://[::1]/hook").is_err());
        assert!(host_allowed("https://hooks.example.com/x").is_ok());
        assert!(host_allowed("https://1.1.1.1/x").is_ok());
        for loopback in [
            "https://localhost/x",
            "http://LOCALHOST.:8080/",
            "https://a.localhost/",
        ] {
            let why = host_allowed(loopback).unwrap_err();
            assert!(why.contains("a loopback name"), "{loopback}: {why}");
        }
        assert!(host_allowed("https://localhost.example.com/x").is_ok());
        // An admin's URL: the form, then the address unless non-public ones are allowed.
        let why = webhook_url("http://127.0.0.1:9/x", false).unwrap_err();
        assert!(
            why.starts_with("url: 127.0.0.1 is not a public address"),
            "{why}"
        );
        assert!(
            webhook_url(" http://127.0.0.1:9/x ", true).is_ok_and(|u| u == "http://127.0.0.1:9/x")
        );
    }

    #[test]
    fn webhook_urls_are_checked_for_form() {
        assert!(super::well_formed(" https://hooks.example.com/x ").is_ok());
        assert!(super::well_formed("http://127.0.0.1:9/x").is_ok());
        for bad in [
            "ftp://x/y",
            "hooks.example.com",
            "https://u:p@x.com/",
            "",
            "https:///nohost",
            "https:/hooks.example.com/x",
        ] {
            let why = super::well_formed(bad).unwrap_err();
            assert!(why.starts_with("url "), "{why}");
        }
        // Another scheme is named, as the problem.
        let why = super::well_formed("ftp://x/y").unwrap_err();
        assert!(why.contains("https:// or http://, not ftp:"), "{why}");
        // A password is refused without being repeated onto the page.
        for with_password in ["https://hook:s3cret@x.com/", "https://hook:s3cret@x:99999/"] {
            let why = super::well_formed(with_password).unwrap_err();
            assert!(
                why.contains("user name or password") && !why.contains("s3cret"),
                "{why}"
            );
        }
    }
}
