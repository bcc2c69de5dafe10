//! What the gateway fetches from OAuth and OpenID servers — authorization server and
//! protected resource metadata, JWK sets, OpenID discovery, token answers — through one
//! client policy:
//!
//! - only `https://`, or `http://` to this machine ([`secure_or_loopback`]), checked before
//!   every request and on every redirect followed;
//! - every answer read up to a bound ([`Fetch::read`]): a server cannot make the gateway
//!   hold an endless body in memory;
//! - a time limit on each exchange, and redirects as the caller chose ([`Redirects`]);
//! - no proxy from the environment unless the caller asks for one (a proxy would see a
//!   secret sent in clear to a loopback server).
//!
//! What a server sends back is its text: [`printable`] makes it safe to log.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use serde_json::Value;

/// Whether `url` is `https://` with a host, or `http://` to a loopback host (`localhost`,
/// `127.0.0.0/8`, `::1`). A URL with user information (`http://127.0.0.1@evil.example/`)
/// is neither: its host is not what it seems to be.
pub fn secure_or_loopback(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    let Some(authority) = uri.authority() else {
        return false;
    };
    if authority.as_str().contains('@') {
        return false;
    }
    let host = authority.host();
    match uri.scheme_str() {
        Some("https") => !host.is_empty(),
        Some("http") => loopback_host(host),
        _ => false,
    }
}

/// Whether `host` (as a URI names it, an IPv6 address in brackets) is this machine.
fn loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether `url`'s host is this machine (`localhost`, `127.0.0.0/8`, `::1`), whatever its
/// scheme. A server elsewhere must not send the gateway to this machine's services.
pub fn on_this_machine(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    loopback_host(uri.host().unwrap_or_default())
}

/// Whether an endpoint that `issuer`'s metadata names may be used: [`secure_or_loopback`],
/// and on this machine only when the issuer is (a remote server naming `http://127.0.0.1:…`
/// would have the gateway post codes and tokens to a service of this machine).
pub fn endpoint_of(issuer: &str, endpoint: &str) -> bool {
    secure_or_loopback(endpoint) && (!on_this_machine(endpoint) || on_this_machine(issuer))
}

/// A server's text as it may be logged or shown: short, without control characters.
pub fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// Which redirects a client follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// None: a redirect is the answer (OAuth endpoints must not redirect a secret).
    None,
    /// At most this many, each to a URL [`secure_or_loopback`] allows.
    Secure(usize),
}

/// How a [`Fetch`] client behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// The limit on one exchange.
    pub timeout: Duration,
    /// The redirects followed.
    pub redirects: Redirects,
    /// The TLS roots a server's certificate is checked against; `None`: the platform's.
    pub roots: Option<Arc<rustls::ClientConfig>>,
    /// The most bytes of an answer read; a larger answer is refused.
    pub max_bytes: usize,
    /// Whether the environment's proxy (`HTTPS_PROXY`, …) is used.
    pub proxy_from_env: bool,
}

impl Options {
    /// 10 s, no redirects, the platform's roots, `max_bytes`, no proxy.
    pub fn new(max_bytes: usize) -> Self {
        Options {
            timeout: Duration::from_secs(10),
            redirects: Redirects::None,
            roots: None,
            max_bytes,
            proxy_from_env: false,
        }
    }
}

/// A server's answer, read.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body (at most the client's `max_bytes`).
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as a JSON object; `Err` says why it is not one.
    pub fn object(&self) -> Result<Value, String> {
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(value @ Value::Object(_)) => Ok(value),
            Ok(_) => Err("not a JSON object".to_owned()),
            Err(e) => Err(format!("not JSON: {e}")),
        }
    }
}

/// The client of one use (a module's OAuth exchanges, an issuer's key sets, a sign-in).
#[derive(Debug, Clone)]
pub struct Fetch {
    http: reqwest::Client,
    max_bytes: usize,
}

impl Fetch {
    /// A client as `options` say.
    pub fn new(options: Options) -> Result<Self, String> {
        let redirects = match options.redirects {
            Redirects::None => reqwest::redirect::Policy::none(),
            Redirects::Secure(max) => reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= max {
                    attempt.error(format!("more than {max} redirects"))
                } else if secure_or_loopback(attempt.url().as_str()) {
                    attempt.follow()
                } else {
                    attempt.error("a redirect away from https")
                }
            }),
        };
        let mut builder = reqwest::Client::builder()
            .timeout(options.timeout)
            .redirect(redirects);
        if !options.proxy_from_env {
            builder = builder.no_proxy();
        }
        if let Some(roots) = options.roots {
            builder = builder.tls_backend_preconfigured((*roots).clone());
        }
        let http = builder
            .build()
            .map_err(|e| format!("the HTTP client: {e}"))?;
        Ok(Fetch {
            http,
            max_bytes: options.max_bytes,
        })
    }

    /// The client, for a request of the caller's own (a token endpoint's form post); read
    /// its answer with [`Fetch::read`].
    pub fn client(&self) -> &reqwest::Client {
        &self.http
    }

    /// `response` read up to the client's bound.
    pub async fn read(&self, mut response: reqwest::Response) -> Result<Answer, String> {
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(format!(
                    "the answer is larger than {} bytes",
                    self.max_bytes
                ));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// `GET url` asking for JSON, read. `Err` (naming the URL) when the URL is neither
    /// https nor on this machine, or the exchange failed; any status is an answer.
    pub async fn get(&self, url: &str) -> Result<Answer, String> {
        if !secure_or_loopback(url) {
            return Err(format!("{url} is neither https:// nor on this machine"));
        }
        let response = self
            .http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        self.read(response).await.map_err(|e| format!("{url}: {e}"))
    }

    /// `GET url`, a JSON object with a success status; `Err` says why not.
    pub async fn get_object(&self, url: &str) -> Result<Value, String> {
        let answer = self.get(url).await?;
        if !answer.status.is_success() {
            return Err(format!("{url} answered {}", answer.status.as_u16()));
        }
        answer.object().map_err(|e| format!("{url}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_this_machine_and_never_a_host_behind_user_information() {
        for allowed in [
            "https://as.example/token",
            "http://127.0.0.1:8080/token",
            "http://localhost/token",
            "http://[::1]:9/jwks",
        ] {
            assert!(secure_or_loopback(allowed), "{allowed}");
        }
        for refused in [
            "http://as.example/token",
            "ftp://as.example/",
            "not a url",
            "https:///no-host",
            // The host is evil.example; what precedes `@` is user information.
            "http://127.0.0.1:80@evil.example/jwks",
            "http://localhost@evil.example/",
            "https://user:pass@as.example/",
        ] {
            assert!(!secure_or_loopback(refused), "{refused}");
        }
    }

    #[test]
    fn a_remote_issuer_cannot_name_an_endpoint_on_this_machine() {
        assert!(endpoint_of(
            "https://as.example",
            "https://as.example/token"
        ));
        assert!(endpoint_of(
            "https://as.example",
            "https://other.example/token"
        ));
        assert!(endpoint_of(
            "http://127.0.0.1:9000",
            "http://127.0.0.1:9000/token"
        ));
        assert!(!endpoint_of(
            "https://as.example",
            "http://127.0.0.1:9000/token"
        ));
        assert!(!endpoint_of(
            "https://as.example",
            "https://localhost/register"
        ));
        assert!(!endpoint_of(
            "https://as.example",
            "http://as.example/token"
        ));
    }

    #[test]
    fn printable_text_is_short_and_without_control_characters() {
        assert_eq!(printable("a\nb\u{1b}[31mc"), "ab[31mc");
        assert_eq!(printable(&"x".repeat(500)).len(), 200);
    }

    /// A server on loopback that answers every request with `body`.
    async fn serving(body: Vec<u8>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = socket.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn an_answer_larger_than_the_bound_is_refused_and_one_within_it_read() {
        let fetch = Fetch::new(Options::new(1024)).unwrap();
        let small = serving(br#"{"keys": []}"#.to_vec()).await;
        assert_eq!(
            fetch.get_object(&small).await.unwrap()["keys"],
            Value::Array(vec![])
        );
        let huge = serving(vec![b' '; 64 * 1024]).await;
        let refused = fetch.get(&huge).await.unwrap_err();
        assert!(refused.contains("larger than 1024 bytes"), "{refused}");
        let not_safe = fetch.get("http://as.example/").await.unwrap_err();
        assert!(not_safe.contains("neither https"), "{not_safe}");
    }
}
