//! The surfaces beside MCP: the approvals page, the REST API, the session's GET stream and
//! `DELETE`, the protected resource metadata and its challenge, uploads' downloads.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use mcp_wire::Era;
use serde_json::Value;

use super::{Body, McpService, anonymous, header_text};
use crate::page_base::PageBase;
use crate::rest;
use mcp_auth::{Auth, Principal, SCOPE_TOOLS_CALL};
use mcp_http_kit::audit::AuditFormat;
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response::{self, Surface};

impl McpService {
    /// `/approvals…`: the page, after its body is read (a file upload may be larger than
    /// other bodies, so it is read only for a signed-in person).
    pub(super) async fn page_request<B>(
        &self,
        snap: &Snapshot,
        parts: &http::request::Parts,
        path: &str,
        body: B,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes> + Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        // The page authenticates with its own session cookie (or a sign-in form).
        let limit = match &self.uploads {
            Some(uploads) if parts.method == Method::POST && path.ends_with("/upload") => {
                if self.page.web_session(snap, &parts.headers).is_some() {
                    usize::try_from(uploads.max_bytes()).unwrap_or(usize::MAX)
                } else {
                    self.config.body_limit.min(1024)
                }
            }
            _ => self.config.body_limit,
        };
        let bytes = match self
            .read_body_limited(body, limit, || anonymous(parts))
            .await
        {
            Ok(bytes) => bytes,
            Err(e) => return response::rpc_error(&e, None, None),
        };
        let base = self.page_base(&parts.headers).url();
        let response = self
            .page
            .approvals(
                snap,
                mcp_approvals::PageRequest {
                    method: &parts.method,
                    path,
                    query: parts.uri.query(),
                    headers: &parts.headers,
                    body: &bytes,
                    base: base.as_deref(),
                },
            )
            .await;
        crate::mount::page_mounted(&self.mount, response).await
    }

    /// `/v1/mcp/elicitations…`: the REST API, as `principal`.
    pub(super) async fn rest_request(
        &self,
        snap: &Snapshot,
        parts: &http::request::Parts,
        path: &str,
        principal: &Principal,
        bytes: &[u8],
    ) -> Response<Body> {
        if let Err(e) = snap.gateway.take_api(&principal.caller) {
            return response::error(&e.into(), Surface::Problem);
        }
        if path == rest::AUDIT_PATH {
            return match rest::audit(&snap.gateway, principal, &parts.method, parts.uri.query())
                .await
            {
                Ok((page, AuditFormat::Json)) => {
                    response::json(http::StatusCode::OK, &mcp_http_kit::audit::body(&page))
                }
                Ok((page, AuditFormat::JsonLines)) => {
                    mcp_http_kit::audit::lines(&page.entries, page.next, page.holds)
                }
                Err(e) => response::error(&e, Surface::Problem),
            };
        }
        if path == rest::QUOTAS_PATH {
            return match rest::quotas(&snap.gateway, principal, &parts.method).await {
                Ok(body) => response::json(http::StatusCode::OK, &body),
                Err(e) => response::error(&e, Surface::Problem),
            };
        }
        if path == rest::INSIGHTS_PATH {
            return match rest::insights(&snap.gateway, principal, &parts.method, parts.uri.query())
                .await
            {
                Ok(body) => response::json(http::StatusCode::OK, &body),
                Err(e) => response::error(&e, Surface::Problem),
            };
        }
        // The API's collections under their prefixes, the elicitations' last.
        let (api, rest) = [
            (Api::Catalog, rest::CATALOG_PREFIX),
            (Api::Delegations, rest::DELEGATIONS_PREFIX),
            (Api::Grants, rest::GRANTS_PREFIX),
        ]
        .into_iter()
        .find_map(|(api, prefix)| path.strip_prefix(prefix).map(|rest| (api, rest)))
        .unwrap_or_else(|| {
            let rest = path.get(rest::PREFIX.len()..).unwrap_or_default();
            (Api::Elicitations, rest)
        });
        let request = rest::RestRequest {
            method: &parts.method,
            rest,
            query: parts.uri.query(),
            body: bytes,
            waits: &self.streams,
        };
        let answered = match api {
            Api::Catalog => rest::catalog(&snap.gateway, principal, request).await,
            Api::Delegations => rest::delegations(&snap.gateway, principal, request).await,
            Api::Grants => rest::grants(&snap.gateway, principal, request).await,
            Api::Elicitations => rest::handle(&snap.gateway, principal, request).await,
        };
        match answered {
            Ok((status, body)) => {
                if api == Api::Elicitations
                    && let Some(id) = rest::cancelled(&parts.method, rest)
                {
                    self.discard_uploads([id]);
                }
                response::json(status, &body)
            }
            Err(e) => response::error(&e, Surface::Problem),
        }
    }

    /// `DELETE /mcp`: ends a legacy session — recorded in the store first, so every
    /// instance sharing it refuses the session; if the store cannot record it, nothing ends
    /// (503) and the client may try again.
    pub(super) async fn end_session(
        &self,
        snap: &Snapshot,
        id: &str,
        principal: &Principal,
    ) -> Response<Body> {
        let legacy = |e: &McpError| response::rpc_error(e, None, Some(Era::Legacy));
        if let Err(e) = snap.gateway.take_call(
            &principal.caller,
            "this caller is changing sessions faster than the gateway allows",
        ) {
            return legacy(&e.into());
        }
        let ending = match self
            .sessions
            .ending(id, &principal.caller, snap.gateway.server_name())
        {
            Ok(ending) => ending,
            Err(e) => return legacy(&e),
        };
        let recorded = tokio::time::timeout(
            Duration::from_secs(5),
            snap.gateway
                .fleet()
                .end_session(&principal.caller, ending.hash, ending.until),
        )
        .await
        .unwrap_or_else(|_| {
            Err(elicitation_store::StoreError::Unavailable(
                "the store did not answer in time".into(),
            ))
        });
        if let Err(e) = recorded {
            return legacy(&McpError::Store(e));
        }
        self.sessions.end(id, ending);
        response::empty(StatusCode::OK)
    }

    /// `GET /.well-known/oauth-protected-resource[/mcp]` (RFC 9728), in mode `jwt`: where
    /// clients find the authorization servers and scopes. Public, so any origin may read it.
    pub(super) fn protected_resource_metadata(
        &self,
        snap: &Snapshot,
        method: &Method,
    ) -> Response<Body> {
        let Auth::Jwt(jwt) = &*snap.auth else {
            return response::error(&McpError::NotFound, Surface::Problem);
        };
        if method != Method::GET {
            return response::error(&McpError::MethodNotAllowed, Surface::Problem);
        }
        let mut response = response::json(StatusCode::OK, &jwt.metadata());
        response.headers_mut().insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        response
    }

    /// `GET /mcp`: a legacy session's stream (see `listen`). Without a session there is no
    /// stream to offer (2026-07-28 has none): 405.
    pub(super) fn listen(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Principal,
    ) -> Response<Body> {
        let Some(session_id) = header_text(headers, "mcp-session-id") else {
            return response::rpc_error(&McpError::MethodNotAllowed, None, None);
        };
        let fail = |e: McpError| response::rpc_error(&e, None, Some(Era::Legacy));
        if let Err(e) = principal.require(SCOPE_TOOLS_CALL) {
            return fail(e.into());
        }
        if !response::accepts_sse(headers) {
            return fail(McpError::NotAcceptable(
                "GET /mcp is an event stream: Accept must include text/event-stream".into(),
            ));
        }
        let server = snap.gateway.server_name();
        let session = match self.sessions.touch(&session_id, &principal.caller, server) {
            Ok(session) => session,
            Err(e) => return fail(e),
        };
        let last_event_id =
            header_text(headers, "last-event-id").and_then(|v| v.trim().parse().ok());
        let Some(slot) = self.streams.try_open(&principal.caller) else {
            return fail(McpError::TooManyStreams(self.config.max_streams_per_caller));
        };
        crate::listen::stream(
            session.channel().clone(),
            self.sessions.clone(),
            session_id,
            (principal.caller.clone(), server.map(str::to_owned)),
            last_event_id,
            slot,
            // SSE priming came with 2025-11-25 (SEP-1699): earlier clients read every event
            // as a message.
            session.version() >= "2025-11-25",
        )
    }

    /// `GET /v1/mcp/uploads/{upload_id}`: an uploaded file, for its caller's services
    /// (scope `elicitations:create`), as an attachment of opaque bytes.
    pub(super) async fn download(
        &self,
        snap: &Snapshot,
        method: &Method,
        path: &str,
        principal: &Principal,
    ) -> Response<Body> {
        let problem = |e: McpError| response::error(&e, Surface::Problem);
        if method != Method::GET {
            return problem(McpError::MethodNotAllowed);
        }
        if let Err(e) = principal.require(mcp_auth::SCOPE_CREATE) {
            return problem(e.into());
        }
        let id = &path["/v1/mcp/uploads/".len()..];
        let Some(uploads) = &self.uploads else {
            return problem(McpError::NotFound);
        };
        // The upload must be the recorded answer of one of the caller's elicitations.
        let Some((elicitation, _)) = mcp_uploads::parse_upload_id(id) else {
            return problem(McpError::NotFound);
        };
        let recorded = match snap
            .gateway
            .store()
            .get(&principal.caller, elicitation)
            .await
        {
            Ok(stored) => {
                stored
                    .elicitation
                    .response
                    .as_ref()
                    .and_then(|r| r.get("upload_id"))
                    .and_then(Value::as_str)
                    == Some(id)
            }
            Err(e) => return problem(McpError::from(e)),
        };
        if !recorded {
            return problem(McpError::NotFound);
        }
        match uploads.read(id).await {
            Ok(Some(bytes)) => {
                let mut response = Response::new(mcp_http_kit::body::full(bytes));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                mcp_http_kit::response::as_download(&mut response, "attachment");
                response
            }
            Ok(None) => problem(McpError::NotFound),
            Err(e) => problem(McpError::BlobStore(e.to_string())),
        }
    }

    /// The approvals page's base URL for a request, made only when a reply asks for it
    /// ([`PageBase::url`]).
    pub(crate) fn page_base(&self, headers: &HeaderMap) -> PageBase {
        PageBase::of(&self.page_site, headers)
    }
}

/// Where the protected resource metadata is served (and under it, the path-suffixed form).
pub(super) const PRM_PATH: &str = "/.well-known/oauth-protected-resource";

/// Mode `jwt`: a 401 or 403 challenge says where the resource's metadata is and which scope
/// (in the identity provider's names) is needed, so a client can discover the authorization
/// server and step up (MCP authorization; RFC 9728 §5.1, RFC 6750 §3).
pub(super) fn oauth_challenge(jwt: &mcp_auth::jwt::JwtAuth, response: &mut Response<Body>) {
    let Some(current) = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return;
    };
    let config = jwt.config();
    let metadata = mcp_auth::jwt::metadata_url(&config.resource);
    let challenge = if current.contains("insufficient_scope") {
        let scope = current
            .split("scope=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default();
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{metadata}\"",
            config.scopes.external(scope)
        )
    } else {
        let error = if current.contains("invalid_token") {
            ", error=\"invalid_token\""
        } else {
            ""
        };
        format!(
            "Bearer resource_metadata=\"{metadata}\", scope=\"{}\"{error}",
            config.scopes.all().join(" ")
        )
    };
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
}

/// Which collection of the REST API a path is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Catalog,
    Delegations,
    Grants,
    Elicitations,
}
