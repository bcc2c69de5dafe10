//! The rmcp adapter (feature `rmcp`): [`Gated`] wraps any `rmcp::ServerHandler` so that its
//! tools go through the gate before they run — its destructive ones (by their annotations,
//! which are the server's own and believed) or whatever the policy gates are held for a
//! person. Everything else the handler does passes through untouched.
//!
//! A held call is asked natively where the client can answer and the caller may
//! (`elicitations:respond`, and no approver group answers instead): a 2026-07-28 client
//! gets `input_required` with one `elicitation/create` and retries with the answer; a
//! 2025-11-25 session gets `elicitation/create` on its stream while the call waits.
//! Otherwise, or when the person dismisses the question, the call answers with the held
//! result, and a person answers elsewhere (the approvals page or REST of a mounted
//! `mcp_http::McpService`, Slack, a backend). The agent then calls again naming the
//! confirmation in `_meta.confirmation_id` (read from rmcp's `context.meta` and the
//! request's own `_meta`), or with identical arguments.
//!
//! The decisions are the gateway's own: [`Gateway::classify_own`], the settle step and
//! the run with its audit record ([`Gateway::run_own`], [`Gateway::resolve_own`]).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ::rmcp::model::*;
use ::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequestParams, ErrorCode,
    ErrorData, InputRequiredResult, ProtocolVersion, Tool,
};
use ::rmcp::service::{
    MaybeSendFuture, NotificationContext, RequestContext, RoleServer, SubscriptionContext,
};
use ::rmcp::{ErrorData as McpError, ServerHandler};
use elicitation_core::{Elicitation, ElicitationId, response_schema};
use mcp_auth::{Principal, SCOPE_RESPOND};
use mcp_upstream::ModuleError;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::CallToolParams;
use mcp_wire::tools::ElicitFormParams;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::GateError;
use crate::streams::StreamSlots;
use crate::{CallOutcome, Classified, ClientAnswer, GatedCall, Gateway, OwnTool};

/// The key of the adapter's one input request (2026-07-28).
const CONFIRM_KEY: &str = "confirm";

/// Who is calling, from the request's context (an HTTP server's request parts are in
/// `context.extensions`): `None` refuses the call.
pub type CallerOf = dyn Fn(&RequestContext<RoleServer>) -> Option<Principal> + Send + Sync;

/// An rmcp server handler whose tools go through the gate first.
pub struct Gated<H> {
    inner: Arc<H>,
    gateway: Arc<Gateway>,
    module: String,
    caller: Arc<CallerOf>,
    waits: StreamSlots,
}

impl<H> Clone for Gated<H> {
    fn clone(&self) -> Self {
        Gated {
            inner: self.inner.clone(),
            gateway: self.gateway.clone(),
            module: self.module.clone(),
            caller: self.caller.clone(),
            waits: self.waits.clone(),
        }
    }
}

impl<H: ServerHandler> Gated<H> {
    /// `inner`'s tools gated by `gateway` (for a server of its own, see
    /// [`Gateway::for_own_tools`]), each call made by whoever `caller` reads from the
    /// request's context (a bearer token in the HTTP request's parts, say; `None` refuses the
    /// call). Callers are kept apart: one's confirmations are never another's.
    pub fn new(
        inner: H,
        gateway: Arc<Gateway>,
        caller: impl Fn(&RequestContext<RoleServer>) -> Option<Principal> + Send + Sync + 'static,
    ) -> Self {
        Gated {
            inner: Arc::new(inner),
            gateway,
            module: "server".into(),
            caller: Arc::new(caller),
            waits: StreamSlots::new(MAX_WAITING_PER_CALLER),
        }
    }

    /// `inner`'s tools gated by `gateway` for a server one person uses: every call is the
    /// caller `local`, who may answer in its own client. For stdio, or HTTP this machine
    /// alone reaches; over a network every client would be the same caller and could use
    /// another's approval: use [`Gated::new`] with who calls.
    pub fn for_local_user(inner: H, gateway: Arc<Gateway>) -> Self {
        Gated::new(inner, gateway, |_: &RequestContext<RoleServer>| {
            Some(Principal::local())
        })
    }

    /// The name the server's tools are counted and audited under (`server` unless named).
    #[must_use]
    pub fn named(mut self, module: &str) -> Self {
        self.module = module.to_owned();
        self
    }

    /// The handler it wraps.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    async fn definition(&self, name: &str, context: &RequestContext<RoleServer>) -> Option<Tool> {
        if let Some(tool) = self.inner.get_tool(name) {
            return Some(tool);
        }
        let mut cursor = None;
        // A bound on the pages read: a handler that pages forever is not listed to the end.
        for _ in 0..100 {
            let params = ::rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
            let listed = self
                .inner
                .list_tools(Some(params), context.clone())
                .await
                .ok()?;
            if let Some(tool) = listed.tools.into_iter().find(|t| t.name == name) {
                return Some(tool);
            }
            cursor = Some(listed.next_cursor?);
        }
        None
    }

    // Long: one gated call in order (caller, tool, step one, the settle step with the
    // client's answer, how the answer is written).
    async fn gated_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(principal) = (self.caller)(&context) else {
            return Err(McpError::invalid_request(
                "this caller may not call tools",
                None,
            ));
        };
        // An unknown tool runs nothing: the gate cannot judge it.
        let Some(tool) = self.definition(&request.name, &context).await else {
            return Err(McpError::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        };
        let tool = serde_json::to_value(&tool).map_err(internal)?;
        let Some(entry) = ToolEntry::own(&self.module, tool) else {
            return Err(McpError::invalid_params(
                format!("the tool {} has no valid name", request.name),
                None,
            ));
        };
        let (params, answer, state) = gate_params(request, &context)?;
        let runner = Runner {
            inner: &self.inner,
            context: context.clone(),
        };
        let classified = self
            .gateway
            .classify_own(&principal, Arc::new(entry), params)
            .await
            .map_err(gate_error)?;
        let call = match classified {
            Classified::Gated(call) => call,
            other => return reply(self.gateway.run_own(&principal, other, &runner).await),
        };
        let asks = Asks::of(&context);
        // Asked in the client only where the gateway itself would ask there: a client that
        // shows forms, a message that shows every argument, a caller that may answer and no
        // approver group answering instead.
        let may_ask = asks.form
            && call.message.shows_all_arguments
            && principal.scopes.contains(SCOPE_RESPOND)
            && self.gateway.caller_answers(&call.entry.qualified);
        // A 2026-07-28 retry: the answer to the question this call was asked, recorded as
        // the caller's when the state names the caller's confirmation of exactly this call
        // and the call is one that is asked in the client at all.
        let mut named = call
            .params
            .confirmation_id()
            .and_then(|id| id.parse::<ElicitationId>().ok());
        let mut dismissed = false;
        if let Some(state) = state {
            let id = self.state_of(&principal, &call, &state).await?;
            if let Some(answer) = answer {
                principal
                    .require(SCOPE_RESPOND)
                    .map_err(|e| McpError::invalid_request(e.to_string(), None))?;
                if !may_ask {
                    return Err(McpError::invalid_request(
                        "this confirmation is not answered in the client: a person answers it where the service's people answer",
                        None,
                    ));
                }
                dismissed = self
                    .gateway
                    .record_client_answer(&principal, id, answer)
                    .await
                    == ClientAnswer::Dismissed;
            }
            named = Some(id);
        }
        let outcome = self
            .gateway
            .resolve_own(&principal, &call, named, &runner)
            .await;
        let CallOutcome::NeedsConfirmation(pending) = outcome else {
            return reply(outcome);
        };
        let native = !dismissed && may_ask && pending.askable_natively;
        if !native {
            return reply(CallOutcome::NeedsConfirmation(pending));
        }
        let confirmation = &pending.confirmation;
        if asks.modern {
            return input_required(confirmation).map(CallToolResponse::InputRequired);
        }
        // A call waiting on the stream holds one of the caller's waits; past them, the
        // held result.
        let Some(_waiting) = self.waits.try_open(&principal.caller) else {
            return reply(CallOutcome::NeedsConfirmation(pending));
        };
        // 2025-11-25: asked on the session's stream while the call waits.
        let asked: ElicitRequestParams = form(confirmation)?;
        // The person has until the confirmation expires, however long that is.
        let left = confirmation.expires_at - self.gateway.clock().now();
        let left = std::time::Duration::try_from(left).unwrap_or_default();
        let answered = match context
            .peer
            .create_elicitation_with_timeout(asked, Some(left))
            .await
        {
            Ok(result) => serde_json::to_value(result).map_err(internal)?,
            Err(e) => {
                tracing::info!(confirmation = %confirmation.id, error = %e, "the client did not answer the confirmation; it waits for a person elsewhere");
                return reply(CallOutcome::NeedsConfirmation(pending));
            }
        };
        if self
            .gateway
            .record_client_answer(&principal, confirmation.id, answered)
            .await
            == ClientAnswer::Dismissed
        {
            return reply(CallOutcome::NeedsConfirmation(pending));
        }
        reply(
            self.gateway
                .resolve_own(&principal, &call, Some(confirmation.id), &runner)
                .await,
        )
    }

    /// The confirmation a retry's `requestState` names, when it is the caller's confirmation
    /// of exactly this call (a state naming another call's is refused, answering nothing).
    async fn state_of(
        &self,
        principal: &Principal,
        call: &GatedCall,
        state: &str,
    ) -> Result<ElicitationId, McpError> {
        let invalid = || McpError::invalid_params("Invalid or expired requestState", None);
        let id: ElicitationId = state.parse().map_err(|_| invalid())?;
        let mine = self
            .gateway
            .store()
            .confirmation_for(&principal.caller, &call.binding)
            .await
            .map_err(|e| gate_error(e.into()))?;
        if mine != Some(id) {
            return Err(invalid());
        }
        Ok(id)
    }
}

/// Everything but `tools/call` is the wrapped handler's (the deprecated methods too: the
/// wrapped handler may still serve older clients with them).
#[allow(deprecated)]
impl<H: ServerHandler> ServerHandler for Gated<H> {
    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, McpError>> + MaybeSendFuture + '_ {
        self.gated_call(request, context)
    }

    fn ping(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.ping(context)
    }

    fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<InitializeResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.initialize(request, context)
    }

    fn negotiate_initialize(
        &self,
        request: &InitializeRequestParams,
    ) -> Result<InitializeResult, McpError> {
        self.inner.negotiate_initialize(request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }

    fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<DiscoverResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.discover(context)
    }

    fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CompleteResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.complete(request, context)
    }

    fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.set_level(request, context)
    }

    fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetPromptResponse, McpError>> + MaybeSendFuture + '_ {
        self.inner.get_prompt(request, context)
    }

    fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListPromptsResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_prompts(request, context)
    }

    fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourcesResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_resources(request, context)
    }

    fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourceTemplatesResult, McpError>> + MaybeSendFuture + '_
    {
        self.inner.list_resource_templates(request, context)
    }

    fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ReadResourceResponse, McpError>> + MaybeSendFuture + '_ {
        self.inner.read_resource(request, context)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.inner.accepted_subscription_filter(requested)
    }

    fn listen(
        &self,
        context: SubscriptionContext,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.listen(context)
    }

    fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.subscribe(request, context)
    }

    fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.unsubscribe(request, context)
    }

    fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_tools(request, context)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }

    fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CustomResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.on_custom_request(request, context)
    }

    fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_cancelled(notification, context)
    }

    fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_progress(notification, context)
    }

    fn on_initialized(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_initialized(context)
    }

    fn on_roots_list_changed(
        &self,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_roots_list_changed(context)
    }

    fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.inner.on_custom_notification(notification, context)
    }

    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetTaskResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.get_task(request, context)
    }

    fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.update_task(request, context)
    }

    fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), McpError>> + MaybeSendFuture + '_ {
        self.inner.cancel_task(request, context)
    }

    fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListSkillsResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.list_skills(request, context)
    }

    fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetSkillResult, McpError>> + MaybeSendFuture + '_ {
        self.inner.get_skill(request, context)
    }

    fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ReadResourceDirectoryResult, McpError>> + MaybeSendFuture + '_
    {
        self.inner.read_resource_directory(request, context)
    }
}

/// Most calls of one caller waiting on their session's stream for an answer in the client.
const MAX_WAITING_PER_CALLER: usize = 16;

/// What the client can be asked with.
struct Asks {
    /// It shows forms (declared elicitation, form mode or the 2025 default).
    form: bool,
    /// It speaks 2026-07-28 (asked with `input_required`).
    modern: bool,
}

impl Asks {
    fn of(context: &RequestContext<RoleServer>) -> Asks {
        // Elicitation declared with no mode is form (2025-11-25); `url` alone is not.
        let form = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|modes| modes.form.is_some() || modes.url.is_none());
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        Asks { form, modern }
    }
}

/// The gate's params of an rmcp call: `_meta` from the request and from rmcp's
/// `context.meta` (where rmcp puts a handler's), and the 2026-07-28 retry's answer and
/// state taken out.
fn gate_params(
    mut request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<(CallToolParams, Option<Value>, Option<String>), McpError> {
    let answer = request
        .input_responses
        .take()
        .and_then(|mut responses| responses.remove(CONFIRM_KEY));
    let state = request.request_state.take();
    let mut value = serde_json::to_value(&request).map_err(internal)?;
    let from_context = serde_json::to_value(&context.meta).map_err(internal)?;
    if let (Some(object), Value::Object(extra)) = (value.as_object_mut(), from_context) {
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            for (key, value) in extra {
                meta.entry(key).or_insert(value);
            }
            if meta.is_empty() {
                object.remove("_meta");
            }
        }
    }
    let params = serde_json::from_value(value)
        .map_err(|e| McpError::invalid_params(format!("params cannot be read: {e}"), None))?;
    Ok((params, answer, state))
}

/// The `elicitation/create` params of a confirmation, in form mode, as rmcp reads them.
fn form<T: serde::de::DeserializeOwned>(confirmation: &Elicitation) -> Result<T, McpError> {
    let schema = response_schema(confirmation.spec.response());
    let params = ElicitFormParams {
        mode: Some("form"),
        message: confirmation.spec.message(),
        requested_schema: &schema,
    };
    serde_json::to_value(params)
        .and_then(serde_json::from_value)
        .map_err(internal)
}

/// `input_required` with the one question; the state is the confirmation's id, accepted
/// back only from the same caller for the same call (`state_of`).
fn input_required(confirmation: &Elicitation) -> Result<InputRequiredResult, McpError> {
    let schema = response_schema(confirmation.spec.response());
    let params = ElicitFormParams {
        mode: Some("form"),
        message: confirmation.spec.message(),
        requested_schema: &schema,
    };
    let request = mcp_wire::tools::InputRequest {
        method: "elicitation/create".into(),
        params,
    };
    let result = mcp_wire::tools::InputRequiredResult::one(
        CONFIRM_KEY,
        request,
        confirmation.id.to_string(),
    );
    serde_json::to_value(result)
        .and_then(serde_json::from_value)
        .map_err(internal)
}

/// The gate's answer as rmcp's.
fn reply(outcome: CallOutcome) -> Result<CallToolResponse, McpError> {
    let body = outcome.into_reply().map_err(gate_error)?;
    let mut result: CallToolResult = serde_json::from_value(body.into_value()).map_err(internal)?;
    // A 2026-07-28 client reads `resultType` (rmcp takes it off for an older one).
    result.result_type.get_or_insert(ResultType::COMPLETE);
    Ok(CallToolResponse::Complete(result))
}

fn gate_error(error: GateError) -> McpError {
    match error {
        GateError::UnknownTool(name) => {
            McpError::invalid_params(format!("unknown tool: {name}"), None)
        }
        GateError::InvalidParams(why) => McpError::invalid_params(why, None),
        GateError::Upstream {
            code,
            message,
            data,
        } => ErrorData::new(
            ErrorCode(i32::try_from(code).unwrap_or(-32603)),
            message,
            data,
        ),
        other => {
            let error_id = crate::error::new_error_id();
            tracing::warn!(%error_id, error = %other, "the gate could not decide a call");
            McpError::internal_error(
                format!("the gate could not decide the call (error id {error_id})"),
                None,
            )
        }
    }
}

fn internal(error: serde_json::Error) -> McpError {
    McpError::internal_error(error.to_string(), None)
}

/// Runs a call the gate let through on the wrapped handler, in the request's context.
struct Runner<'a, H> {
    inner: &'a H,
    context: RequestContext<RoleServer>,
}

impl<H: ServerHandler> OwnTool for Runner<'_, H> {
    fn run(
        &self,
        params: CallToolParams,
    ) -> Pin<Box<dyn Future<Output = Result<Box<RawValue>, ModuleError>> + Send + '_>> {
        Box::pin(async move {
            let failed = |reason: String| ModuleError::Failed {
                module: "server".into(),
                reason,
            };
            let value = serde_json::to_value(&params).map_err(|e| failed(e.to_string()))?;
            let request: CallToolRequestParams =
                serde_json::from_value(value).map_err(|e| failed(e.to_string()))?;
            // The gate's own `_meta` stays with the gate, in the context as in the request.
            let mut context = self.context.clone();
            context.meta.remove(mcp_wire::mcp::META_CONFIRMATION_ID);
            context
                .meta
                .remove(mcp_wire::denial::META_AUTHORIZATION_CONTEXT_ID);
            let answered = match self.inner.call_tool(request, context).await {
                Ok(CallToolResponse::Complete(result)) => serde_json::to_string(&result),
                // Only a result passes the gate: what the tool did is audited with it.
                Ok(_) => {
                    return Err(failed(
                        "a gated server's tool answered with a question or a task of its own, which the adapter does not pass on".into(),
                    ));
                }
                Err(e) => {
                    return Err(ModuleError::Rpc {
                        module: "server".into(),
                        code: i64::from(e.code.0),
                        message: e.message.into_owned(),
                        data: e.data.map(Box::new),
                    });
                }
            };
            let text = answered.map_err(|e| failed(e.to_string()))?;
            RawValue::from_string(text).map_err(|e| failed(e.to_string()))
        })
    }
}
