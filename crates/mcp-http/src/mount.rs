//! The path the gateway is mounted at in another service (`McpService::mounted_at`):
//! requests arrive with it taken off (as axum's `nest_service` does) or still on it; the
//! approvals page's links, redirects and cookie are put under it.

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use http_body_util::BodyExt;
use mcp_http_kit::body::Body;

/// Why a mount path was refused.
#[derive(Debug, thiserror::Error)]
#[error("cannot mount the gateway at {path:?}: {why}")]
pub struct MountError {
    path: String,
    why: &'static str,
}

/// Whether `path` may be a mount path.
pub(crate) fn check(path: &str) -> Result<(), MountError> {
    let refused = |why| MountError {
        path: path.to_owned(),
        why,
    };
    let Some(rest) = path.strip_prefix('/') else {
        return Err(refused("it must start with /"));
    };
    if rest.is_empty() || rest.split('/').any(str::is_empty) {
        return Err(refused(
            "it must name segments, without a trailing / or an empty one",
        ));
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '/');
    if !rest.chars().all(safe) || rest.split('/').any(|s| s == "." || s == "..") {
        return Err(refused("a segment may hold only letters, digits and -._~"));
    }
    Ok(())
}

/// A request whose path is outside the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutsideTheMount;

/// `request` as the service routes it: with a mount the router does not take off
/// (`McpService::mounted_at`), its path without the mount, and `Err` (not found) for a path
/// outside it, so nothing is served beside the mount that the embedder did not mean to
/// expose; with one the router takes off (`nested_at`), or none, as it came.
pub(crate) fn unmounted<B>(
    mount: &str,
    nested: bool,
    request: Request<B>,
) -> Result<Request<B>, OutsideTheMount> {
    if mount.is_empty() || nested {
        return Ok(request);
    }
    let rest = match request.uri().path().strip_prefix(mount) {
        Some("") => "/".to_owned(),
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => return Err(OutsideTheMount),
    };
    let (mut parts, body) = request.into_parts();
    let path_and_query = match parts.uri.query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest,
    };
    let mut uri = parts.uri.clone().into_parts();
    if let Ok(taken) = path_and_query.parse() {
        uri.path_and_query = Some(taken);
        if let Ok(rebuilt) = http::Uri::from_parts(uri) {
            parts.uri = rebuilt;
        }
    }
    Ok(Request::from_parts(parts, body))
}

/// The page's response with its own paths put under `mount`: redirects, the cookie's path,
/// and in a page, script or style sheet every `"/approvals` (the page's links; a person's
/// or an agent's text is HTML-escaped, so it never holds a bare `"`). A stream (the page's
/// events) passes untouched.
pub(crate) async fn page_mounted(mount: &str, response: Response<Body>) -> Response<Body> {
    const OWN: &str = "\"/approvals";
    if mount.is_empty() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // `value` with its first `from` (ending in `/approvals`) put under the mount.
    let under = |value: &HeaderValue, from: &str| -> Option<HeaderValue> {
        let text = value.to_str().ok()?;
        let head = from.strip_suffix("/approvals")?;
        let moved = text.replacen(from, &format!("{head}{mount}/approvals"), 1);
        HeaderValue::from_str(&moved).ok()
    };
    if let Some(location) = parts.headers.get(header::LOCATION)
        && location.as_bytes().starts_with(b"/approvals")
        && let Some(moved) = under(location, "/approvals")
    {
        parts.headers.insert(header::LOCATION, moved);
    }
    let cookies: Vec<HeaderValue> = parts
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|c| under(c, "Path=/approvals").unwrap_or_else(|| c.clone()))
        .collect();
    if !cookies.is_empty() {
        parts.headers.remove(header::SET_COOKIE);
        for cookie in cookies {
            parts.headers.append(header::SET_COOKIE, cookie);
        }
    }
    let textual = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| {
            [
                "text/html",
                "text/css",
                "text/javascript",
                "application/javascript",
            ]
            .iter()
            .any(|kind| t.starts_with(kind))
        });
    if !textual {
        return Response::from_parts(parts, body);
    }
    let Ok(collected) = body.collect().await;
    let bytes = collected.to_bytes();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Response::from_parts(parts, mcp_http_kit::body::full(bytes));
    };
    let moved = text.replace(OWN, &format!("\"{mount}/approvals"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, mcp_http_kit::body::full(Bytes::from(moved)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mounted_path_is_taken_off_and_nothing_outside_it_is_served() {
        let taken = |mount: &str, nested: bool, uri: &str| {
            let request = Request::builder().uri(uri).body(()).unwrap();
            unmounted(mount, nested, request)
                .map(|r| r.uri().to_string())
                .map_err(|_| ())
        };
        assert_eq!(
            taken("/ops", false, "/ops/approvals?x=1"),
            Ok("/approvals?x=1".into())
        );
        assert_eq!(taken("/ops", false, "/ops"), Ok("/".into()));
        assert!(
            taken("/ops", false, "/approvals").is_err(),
            "outside the mount"
        );
        assert!(
            taken("/ops", false, "/opsx/mcp").is_err(),
            "a longer segment is not it"
        );
        assert_eq!(
            taken("/ops", true, "/approvals"),
            Ok("/approvals".into()),
            "taken off by the router"
        );
        assert_eq!(taken("", false, "/mcp"), Ok("/mcp".into()));
    }

    #[tokio::test]
    async fn the_pages_links_redirects_and_cookie_go_under_the_mount() {
        let html = "<a href=\"/approvals/audit\">x</a><p>&quot;/approvals is text</p>";
        let response = Response::builder()
            .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
            .header(header::LOCATION, "/approvals?done=approved")
            .header(
                header::SET_COOKIE,
                "mcp_gateway_approvals=abc; Path=/approvals; HttpOnly",
            )
            .header(header::SET_COOKIE, "other=1; Path=/")
            .body(mcp_http_kit::body::full(Bytes::from(html)))
            .unwrap();
        let moved = page_mounted("/ops", response).await;
        assert_eq!(
            moved.headers()[header::LOCATION],
            "/ops/approvals?done=approved"
        );
        let cookies: Vec<_> = moved.headers().get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(
            cookies[0],
            "mcp_gateway_approvals=abc; Path=/ops/approvals; HttpOnly"
        );
        assert_eq!(cookies[1], "other=1; Path=/");
        let body = moved.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "<a href=\"/ops/approvals/audit\">x</a><p>&quot;/approvals is text</p>"
        );
    }

    #[test]
    fn mount_paths_are_checked() {
        for bad in [
            "", "/", "ops", "/ops/", "/a//b", "/a b", "/../x", "/a/./b", "/ops?x",
        ] {
            assert!(valid(bad).is_err(), "{bad:?}");
        }
        for good in ["/ops", "/a/b-c.d_e~f"] {
            assert!(valid(good).is_ok(), "{good:?}");
        }
    }

    fn valid(path: &str) -> Result<(), MountError> {
        super::check(path)
    }
}
