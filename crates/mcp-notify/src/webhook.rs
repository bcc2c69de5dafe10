//! `kind = "webhook"`: the event as JSON, `POST`ed and signed.
//!
//! `Mcp-Gateway-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`:
//! a receiver recomputes it over the exact bytes it received, compares in constant time,
//! and refuses a `t` far from its clock (a replayed request). The body's `delivery` is the
//! same on every attempt, for de-duplication.

use std::time::Duration;

use ring::hmac;
use serde_json::Value;
use time::OffsetDateTime;

use crate::delivery::Delivery;

/// The signature's header.
pub const SIGNATURE_HEADER: &str = "mcp-gateway-signature";

/// One attempt's limit, connecting included.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// A webhook sink.
#[derive(Clone)]
pub struct Webhook {
    /// Where to `POST` (`http://` or `https://`).
    pub url: String,
    /// The signing secret (from the environment; never logged).
    pub secret: Vec<u8>,
    /// Whether the event carries the call's arguments (they leave the sealed store).
    pub include_arguments: bool,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("include_arguments", &self.include_arguments)
            .finish()
    }
}

/// The signature header's value for `body` sent at unix time `t`.
pub fn signature(secret: &[u8], t: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut signed = Vec::with_capacity(body.len() + 24);
    signed.extend_from_slice(t.to_string().as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    let tag = hmac::sign(&key, &signed);
    let hex: String = mcp_random::hex(tag.as_ref());
    format!("t={t},v1={hex}")
}

impl Webhook {
    /// One attempt: `body` signed at `now`.
    pub(crate) async fn send(
        &self,
        http: &reqwest::Client,
        body: &Value,
        now: OffsetDateTime,
    ) -> Delivery {
        let bytes = match serde_json::to_vec(body) {
            Ok(bytes) => bytes,
            Err(e) => return Delivery::Refused(format!("the event could not be written: {e}")),
        };
        let signed = signature(&self.secret, now.unix_timestamp(), &bytes);
        let sent = http
            .post(&self.url)
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("mcp-gateway/", env!("CARGO_PKG_VERSION")),
            )
            .header(SIGNATURE_HEADER, signed)
            .body(bytes)
            .send()
            .await;
        delivery_of(sent)
    }
}

/// What a receiver's answer (or the failure to get one) makes of an attempt.
pub(crate) fn delivery_of(sent: Result<reqwest::Response, reqwest::Error>) -> Delivery {
    match sent {
        Ok(response) => {
            let status = response.status();
            if status.is_success() {
                Delivery::Delivered
            } else if status.is_server_error()
                || status == reqwest::StatusCode::REQUEST_TIMEOUT
                || status == reqwest::StatusCode::TOO_MANY_REQUESTS
            {
                Delivery::Retry(format!("the receiver answered {status}"))
            } else {
                Delivery::Refused(format!("the receiver answered {status}"))
            }
        }
        Err(e) if e.is_builder() => {
            Delivery::Refused("the request could not be made (check the sink's url)".into())
        }
        // Timeouts, refused connections, resets: the receiver may be back soon.
        Err(e) => Delivery::Retry(without_url(&e)),
    }
}

/// A request error without its URL (a webhook URL may carry a token in its path).
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    format!("the request {kind}")
}
