//! `kind = "email"`: plain text over SMTP (lettre), with the page link.
//!
//! The message never carries the call's arguments (an e-mail is kept, forwarded and indexed
//! where the gateway cannot see); it names the tool, the caller and the time left, and
//! links to the elicitation's page.

use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::Value;

use crate::delivery::Delivery;

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain, then `STARTTLS` (required).
    StartTls,
    /// TLS from the first byte (SMTPS).
    Tls,
    /// No TLS: only to a loopback host.
    None,
}

/// An e-mail sink.
#[derive(Clone)]
pub struct Email {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Vec<Mailbox>,
    server: String,
}

impl std::fmt::Debug for Email {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Email")
            .field("server", &self.server)
            .field("from", &self.from.to_string())
            .field(
                "to",
                &self.to.iter().map(ToString::to_string).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Email {
    /// An e-mail sink sending through `host:port` from `from` to `to`, signing in with
    /// `credentials` when given.
    pub fn new(
        host: &str,
        port: u16,
        tls: SmtpTls,
        credentials: Option<(String, String)>,
        from: &str,
        to: &[String],
    ) -> Result<Email, String> {
        let from: Mailbox = from
            .parse()
            .map_err(|e| format!("from {from:?} is not an address: {e}"))?;
        let to = to
            .iter()
            .map(|t| {
                t.parse::<Mailbox>()
                    .map_err(|e| format!("to {t:?} is not an address: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if to.is_empty() {
            return Err("to names nobody".into());
        }
        let parameters =
            || TlsParameters::new(host.to_owned()).map_err(|e| format!("TLS for {host}: {e}"));
        let tls = match tls {
            SmtpTls::StartTls => Tls::Required(parameters()?),
            SmtpTls::Tls => Tls::Wrapper(parameters()?),
            SmtpTls::None => Tls::None,
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(port)
            .tls(tls)
            .timeout(Some(crate::webhook::TIMEOUT));
        if let Some((user, password)) = credentials {
            builder = builder.credentials(Credentials::new(user, password));
        }
        Ok(Email {
            transport: builder.build(),
            from,
            to,
            server: format!("{host}:{port}"),
        })
    }

    /// One attempt: `event` (the webhook's event body) as a plain-text e-mail.
    pub(crate) async fn send(&self, event: &Value) -> Delivery {
        let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or_default();
        let tool = event.get("tool").and_then(Value::as_str);
        let what = tool.map_or_else(|| "A question".to_owned(), |t| format!("A call of {t}"));
        let (subject, opening) = match text("event") {
            "elicitation.answered" => (
                format!("Answered: {}", tool.unwrap_or("a question")),
                format!("{what} was answered."),
            ),
            "elicitation.expired" => (
                format!("Expired unanswered: {}", tool.unwrap_or("a question")),
                format!("{what} expired before anyone answered it."),
            ),
            _ => match event.get("waited_minutes").and_then(Value::as_i64) {
                Some(minutes)
                    if event.get("step").and_then(Value::as_str) == Some("escalation") =>
                {
                    (
                        format!(
                            "Escalated to you, unanswered after {minutes} min: {}",
                            tool.unwrap_or("a question")
                        ),
                        format!(
                            "{what} has waited {minutes} minutes and nobody answered it: it is escalated to you."
                        ),
                    )
                }
                Some(minutes) => (
                    format!(
                        "Still waiting after {minutes} min: {}",
                        tool.unwrap_or("a question")
                    ),
                    format!("{what} has waited {minutes} minutes for a person to answer it."),
                ),
                None => (
                    format!("Waiting for you: {}", tool.unwrap_or("a question")),
                    format!("{what} waits for a person to answer it."),
                ),
            },
        };
        let since =
            crate::since::since_line(event).map_or_else(String::new, |l| format!("\n\n{l}"));
        let body = format!(
            "{opening}\n\n{}{since}\n\nAgent's caller: {}\nExpires: {}\nAnswer it here (you will be asked to sign in): {}\n\nThis message was sent by the MCP gateway; opening the link answers nothing.\n",
            text("message"),
            text("caller"),
            text("expires_at"),
            text("url"),
        );
        let mut message = Message::builder()
            .from(self.from.clone())
            .subject(format!("[mcp-gateway] {subject}"))
            .header(ContentType::TEXT_PLAIN);
        for to in &self.to {
            message = message.to(to.clone());
        }
        let message = match message.body(body) {
            Ok(message) => message,
            Err(e) => return Delivery::Refused(format!("the e-mail could not be written: {e}")),
        };
        match self.transport.send(message).await {
            Ok(_) => Delivery::Delivered,
            Err(e) if e.is_permanent() => {
                Delivery::Refused(format!("{} refused the e-mail: {e}", self.server))
            }
            Err(e) => Delivery::Retry(format!("{} did not take the e-mail: {e}", self.server)),
        }
    }
}
