//! Legacy requests (2025-11-25, 2025-06-18, 2025-03-26): `initialize` opens a session;
//! everything else needs one. A gated `tools/call` from a session that can elicit is
//! answered with a stream that asks the person (`ask::stream_confirmation`).

use http::HeaderMap;
use mcp_wire::jsonrpc::Request;
use mcp_wire::mcp::{self, LEGACY_VERSIONS};
use mcp_wire::tools::ForwardParams;
use mcp_wire::{FromClient, ResultBody};
use serde_json::{Value, json};

use std::sync::Arc;

use crate::PageBase;
use crate::answers::ClientAnswers;
use crate::ask;
use crate::relay::{self, ClientRelay, LogFilter, Relayed, SessionAsker};
use crate::service::{McpService, Reply, Streaming, header_str, header_text};
use crate::sessions::Session;
use mcp_auth::{Principal, SCOPE_TOOLS_CALL};
use mcp_gate::{CallOutcome, Classified, Gateway};
use mcp_http_kit::error::McpError;
use mcp_http_kit::live::Snapshot;
use mcp_http_kit::response;

impl McpService {
    /// The relay of a legacy session's request that runs at a module (a call, a task's
    /// `tasks/result`): what the module sends goes to the session's client on the request's
    /// own stream, its questions asked as the client declared it can answer, a form it
    /// cannot answer to the caller's inbox.
    pub(crate) fn session_relay(
        &self,
        tool: &Arc<mcp_upstream::registry::ToolEntry>,
        session: &Session,
        session_id: String,
        gateway: &Gateway,
        principal: &Principal,
    ) -> (Arc<ClientRelay>, tokio::sync::mpsc::Receiver<Vec<u8>>) {
        ClientRelay::new(
            tool,
            LogFilter::AtLeast(session.log_level()),
            Some(Box::new(SessionAsker {
                answers: self.answers.clone(),
                session: session_id,
                can: session.answers(),
            })),
            gateway.inbox(principal),
        )
    }

    /// A session's `resources/subscribe` (`subscribe` false: `unsubscribe`). The module is
    /// asked when the first session subscribes to the URI and when the last one leaves; a
    /// module that refuses leaves the session as it was.
    async fn subscribe(
        &self,
        snap: &Snapshot,
        session_id: &str,
        session: &Session,
        uri: &str,
        subscribe: bool,
    ) -> Result<(), McpError> {
        let changed = session
            .channel()
            .set_subscription(uri, subscribe)
            .map_err(|cap| {
                McpError::InvalidParams(format!(
                    "this session already subscribes to {cap} resources; unsubscribe from some first"
                ))
            })?;
        if !changed {
            return Ok(());
        }
        let module_knows = self.sessions.module_knows(
            &snap.gateway,
            self.listeners.subscribed(uri),
            uri,
            session_id,
        );
        let asked = if module_knows {
            Ok(())
        } else {
            snap.gateway
                .clone()
                .subscribe_resource(session.caller(), uri, subscribe)
                .await
                .map_err(McpError::from)
        };
        if asked.is_err() && subscribe {
            let _ = session.channel().set_subscription(uri, false);
            return asked;
        }
        // The instance holding the session's stream may be another one.
        self.tell_about(snap, session_id, |i, s| {
            crate::sessions::SessionEvent::Subscription {
                i,
                s,
                u: uri.to_owned(),
                on: subscribe,
            }
        });
        asked
    }

    /// Tells the other instances sharing the store what session `session_id` did here.
    fn tell_about(
        &self,
        snap: &Snapshot,
        session_id: &str,
        event: impl FnOnce(String, String) -> crate::sessions::SessionEvent,
    ) {
        let hash = crate::sessions::hex(&mcp_auth::sealed::token_hash(session_id));
        let event = event(self.sessions.instance().to_owned(), hash);
        crate::service::tell_other_instances(snap.gateway.fleet(), &event);
    }
}

/// `logging/setLevel`'s params.
#[derive(serde::Deserialize)]
struct LevelParams {
    level: String,
}

impl McpService {
    /// `initialize`: a session of the caller, on the endpoint it was asked on.
    fn initialize(
        &self,
        snap: &Snapshot,
        principal: &Principal,
        request: &mut Request,
    ) -> Result<Reply, McpError> {
        let params = request.take_params()?;
        let requested = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::InvalidParams("initialize needs protocolVersion".into()))?;
        let version = mcp::negotiate_legacy(requested);
        let answers = ClientAnswers::declared(params.get("capabilities"));
        let session = self.sessions.create(
            &principal.caller,
            snap.gateway.server_name(),
            version,
            answers,
        )?;
        Ok(Reply::Result(
            mcp::initialize_result(version).into(),
            Some(session),
        ))
    }

    /// A legacy request.
    pub(crate) async fn legacy(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        request: &mut Request,
        streaming: Streaming,
    ) -> Result<Reply, McpError> {
        // What writes session state (a new session, a subscription, a log level — each may
        // be recorded or told to every instance) counts against the caller's call rate.
        if matches!(
            request.method.as_str(),
            "initialize" | "resources/subscribe" | "resources/unsubscribe" | "logging/setLevel"
        ) {
            snap.gateway.take_call(
                &principal.caller,
                "this caller is changing sessions faster than the gateway allows",
            )?;
        }
        if request.method == "initialize" {
            return self.initialize(snap, principal, request);
        }
        let session_id = header_text(headers, "mcp-session-id").ok_or(McpError::MissingSession)?;
        let session =
            self.sessions
                .touch(&session_id, &principal.caller, snap.gateway.server_name())?;
        if let Some(version) = header_str(headers, "mcp-protocol-version")
            && !LEGACY_VERSIONS.contains(&version)
        {
            return Err(McpError::InvalidRequest(format!(
                "unsupported MCP-Protocol-Version {version:?} in a legacy session"
            )));
        }
        if let Some(answer) = self.catalog_method(snap, principal, request, true).await {
            let (result, _) = answer?;
            return Ok(Reply::Result(result.for_client(false), None));
        }
        let result: ResultBody = match request.method.as_str() {
            "ping" => json!({}).into(),
            method @ ("resources/subscribe" | "resources/unsubscribe") => {
                principal.require(SCOPE_TOOLS_CALL)?;
                let params: ForwardParams = request.params_as()?;
                let uri = params.str("uri").ok_or_else(|| {
                    McpError::InvalidParams(format!("{method} needs a string `uri`"))
                })?;
                self.subscribe(
                    snap,
                    &session_id,
                    &session,
                    uri,
                    method == "resources/subscribe",
                )
                .await?;
                json!({}).into()
            }
            "logging/setLevel" => {
                let params: LevelParams = request.params_as()?;
                let rank = mcp::log_level_rank(&params.level).ok_or_else(|| {
                    McpError::InvalidParams(format!("unknown log level {:?}", params.level))
                })?;
                self.sessions.set_log_level(
                    &session_id,
                    (&principal.caller, snap.gateway.server_name()),
                    rank,
                )?;
                self.tell_about(snap, &session_id, |i, s| {
                    crate::sessions::SessionEvent::LogLevel { i, s, r: rank }
                });
                snap.gateway.set_log_level(&params.level).await;
                json!({}).into()
            }
            "tools/call" => {
                return self
                    .legacy_call(
                        snap, headers, principal, request, streaming, session_id, session,
                    )
                    .await;
            }
            "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" => {
                // Boxed: every legacy request's future would be as big as this one's.
                return Box::pin(self.legacy_task(
                    snap, headers, principal, request, streaming, session_id, &session,
                ))
                .await;
            }
            other => return Err(McpError::MethodNotFound(other.to_owned())),
        };
        Ok(Reply::Result(result, None))
    }

    /// A legacy `tools/call`: classified and, for a gated call a client can confirm in band,
    /// asked on the call's own stream; otherwise run (its module's messages relayed on a
    /// stream scoped to the call when the client takes one).
    #[allow(clippy::too_many_arguments)]
    // Long: a legacy call's three ways (asked in band, relayed on a stream, answered plainly)
    // share the classified call.
    async fn legacy_call(
        &self,
        snap: &Snapshot,
        headers: &HeaderMap,
        principal: &Arc<Principal>,
        request: &mut Request,
        streaming: Streaming,
        session_id: String,
        session: Session,
    ) -> Result<Reply, McpError> {
        principal.require(SCOPE_TOOLS_CALL)?;
        let FromClient(params) = request.params_as()?;
        // One gateway for the whole call: a reload meanwhile cannot classify it under
        // one policy and resolve it under another.
        let gateway = snap.gateway.clone();
        // A client that asked for a task of a tool that runs as one waits on a task
        // (`hosted`), never on this request; of any other tool, the call runs as a call.
        let as_task = params.task().is_some()
            && gateway
                .tool(&params.name)
                .await
                .is_ok_and(|entry| gateway.takes_tasks(&entry));
        // A form only for a client that may confirm; the page's URL for any client
        // that opens URLs (the person answers on the page).
        // A confirmation an approver group must answer is not asked of the caller.
        let caller_answers = gateway.caller_answers(&params.name);
        let form = caller_answers && session.answers().elicitation && ask::may_answer(principal);
        let page = self.page_base(headers);
        // Told only for a gated call (the page's URL is made for it).
        let url = || caller_answers && session.answers().elicitation_url && page.url().is_some();
        let may_ask = self.config.native != ask::NativeMode::Off
            && streaming == Streaming::Allowed
            && !as_task;
        let classified = gateway.classify(principal, params).await?;
        // A permission prompt may wait for a person up to its confirmation's TTL: it holds
        // one of the caller's long-lived slots meanwhile, so one token cannot hold every
        // connection with them.
        let mut waiting = match &classified {
            Classified::PermissionPrompt(..) => match self.streams.try_open(&principal.caller) {
                Some(slot) => Some(slot),
                None => {
                    let refused = Gateway::too_many_waiting(self.streams.max_per_caller())
                        .into_reply()
                        .map_err(McpError::from)?;
                    return Ok(Reply::Result(refused.for_client(false), None));
                }
            },
            _ => None,
        };
        // The answer to the call once the gate decided: as a task when the client asked for
        // one (`hosted`), else as it is.
        let answer = {
            let (states, clock) = (self.states.clone(), self.config.clock.clone());
            move |caller: &Principal, outcome: CallOutcome, page: &PageBase| {
                if as_task {
                    crate::held_task::as_task(&states, clock.now(), caller, outcome, page)
                } else {
                    ask::reply(outcome, page)
                }
            }
        };
        let result: ResultBody = match classified {
            Classified::NeedsAccount(entry) if !as_task => {
                // Recorded as refused; the person connects their account, the agent retries.
                // Boxed (as the held path's `resolve`): every call's future would carry it.
                let outcome =
                    Box::pin(gateway.run(principal, Classified::NeedsAccount(entry.clone()), None))
                        .await;
                debug_assert!(matches!(outcome, CallOutcome::NeedsAccount { .. }));
                ask::account_needed(
                    &entry.module_name,
                    page.url().as_deref(),
                    session.answers().elicitation_url,
                    gateway.surfaces(),
                )?
            }
            Classified::Gated(call) if may_ask && (form || url()) => {
                let named = call.params.confirmation_id().and_then(|id| id.parse().ok());
                match Box::pin(gateway.resolve(principal, &call, named, None)).await {
                    // Beyond the caller's stream cap, the held result (answered out
                    // of band).
                    CallOutcome::NeedsConfirmation(pending)
                        if let Some(by) =
                            self.config
                                .native
                                .choose(form, url(), pending.askable_natively)
                            && let Some(slot) = self.streams.try_open(&principal.caller) =>
                    {
                        let context = ask::StreamContext {
                            gateway: gateway.clone(),
                            answers: self.answers.clone(),
                            session: session_id,
                            version: session.version(),
                            principal: principal.clone(),
                            request_id: request.id.clone(),
                            call,
                            client: session.answers(),
                            log_level: session.log_level(),
                            by,
                            page: page.url(),
                            clock: self.config.clock.clone(),
                            keep_alive: self.config.stream_keep_alive,
                            beats: Default::default(),
                        };
                        return Ok(Reply::Stream(ask::stream_confirmation(
                            context,
                            pending.confirmation,
                            slot,
                        )));
                    }
                    outcome => ask::reply(outcome, &page)?,
                }
            }
            classified if streaming == Streaming::Allowed && response::accepts_sse(headers) => {
                let (relay, queue) = self.session_relay(
                    classified.entry(),
                    &session,
                    session_id,
                    &gateway,
                    principal,
                );
                let gateway = gateway.clone();
                let caller = principal.clone();
                let channel = session.channel().clone();
                let id = request.id.clone();
                let page = page.clone();
                // The call may go on in the response's stream: its slot goes with it.
                let waiting = waiting.take();
                let call = async move {
                    let _waiting = waiting;
                    let relay: Arc<dyn mcp_upstream::Relay> = relay;
                    // Boxed: each future that awaits another holds it (twice while it is
                    // moved in), so an unboxed module call here made this call's future
                    // 20 KB, copied at every level per request.
                    let run = Box::pin(gateway.run(&caller, classified, Some(relay)));
                    channel
                        .cancellable(&id, async { answer(&caller, run.await, &page) })
                        .await
                };
                let id = request.id.clone();
                let last = move |outcome| relay::final_message(&id, outcome, false);
                match relay::relayed(call, queue, last).await {
                    Relayed::Done(Err(McpError::Cancelled)) => {
                        return Ok(Reply::Stream(relay::unanswered()));
                    }
                    Relayed::Done(result) => result?,
                    Relayed::Stream(response) => return Ok(Reply::Stream(response)),
                }
            }
            // Boxed for the same reason: the request's futures stay small.
            classified => answer(
                principal,
                Box::pin(gateway.run(principal, classified, None)).await,
                &page,
            )?,
        };
        drop(waiting);
        Ok(Reply::Result(result.for_client(false), None))
    }
}
