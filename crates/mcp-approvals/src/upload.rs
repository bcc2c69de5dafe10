//! A file answered on the page, kept in the upload store.

use crate::{Page, csrf_ok, with_headers};
use bytes::Bytes;
use elicitation_core::{ElicitationId, RespondOutcome, ResponseSpec};
use http::{HeaderMap, Response, StatusCode, header};
use mcp_auth::SCOPE_RESPOND;
use mcp_http_kit::body::{Body, full};
use mcp_http_kit::error::{HttpError as _, McpError};
use mcp_http_kit::live::Snapshot;
use serde_json::{Value, json};

impl Page {
    /// A file the page uploads to answer a `file_upload` elicitation: the raw bytes as the
    /// body (the page's script sends them; the form token in `X-CSRF-Token`, the name in
    /// `X-File-Name`, URI-encoded). The gateway keeps the file, computes its size and
    /// SHA-256, and records the type's response; an answer that is not recorded leaves no
    /// file behind. Answers JSON.
    // Long: the request's checks in order, then keep, record, or remove the file.
    pub(crate) async fn upload(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        id: &str,
        body: Bytes,
    ) -> Response<Body> {
        let Some((_, principal, csrf)) = self.web_session(snap, headers) else {
            return answer(
                StatusCode::UNAUTHORIZED,
                json!({"error": "please sign in again"}),
            );
        };
        let given = headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !csrf_ok(&[("csrf".to_owned(), given.to_owned())], &csrf) {
            return answer(
                StatusCode::FORBIDDEN,
                json!({"error": "the request did not come from this page"}),
            );
        }
        if !principal.scopes.contains(SCOPE_RESPOND) {
            return answer(
                StatusCode::FORBIDDEN,
                json!({"error": format!("this needs the scope {SCOPE_RESPOND}")}),
            );
        }
        let Some(uploads) = &self.uploads else {
            return answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "this gateway keeps no uploads (configure [uploads])"}),
            );
        };
        let Ok(eid) = id.parse::<ElicitationId>() else {
            return answer(
                StatusCode::NOT_FOUND,
                json!({"error": "no such elicitation"}),
            );
        };
        let store = snap.gateway.store().clone();
        let caller = &principal.caller;
        let max_bytes = match store.get(caller, eid).await {
            Ok(stored) => match stored.elicitation.spec.response() {
                ResponseSpec::FileUpload { max_bytes, .. } => *max_bytes,
                _ => {
                    return answer(
                        StatusCode::BAD_REQUEST,
                        json!({"error": "this elicitation does not ask for a file"}),
                    );
                }
            },
            Err(e) => {
                let e = McpError::from(e);
                return answer(e.status(None), json!({"error": e.to_string()}));
            }
        };
        // A file over the question's own limit is refused before it is kept; it costs no
        // retry (the page checks the same limit before sending).
        let size = u64::try_from(body.len()).unwrap_or(u64::MAX);
        if let Some(max) = max_bytes.filter(|max| size > *max) {
            return answer(
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"error": format!("the file is {size} bytes; this question takes at most {max}")}),
            );
        }
        let name = headers
            .get("x-file-name")
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                form_urlencoded::parse(format!("n={v}").as_bytes())
                    .next()
                    .map(|(_, n)| n.into_owned())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let saved = match uploads.save(eid, &name, content_type, body).await {
            Ok(saved) => saved,
            Err(e) => {
                let e = McpError::BlobStore(e.to_string());
                let problem = e.problem();
                return answer(
                    e.status(None),
                    json!({"error": problem.get("detail").cloned().unwrap_or_default()}),
                );
            }
        };
        let payload = saved.payload();
        let by = principal.answered_by(mcp_auth::AnsweredVia::Page);
        let recorded = store
            .respond_as(caller, eid, payload.clone(), Some(&by))
            .await;
        if !matches!(recorded, Ok(RespondOutcome::Recorded)) {
            uploads.remove(&saved.upload_id).await;
        }
        match recorded {
            Ok(RespondOutcome::Recorded) => {
                // Files of earlier attempts that were never recorded (a crash between
                // keeping and recording) go now.
                if let Err(e) = uploads.remove_for(eid, Some(&saved.upload_id)).await {
                    tracing::warn!(elicitation = %eid, error = %e, "earlier unrecorded uploads could not be removed");
                }
                answer(StatusCode::OK, json!({"recorded": payload}))
            }
            Ok(RespondOutcome::Invalid {
                errors,
                retries_left,
            }) => invalid(&errors, retries_left),
            // The last answer allowed: the question is closed.
            Ok(RespondOutcome::ValidationFailed { errors }) => invalid(&errors, 0),
            // An upload is a new file each time, so never the answer already recorded: this
            // question was answered with another.
            Ok(RespondOutcome::AlreadyRecorded | RespondOutcome::Counted { .. }) => answer(
                StatusCode::CONFLICT,
                json!({"error": "this question was already answered"}),
            ),
            Err(e) => {
                let e = McpError::from(e);
                answer(e.status(None), json!({"error": e.to_string()}))
            }
        }
    }
}

/// An answer that does not fit the question: every violation, and how many tries are left.
fn invalid(errors: &[elicitation_core::Violation], retries_left: u8) -> Response<Body> {
    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
    answer(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"errors": errors, "retries_left": retries_left}),
    )
}

/// The upload's JSON answer.
fn answer(status: StatusCode, body: Value) -> Response<Body> {
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() = status;
    with_headers(response, "application/json")
}
