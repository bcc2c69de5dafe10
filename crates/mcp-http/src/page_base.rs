//! The approvals page's base URL for one request, made only where a reply names the page.
//!
//! A call is asked about, held or sent to connect an account (the replies that link to the
//! page) far less often than it is forwarded, and every call of both eras used to check its
//! `Host` and build the base URL up front (0.84k of the ~94k instructions of a forwarded
//! call, issue 52). (A 2025-11-25 session that declared URL-mode elicitation has it made
//! for a gated call too, where whether the call may be asked in URL mode is decided.) [`PageBase`] keeps what the URL is made from, the service's rules and
//! the request's `Host` header (a reference-counted copy), and applies the same check when
//! [`PageBase::url`] is asked for.

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, header};

/// Where people reach a service, and the hosts a request may name instead: what a page's
/// base URL is made from, set once per service (and again where it is mounted).
#[derive(Debug)]
pub(crate) struct PageSite {
    /// `public_url`: where people reach the service, whatever a request says.
    pub(crate) public_url: Option<String>,
    /// The configured host names a request's `Host` may be (besides loopback ones).
    pub(crate) allowed_hosts: Vec<String>,
    /// The path the service is mounted at, or empty.
    pub(crate) mount: String,
}

/// The approvals page's base URL for one request, told by [`PageBase::url`]; cheap to
/// make and to clone. The default is no page: URL mode is not offered.
#[derive(Debug, Clone, Default)]
pub struct PageBase {
    site: Option<Arc<PageSite>>,
    host: Option<HeaderValue>,
}

impl PageBase {
    /// The page of a request with these headers to a service of `site`.
    pub(crate) fn of(site: &Arc<PageSite>, headers: &HeaderMap) -> PageBase {
        PageBase {
            site: Some(site.clone()),
            host: match site.public_url {
                Some(_) => None,
                None => headers.get(header::HOST).cloned(),
            },
        }
    }

    /// The base URL of the approvals page: the configured public URL, else `http://` and
    /// the request's `Host` when it is a loopback or configured host name; `None` where the
    /// gateway does not know where people reach it (then no reply links to the page).
    pub fn url(&self) -> Option<String> {
        let site = self.site.as_deref()?;
        let (scheme, origin) = match &site.public_url {
            Some(url) => ("", url.as_str()),
            None => ("http://", self.known_host(site)?),
        };
        let origin = origin.trim_end_matches('/');
        let mut base = String::with_capacity(scheme.len() + origin.len() + site.mount.len());
        base.push_str(scheme);
        base.push_str(origin);
        base.push_str(&site.mount);
        Some(base)
    }

    /// The request's `Host`, where it may become a link a person follows.
    fn known_host<'a>(&'a self, site: &PageSite) -> Option<&'a str> {
        let host = self.host.as_ref()?.to_str().ok()?;
        let safe = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        // A client chooses its Host: only a loopback one or a configured one may become a
        // link a person follows (else a client could send the person to its own sign-in
        // page); without `public_url` elsewhere, URL mode is not offered.
        let name = host_name(host)?;
        let known = is_loopback_host(name)
            || site
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(name));
        (safe && known).then_some(host)
    }
}

/// The host name of a `Host` header value (or an origin's authority), without its port
/// (`[::1]` keeps its brackets): `name` or `name:port`, the port 1 to 5 digits. Anything
/// else is no host at all (`None`): `localhost:18080.evil.example` is not `localhost`.
pub(crate) fn host_name(host: &str) -> Option<&str> {
    let split = if host.starts_with('[') {
        host.find(']')? + 1
    } else {
        host.find(':').unwrap_or(host.len())
    };
    let (name, port) = host.split_at(split);
    let port_ok = match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => {
            (1..=5).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
        }
    };
    (port_ok && !name.is_empty()).then_some(name)
}

/// Whether a host name (from [`host_name`]) is a loopback one: `localhost`, `[::1]` or an
/// address in 127.0.0.0/8.
pub(crate) fn is_loopback_host(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(public_url: Option<&str>, allowed: &[&str], mount: &str) -> Arc<PageSite> {
        Arc::new(PageSite {
            public_url: public_url.map(str::to_owned),
            allowed_hosts: allowed.iter().map(|h| (*h).to_owned()).collect(),
            mount: mount.to_owned(),
        })
    }

    fn with_host(host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        headers
    }

    #[test]
    fn a_public_url_is_the_base_whatever_the_host_says() {
        let site = site(Some("https://gw.example/"), &[], "/ops");
        let page = PageBase::of(&site, &with_host("attacker.example"));
        assert_eq!(page.url().as_deref(), Some("https://gw.example/ops"));
        let page = PageBase::of(&site, &HeaderMap::new());
        assert_eq!(page.url().as_deref(), Some("https://gw.example/ops"));
    }

    #[test]
    fn only_a_loopback_or_configured_host_becomes_the_base() {
        let site = site(None, &["gw.internal"], "");
        let url = |host: &str| PageBase::of(&site, &with_host(host)).url();
        assert_eq!(
            url("127.0.0.1:8080").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(url("localhost").as_deref(), Some("http://localhost"));
        assert_eq!(url("[::1]:9").as_deref(), Some("http://[::1]:9"));
        assert_eq!(
            url("GW.internal:443").as_deref(),
            Some("http://GW.internal:443")
        );
        for refused in [
            "attacker.example",
            "localhost:18080.evil.example",
            "localhost@evil.example",
            "localhost/evil",
            "gw.internal.evil.example",
            "",
        ] {
            assert_eq!(url(refused), None, "{refused:?}");
        }
        assert_eq!(PageBase::of(&site, &HeaderMap::new()).url(), None);
    }

    #[test]
    fn a_host_that_is_not_text_is_no_base() {
        let site = site(None, &[], "");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::HOST,
            HeaderValue::from_bytes(b"localhost\xff").unwrap(),
        );
        assert_eq!(PageBase::of(&site, &headers).url(), None);
    }

    #[test]
    fn the_mount_follows_the_host() {
        let site = site(None, &[], "/ops");
        let page = PageBase::of(&site, &with_host("localhost:3000"));
        assert_eq!(page.url().as_deref(), Some("http://localhost:3000/ops"));
    }

    #[test]
    fn no_site_is_no_page() {
        assert_eq!(PageBase::default().url(), None);
    }
}
