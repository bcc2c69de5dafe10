//! Notifications: tells people that an elicitation waits for them (and, when asked, that
//! it was answered or expired), through the `[[notify]]` sinks.
//!
//! What to tell comes from the store's outbox ([`elicitation_store::Outbox`]): a notice is
//! recorded with the change it tells of, so none is lost however an instance ends. The
//! [`Notifier`] claims due notices for [`LEASE`], reads each elicitation as its caller,
//! delivers it to every sink whose filter matches and that does not have it yet, and
//! settles it — done, or due again after a back-off while a sink fails in a way worth
//! retrying, until the elicitation stops waiting or [`MAX_ATTEMPTS`]. A notice whose
//! instance died is claimed again by another when the lease lapses, with the same delivery
//! id, so a receiver de-duplicates.
//!
//! A notification never acts: it carries a link to the elicitation's page, where a person
//! signs in and answers with a form post (nothing is approved by opening a link).

mod delivery;
mod email;
mod since;
mod slack;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::ElicitationStatus;
use elicitation_store::{
    Clock, Notice, NoticeEvent, NoticeStep, Settle, Store, StoreError, StoredElicitation,
};
use mcp_metrics::Metrics;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub use delivery::Delivery;
pub use email::{Email, SmtpTls};
pub use since::with_since;
pub use slack::{
    MAX_SKEW_SECONDS, Slack, SlackAction, SlackActions, SlackRefusal, SlackUser, slack_message,
    slack_signature,
};
pub use webhook::{SIGNATURE_HEADER, Webhook, signature};

/// How long a claim on a notice lasts: past it, another instance may deliver it.
pub const LEASE: Duration = Duration::from_secs(60);

/// Notices claimed at once.
const BATCH: usize = 16;

/// Delivery attempts of one notice before it is given up.
pub const MAX_ATTEMPTS: u32 = 10;

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How often the outbox is read when nothing wakes the notifier.
const POLL: Duration = Duration::from_secs(1);

/// One `[[notify]]` sink.
#[derive(Debug, Clone)]
pub struct Sink {
    /// Its name (unique): in metrics, logs, and the outbox's record of who has a notice.
    pub name: String,
    /// Which notices it gets.
    pub filter: Filter,
    /// Where they go.
    pub kind: SinkKind,
}

/// Which notices a sink gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Qualified tool names, exact or a prefix ending in `*`; empty: every tool (and
    /// questions of no tool).
    pub tools: Vec<String>,
    /// Only confirmations an approver group answers, of these groups; empty: all.
    pub groups: Vec<String>,
    /// The events; at least one.
    pub events: Vec<NoticeEvent>,
    /// A waiting elicitation reaches this sink only once it has waited this long, if it
    /// still waits (a reminder to the same people, or an escalation to others); one answered
    /// before never does. `None`: at once.
    pub after: Option<std::time::Duration>,
}

impl Filter {
    /// Whether a notice of `event` about `elicitation` is this sink's.
    pub fn matches(&self, event: NoticeEvent, elicitation: &StoredElicitation) -> bool {
        if !self.events.contains(&event) {
            return false;
        }
        let call = elicitation.call.as_ref();
        if !self.takes_tool(call.map(|c| c.tool.as_str())) {
            return false;
        }
        if !self.groups.is_empty() {
            let Some(approval) = call.and_then(|c| c.approval.as_ref()) else {
                return false;
            };
            // Any of the groups that answer it (a quorum's further groups too).
            if !approval.answered_by_groups(&self.groups) {
                return false;
            }
        }
        true
    }
}

impl Filter {
    /// Whether notices about `tool` (`None`: a question of no tool) are this sink's.
    fn takes_tool(&self, tool: Option<&str>) -> bool {
        if self.tools.is_empty() {
            return true;
        }
        let Some(tool) = tool else {
            return false;
        };
        self.tools.iter().any(|t| gating_core::covers(t, tool))
    }
}

/// The settled key of a sink's delivery of `step` (a sink told at once is keyed by its
/// name alone).
fn step_suffix(step: NoticeStep) -> &'static str {
    match step {
        NoticeStep::Reminder => "#reminder",
        NoticeStep::Escalation => "#escalation",
    }
}

/// `body` with how long it has waited (a sink told later, a step) and which step it is.
fn with_step(mut body: Value, waited: Option<i64>, step: Option<(NoticeStep, &[String])>) -> Value {
    if let Some(minutes) = waited {
        body["waited_minutes"] = json!(minutes);
    }
    if let Some((step, to)) = step {
        body["step"] = json!(step.label());
        if step == NoticeStep::Escalation {
            body["escalated_to"] = json!(to);
        }
    }
    body
}

/// An approver rule's chasing of the calls it holds that still wait: a reminder to the
/// people told at once, then an escalation to the sinks of further groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The rule's tools: a qualified name, or a prefix ending in `*`.
    pub tools: String,
    /// After this long, the sinks that were told at once are told again.
    pub remind_after: Option<std::time::Duration>,
    /// After this long, the sinks of `escalate_to` are told.
    pub escalate_after: Option<std::time::Duration>,
    /// The groups escalated to: the sinks whose `groups` name one of them are told.
    pub escalate_to: Vec<String>,
}

impl Route {
    fn covers(&self, tool: &str) -> bool {
        gating_core::covers(&self.tools, tool)
    }
}

/// Where a sink's notifications go.
#[derive(Debug, Clone)]
pub enum SinkKind {
    /// A signed JSON `POST`.
    Webhook(Webhook),
    /// A plain-text e-mail over SMTP (boxed: its transport is large).
    Email(Box<Email>),
    /// A Block Kit message to a Slack incoming webhook.
    Slack(Slack),
}

/// The notifier of one instance.
pub struct Notifier {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field(
                "sinks",
                &self.inner.sinks.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field("page", &self.inner.page)
            .finish_non_exhaustive()
    }
}

/// The events any of `sinks` wants: what the store's outbox records.
pub fn events_of(sinks: &[Sink]) -> Vec<NoticeEvent> {
    let mut events: Vec<NoticeEvent> = sinks
        .iter()
        .flat_map(|s| s.filter.events.iter().copied())
        .collect();
    events.sort();
    events.dedup();
    events
}

impl Notifier {
    /// A notifier delivering `store`'s notices to `sinks`, linking to the page at `page`.
    pub fn new(
        store: Arc<dyn Store>,
        sinks: Vec<Sink>,
        page: impl Into<String>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(webhook::TIMEOUT)
            .connect_timeout(webhook::TIMEOUT)
            // A receiver's redirect is not followed: the signed body goes where it was
            // configured to, or nowhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("the notifications' HTTP client: {e}"))?;
        Ok(Notifier {
            inner: Arc::new(Shared {
                store,
                sinks,
                routes: Vec::new(),
                page: page.into().trim_end_matches('/').to_owned(),
                clock,
                metrics,
                http,
            }),
        })
    }

    /// The approver rules' reminders and escalations (the first rule covering a held
    /// call's tool chases it, as the first decides who answers).
    #[must_use]
    pub fn with_routes(mut self, routes: Vec<Route>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.routes = routes;
        }
        self
    }

    /// Delivers notices until `stop` resolves: at once when the store tells of a change,
    /// else every second.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        if self.inner.sinks.is_empty() {
            return;
        }
        let mut changes = self.inner.store.changes();
        tokio::pin!(stop);
        let mut dropped = 0;
        loop {
            if let Err(e) = self.tick().await {
                tracing::warn!(error = %e, "notices could not be read from the store; trying again");
            }
            let now_dropped = self.inner.store.notices_dropped();
            if now_dropped > dropped {
                self.inner.metrics.notices_dropped(now_dropped - dropped);
                dropped = now_dropped;
            }
            let woken = async {
                match &mut changes {
                    Some(changes) => {
                        let _ = tokio::time::timeout(POLL, changes.recv()).await;
                    }
                    None => tokio::time::sleep(POLL).await,
                }
            };
            tokio::select! {
                () = &mut stop => return,
                () = woken => {}
            }
        }
    }

    /// Claims the notices due now and delivers them (concurrently); how many it claimed.
    pub async fn tick(&self) -> Result<usize, StoreError> {
        let now = self.inner.clock.now();
        let notices = self.inner.store.claim_notices(now, LEASE, BATCH).await?;
        let claimed = notices.len();
        let mut work = tokio::task::JoinSet::new();
        for notice in notices {
            let inner = self.inner.clone();
            work.spawn(async move { inner.deliver(notice).await });
        }
        while work.join_next().await.is_some() {}
        Ok(claimed)
    }
}

/// What a delivery task holds.
struct Shared {
    store: Arc<dyn Store>,
    sinks: Vec<Sink>,
    routes: Vec<Route>,
    page: String,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    http: reqwest::Client,
}

impl Shared {
    /// Delivers one claimed notice to every sink it is for and does not have it, then
    /// settles it.
    async fn deliver(&self, notice: Notice) {
        let settle = match self.store.get(&notice.caller, notice.elicitation).await {
            Ok(elicitation) => self.deliver_to_sinks(&notice, &elicitation).await,
            // Erased (retention) or never readable: nothing to tell.
            Err(StoreError::NotFound { .. }) => (notice.delivered.clone(), Settle::Done),
            Err(e) => {
                tracing::warn!(notice = notice.id, error = %e, "a notice's elicitation could not be read; trying again");
                (notice.delivered.clone(), self.again(&notice, None))
            }
        };
        let (delivered, settle) = settle;
        let now = self.clock.now();
        if let Err(e) = self
            .store
            .settle_notice(notice.id, &delivered, settle, now)
            .await
        {
            // Its claim lapses and it is delivered again (same delivery id).
            tracing::warn!(notice = notice.id, error = %e, "a notice could not be settled; it will be claimed again");
        }
    }

    // Long: one notice through every sink in order (skipped, told later, delivered, retried,
    // given up), then settled once for all of them.
    async fn deliver_to_sinks(
        &self,
        notice: &Notice,
        elicitation: &StoredElicitation,
    ) -> (Vec<String>, Settle) {
        let now = self.clock.now();
        let mut settled = notice.delivered.clone();
        // "Waiting" for what no longer waits tells nobody anything.
        if notice.event == NoticeEvent::Waiting
            && elicitation.elicitation.status_at(now) != ElicitationStatus::Pending
        {
            return (settled, Settle::Done);
        }
        // A held call is told with what changed since the last call of its tool by its
        // caller that a person approved (read once, for every sink).
        let since = match &elicitation.call {
            Some(call) if notice.event == NoticeEvent::Waiting => {
                self.last_approved(&notice.caller, &call.tool, elicitation.elicitation.id)
                    .await
            }
            _ => None,
        };
        let body = |include_arguments: bool| {
            let mut body = event_body(notice, elicitation, &self.page, include_arguments);
            if let (Some((at, before)), Some(call)) = (&since, &elicitation.call) {
                with_since(&mut body, *at, before, &call.arguments, include_arguments);
            }
            body
        };
        let mut retry = false;
        // The sinks told only once the elicitation has waited a while, and when the first is due.
        let mut later: Vec<&str> = Vec::new();
        let mut due_next: Option<OffsetDateTime> = None;
        for sink in &self.sinks {
            if settled.contains(&sink.name) || !sink.filter.matches(notice.event, elicitation) {
                continue;
            }
            let after = sink
                .filter
                .after
                .filter(|_| notice.event == NoticeEvent::Waiting);
            if let Some(after) = after {
                let due =
                    notice.at + time::Duration::try_from(after).unwrap_or(time::Duration::DAY);
                if now < due {
                    later.push(&sink.name);
                    due_next = Some(due_next.map_or(due, |d| d.min(due)));
                    continue;
                }
            }
            let waited = after.map(|_| (now - notice.at).whole_minutes().max(0));
            let told = self
                .tell(sink, &sink.name, notice, &|inc| {
                    with_step(body(inc), waited, None)
                })
                .await;
            match told {
                Some(key) => settled.push(key),
                None => retry = true,
            }
        }
        // The approver rule's reminder and escalation, each once, when due.
        for (step, due, targets, to) in self.steps(notice, elicitation) {
            let before = settled.iter().any(|k| k.ends_with(step_suffix(step)));
            let mut told_now = Vec::new();
            for sink in targets {
                let key = format!("{}{}", sink.name, step_suffix(step));
                if settled.contains(&key) {
                    continue;
                }
                if now < due {
                    later.push(&sink.name);
                    due_next = Some(due_next.map_or(due, |d| d.min(due)));
                    continue;
                }
                let waited = Some((now - notice.at).whole_minutes().max(0));
                let told = self
                    .tell(sink, &key, notice, &|inc| {
                        with_step(body(inc), waited, Some((step, to.as_slice())))
                    })
                    .await;
                match told {
                    Some(key) => {
                        told_now.push(sink.name.clone());
                        settled.push(key);
                    }
                    None => retry = true,
                }
            }
            if !before && !told_now.is_empty() {
                let tool = elicitation.call.as_ref().map(|c| c.tool.as_str());
                let detail = json!({
                    "sinks": told_now,
                    "waited_minutes": (now - notice.at).whole_minutes().max(0),
                    "to": to,
                });
                if let Err(e) = self
                    .store
                    .record_step(&notice.caller, notice.elicitation, tool, step, detail)
                    .await
                {
                    tracing::warn!(notice = notice.id, step = step.label(), error = %e, "a reminder or escalation could not be audited");
                }
            }
        }
        // A sink due after the elicitation expires is never told (it no longer waits).
        let due_next = due_next.filter(|due| *due < elicitation.elicitation.expires_at);
        if !retry {
            return (settled, due_next.map_or(Settle::Done, Settle::RetryAt));
        }
        let settle = self.again(notice, Some(elicitation));
        if settle == Settle::Done {
            let given_up: Vec<String> = self
                .sinks
                .iter()
                .filter(|s| !settled.contains(&s.name) && !later.contains(&s.name.as_str()))
                .filter(|s| s.filter.matches(notice.event, elicitation))
                .map(|s| s.name.clone())
                .collect();
            for name in given_up {
                tracing::warn!(sink = %name, notice = notice.id, "a notification was given up");
                self.metrics.notification(&name, "failed");
                // Not tried again when the notice comes back for a sink told later.
                settled.push(name);
            }
        }
        let settle = match (settle, due_next) {
            (Settle::RetryAt(next), Some(due)) => Settle::RetryAt(next.min(due)),
            (Settle::Done, Some(due)) => Settle::RetryAt(due),
            (settle, None) => settle,
        };
        (settled, settle)
    }

    /// Delivers to `sink` the body `body` builds (with or without the arguments, as the
    /// sink takes them): `Some(key)` once it has it (or refused it for good), `None` to try
    /// again.
    async fn tell(
        &self,
        sink: &Sink,
        key: &str,
        notice: &Notice,
        body: &(dyn Fn(bool) -> Value + Sync),
    ) -> Option<String> {
        let outcome = match &sink.kind {
            SinkKind::Webhook(hook) => {
                hook.send(&self.http, &body(hook.include_arguments), self.clock.now())
                    .await
            }
            SinkKind::Slack(slack) => {
                slack
                    .send(&self.http, &body(slack.include_arguments), self.clock.now())
                    .await
            }
            SinkKind::Email(mail) => mail.send(&body(false)).await,
        };
        match outcome {
            Delivery::Delivered => {
                tracing::info!(sink = %sink.name, notice = notice.id, elicitation = %notice.elicitation, event = notice.event.label(), "notification delivered");
                self.metrics.notification(&sink.name, "delivered");
                Some(key.to_owned())
            }
            Delivery::Retry(why) => {
                tracing::warn!(sink = %sink.name, notice = notice.id, attempt = notice.attempts + 1, reason = %why, "a notification was not delivered; trying again");
                self.metrics.notification(&sink.name, "retried");
                None
            }
            Delivery::Refused(why) => {
                tracing::warn!(sink = %sink.name, notice = notice.id, reason = %why, "a notification was refused by its receiver; not trying again");
                self.metrics.notification(&sink.name, "failed");
                Some(key.to_owned())
            }
        }
    }

    /// The steps of the approver rule covering a waiting held call: each with when it is
    /// due, the sinks it tells and the groups escalated to.
    fn steps<'a>(
        &'a self,
        notice: &Notice,
        elicitation: &StoredElicitation,
    ) -> Vec<(NoticeStep, OffsetDateTime, Vec<&'a Sink>, Vec<String>)> {
        let Some(call) = elicitation.call.as_ref() else {
            return Vec::new();
        };
        if notice.event != NoticeEvent::Waiting {
            return Vec::new();
        }
        let Some(route) = self.routes.iter().find(|r| r.covers(&call.tool)) else {
            return Vec::new();
        };
        let due = |after: std::time::Duration| {
            notice.at + time::Duration::try_from(after).unwrap_or(time::Duration::DAY)
        };
        let mut steps = Vec::new();
        if let Some(after) = route.remind_after {
            // The same people: the sinks told at once.
            let targets = self
                .sinks
                .iter()
                .filter(|s| s.filter.after.is_none() && s.filter.matches(notice.event, elicitation))
                .collect();
            steps.push((NoticeStep::Reminder, due(after), targets, Vec::new()));
        }
        if let Some(after) = route.escalate_after {
            // Further people: the sinks of the groups escalated to (whatever group answers).
            let targets = self
                .sinks
                .iter()
                .filter(|s| {
                    s.filter.events.contains(&NoticeEvent::Waiting)
                        && s.filter
                            .groups
                            .iter()
                            .any(|g| route.escalate_to.contains(g))
                        && s.filter.takes_tool(Some(&call.tool))
                })
                .collect();
            steps.push((
                NoticeStep::Escalation,
                due(after),
                targets,
                route.escalate_to.clone(),
            ));
        }
        steps
    }

    /// When to try `notice` again, or done: after [`MAX_ATTEMPTS`], or once a waiting
    /// elicitation's time is up.
    fn again(&self, notice: &Notice, elicitation: Option<&StoredElicitation>) -> Settle {
        let attempts = notice.attempts + 1;
        if attempts >= MAX_ATTEMPTS {
            return Settle::Done;
        }
        let wait = backoff(attempts);
        let next = self.clock.now() + wait;
        if notice.event == NoticeEvent::Waiting
            && elicitation.is_some_and(|e| next >= e.elicitation.expires_at)
        {
            return Settle::Done;
        }
        Settle::RetryAt(next)
    }
}

/// The wait before attempt `attempts + 1`: 1 s, doubling, at most [`MAX_BACKOFF`].
fn backoff(attempts: u32) -> Duration {
    let secs = 1u64 << attempts.saturating_sub(1).min(6);
    Duration::from_secs(secs).min(MAX_BACKOFF)
}

/// The page of one elicitation.
pub fn page_of(page: &str, id: elicitation_core::ElicitationId) -> String {
    format!("{page}/approvals/e/{id}")
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

impl Shared {
    /// When the last call of `tool` by `caller` that a person approved was answered, and its
    /// arguments (among the caller's latest answered ones; `None`: none, or the store could
    /// not be read — the notice goes without it).
    async fn last_approved(
        &self,
        caller: &elicitation_store::Caller,
        tool: &str,
        not: elicitation_core::ElicitationId,
    ) -> Option<(OffsetDateTime, Value)> {
        let approved = match elicitation_store::recently_approved(self.store.as_ref(), caller).await
        {
            Ok(approved) => approved,
            Err(e) => {
                tracing::warn!(error = %e, "a caller's approved calls could not be read for a notice; it goes without what changed");
                return None;
            }
        };
        let last = elicitation_store::last_approved(&approved, tool, not)?;
        Some((
            last.elicitation.responded_at?,
            last.call.as_ref()?.arguments.clone(),
        ))
    }
}

/// The event a sink is told: `{"event": "elicitation.<event>", "delivery", "at", "id",
/// "caller", "tool", "type", "message", "expires_at", "url"}` (and `"tenant"` when the
/// caller has one). The call's arguments — `"arguments"`, and the part of a confirmation's
/// message that shows them — only when the sink asks for them.
pub fn event_body(
    notice: &Notice,
    elicitation: &StoredElicitation,
    page: &str,
    include_arguments: bool,
) -> Value {
    let e = &elicitation.elicitation;
    // A confirmation's message shows the call's arguments: they leave only when asked for.
    let message = match &elicitation.call {
        Some(call) if !include_arguments => {
            gating_core::message_without_arguments(&call.tool, e.spec.message(), &call.arguments)
        }
        _ => e.spec.message().to_owned(),
    };
    let mut body = json!({
        "event": format!("elicitation.{}", notice.event.label()),
        "delivery": notice.delivery.to_string(),
        "at": rfc3339(notice.at),
        "id": e.id.to_string(),
        "caller": notice.caller.subject_id(),
        "tool": elicitation.call.as_ref().map(|c| c.tool.as_str()),
        "type": e.spec.kind().as_str(),
        "message": message,
        "expires_at": rfc3339(e.expires_at),
        "url": page_of(page, e.id),
    });
    if let Some(tenant) = notice.caller.tenant_id() {
        body["tenant"] = json!(tenant);
    }
    if include_arguments && let Some(call) = &elicitation.call {
        body["arguments"] = call.arguments.clone();
    }
    body
}

#[cfg(test)]
mod tests;
