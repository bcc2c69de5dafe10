//! The gate: the tools/call pipeline in two steps and everything it needs beside a server.
//! [`Gateway::classify`] resolves the tool and asks `gating-core` whether the call is
//! forwarded, denied or held; [`Gateway::resolve`] settles a held call against the
//! confirmation it names, in the store. Beside it: the catalog passed through from the
//! modules ungated (tools, prompts, resources, completions), the per-caller [`limits`], the
//! [`metrics`] of every call, the [`Inbox`] where a module's question waits for a person,
//! and [`error::McpError`], the one error of a request with its JSON-RPC mapping.
//!
//! Fail closed: a gated call is forwarded only after its confirmation was consumed (atomically,
//! once) from the store. Store errors, missing identity, or anything unexpected answer with an
//! in-band error, never a forward. A non-gated call never waits for the store: its tool's
//! pin is read once, then again in the background at most every `pins::RECHECK`.
//!
//! No server here: no hyper, no HTTP types, no sessions. It is driven, and tested, without
//! one; `mcp-http` puts it on the wire.

pub mod error;
mod inbox;
pub mod limits;
pub mod metrics;
mod permission;
pub mod pins;

pub use inbox::Inbox;

use std::sync::Arc;
use std::time::Duration;

use elicitation_core::{Elicitation, ElicitationId, ElicitationStatus};
use elicitation_store::{
    AuditSink, CallBinding, CallCompletion, Caller, ConfirmationRequest, ElicitationStore, Fleet,
    GateRecord, Grant, GrantId, GrantStore, PolicyRef, Redeemed, RejectReason, Store, StoreError,
};
use gating_core::{
    CallDigest, CallFacts, ConfirmationMessage, ConfirmationOutcome, GateDecision, GateMode,
    GatePolicy, GrantScope, GrantTerms, HintSource, Listing, When,
};
use mcp_upstream::registry::{Registry, ToolEntry};
use mcp_upstream::{ModuleError, Relay};
use mcp_wire::jsonrpc::ErrorObject;
use mcp_wire::tools::{Arguments, ForwardParams};
use mcp_wire::{CallToolParams, ResultBody};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::McpError;
use mcp_auth::Principal;

/// How long one store operation may take before the gate gives up (and fails closed).
const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// The gateway's decision-making core, shared by both protocol eras.
pub struct Gateway {
    registry: Arc<Registry>,
    store: Arc<dyn ElicitationStore>,
    /// What the instances sharing the store tell each other.
    fleet: Arc<dyn Fleet>,
    /// The store's audit trail of the gate's decisions.
    trail: Arc<dyn AuditSink>,
    /// The store's standing grants.
    grants: Arc<dyn GrantStore>,
    policy: GatePolicy,
    /// The policy's digest, recorded with each gate decision.
    policy_digest: String,
    require_authenticated_caller: bool,
    approvers: Vec<ApproverRule>,
    metrics: Arc<crate::metrics::Metrics>,
    limits: Arc<crate::limits::Limits>,
    required: Vec<String>,
    /// Configured modules that could not be started, with why.
    unbuilt: Vec<(String, String)>,
    /// The longest standing grant a person may make (`[gate] max_grant`).
    max_grant: time::Duration,
    /// The store's tool-definition pins, as the gate checks them.
    pinning: Arc<crate::pins::Pinning>,
    /// The store's catalog (pins and changes), for the review.
    catalog: Arc<dyn elicitation_store::CatalogStore>,
    /// The permission-prompt modules, by name: their `approve` is answered here.
    permission_prompts: Vec<String>,
    /// The store's connected accounts.
    accounts: Arc<dyn elicitation_store::AccountStore>,
    /// The modules run as each caller's own account (`auth.kind = "user"`), by name: where
    /// a person connects theirs.
    connectable: Arc<std::collections::BTreeMap<String, Arc<mcp_upstream::accounts::UserOAuth>>>,
    /// The modules whose calls carry each caller's own token, exchanged (RFC 8693).
    exchanges: Arc<Vec<Arc<mcp_upstream::credentials::TokenExchange>>>,
}

/// `[gate] max_grant` unless configured.
pub const DEFAULT_MAX_GRANT: time::Duration = time::Duration::hours(8);

/// `[[approvers]]`: confirmations of the tools a pattern matches are answered by a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApproverRule {
    /// A qualified tool name, or a prefix ending in `*` (`fs__*`, or `*` for every tool).
    pub tools: String,
    /// Who answers, and whether the caller may too.
    pub approval: elicitation_store::Approval,
    /// Whose word that someone is in the group counts.
    pub groups_from: GroupsFrom,
}

/// Whose assertion of an approver rule's group counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupsFrom {
    /// The group as configured, of the caller's tenant: mode `tokens`, where groups are the
    /// tokens' own (a token's groups are its tenant's, [`mcp_auth::tenant_group`]).
    Configured,
    /// The group as the held call's caller's own issuer asserts it (mode `jwt`), for the
    /// caller's tenant: another issuer's (or tenant's) "sre" answers nothing of its callers.
    CallersIssuer,
    /// The group as the issuer of this name asserts it, for every caller of the same tenant
    /// (mode `jwt`).
    Issuer(String),
}

impl ApproverRule {
    /// Whether the rule covers `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        match self.tools.strip_suffix('*') {
            Some(prefix) => tool.starts_with(prefix),
            None => self.tools == tool,
        }
    }
}

/// What became of a `tools/call`.
#[derive(Debug, Clone)]
pub enum CallOutcome {
    /// The call is answered by the gate with an in-band result.
    Done(Value),
    /// The call was forwarded: the module's result, as it sent it.
    Forwarded(Box<RawValue>),
    /// The module answered the forwarded call with a JSON-RPC error; it reaches the client
    /// with its code and `data` (`-32042`, URL elicitation required, among them).
    Upstream(ErrorObject),
    /// The tool's module runs as each caller's own account and this caller's is not
    /// connected: the person connects it on the approvals page (the service says where, as
    /// a URL elicitation for a client that takes one), then the agent calls again.
    NeedsAccount {
        /// The module.
        module: String,
    },
    /// The call waits for a person to answer a (pending) confirmation. How to ask depends
    /// on the client: natively (MRTR or `elicitation/create` over SSE) or with the held
    /// result (`gating_core::held_result`).
    NeedsConfirmation(Box<PendingConfirmation>),
}

/// A confirmation a call waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingConfirmation {
    /// The pending confirmation.
    pub confirmation: Elicitation,
    /// Whether its message shows the arguments in full, so a person may approve it from the
    /// message alone (natively, in their client). If not, only the held result is used.
    pub askable_natively: bool,
}

impl CallOutcome {
    /// The answer for a client that cannot be asked natively, as a tree (what a legacy
    /// client would see). The service writes [`CallOutcome::into_reply`] instead.
    pub fn into_result(self) -> Result<Value, McpError> {
        Ok(self.into_reply()?.for_client(false).into_value())
    }

    /// The answer for a client that cannot be asked natively: a pending confirmation
    /// becomes the held result; a module's result passes as it came; a module's JSON-RPC
    /// error is the client's error.
    pub fn into_reply(self) -> Result<ResultBody, McpError> {
        match self {
            CallOutcome::Done(value) => Ok(ResultBody::Value(value)),
            CallOutcome::Forwarded(raw) => Ok(ResultBody::Raw(raw)),
            CallOutcome::Upstream(error) => Err(McpError::Upstream {
                code: error.code,
                message: error.message,
                data: error.data,
            }),
            CallOutcome::NeedsConfirmation(pending) => Ok(ResultBody::Value(
                gating_core::held_result(&pending.confirmation),
            )),
            CallOutcome::NeedsAccount { module } => Ok(ResultBody::Value(
                gating_core::account_required_result(&module, None, false),
            )),
        }
    }
}

/// A call the gate holds for a person's confirmation, classified once: whoever asks the
/// person (the held result, MRTR, an SSE stream) keeps it across the exchange and resolves
/// it with the confirmation's id.
#[derive(Debug, Clone)]
pub struct GatedCall {
    /// The tool.
    pub entry: Arc<ToolEntry>,
    /// The call as the client made it.
    pub params: CallToolParams,
    /// Its arguments, read (`{}` when absent).
    pub arguments: Value,
    /// What a confirmation of it must be bound to (tool and argument digest).
    pub binding: CallBinding,
    /// What the person is asked.
    pub message: ConfirmationMessage,
    /// Which rule of which policy gated it.
    pub policy: PolicyRef,
    /// How long its confirmation waits.
    pub ttl: time::Duration,
    /// Whether the rule that gated it lets a standing grant cover it (`grants = false` does
    /// not).
    pub grants: bool,
}

/// What the gate makes of a call before anything is stored or forwarded.
#[derive(Debug)]
pub enum Classified {
    /// Not gated: forwarded as it is.
    Forward(Arc<ToolEntry>, Box<CallToolParams>),
    /// Denied by policy (the rule's reason, told to the agent, and which rule).
    Deny(Arc<ToolEntry>, Option<String>, PolicyRef),
    /// Forwarded by a `shadow` rule that would have held it.
    Shadow(Arc<ToolEntry>, Box<CallToolParams>, PolicyRef),
    /// Gated: forwarded only with a person's confirmation.
    Gated(Box<GatedCall>),
    /// The caller is over its call rate: refused, to try again after the wait.
    Limited(Arc<ToolEntry>, Duration),
    /// A permission-prompt module's `approve`: the agent host asks whether it may use one
    /// of its own tools (answered by [`Gateway::run`], which waits for the answer).
    PermissionPrompt(Arc<ToolEntry>, Box<CallToolParams>),
    /// The tool's module runs as each caller's own account, and this caller has not
    /// connected one: not sent.
    NeedsAccount(Arc<ToolEntry>),
    /// The tool's definition is not its pin: withheld (the change that waits; `None` when
    /// the store could not say, which withholds it too).
    Quarantined(
        Arc<ToolEntry>,
        Option<Box<elicitation_store::DefinitionChange>>,
    ),
}

impl Classified {
    /// The tool called.
    pub fn entry(&self) -> &Arc<ToolEntry> {
        match self {
            Classified::Forward(entry, _)
            | Classified::Deny(entry, ..)
            | Classified::Shadow(entry, ..)
            | Classified::Limited(entry, _)
            | Classified::PermissionPrompt(entry, _)
            | Classified::NeedsAccount(entry)
            | Classified::Quarantined(entry, _) => entry,
            Classified::Gated(call) => &call.entry,
        }
    }
}

/// What the gate did with a call (for the audit trail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Audit {
    Held,
    Forwarded {
        gated: bool,
        shadowed: bool,
    },
    Rejected(&'static str),
    Shadowed,
    /// Forwarded under a standing grant (the store records the use, with the grant's id).
    Granted(GrantId),
}

impl Gateway {
    /// A gateway over these modules and store. With `require_authenticated_caller` (set for
    /// durable stores), gated calls from an unauthenticated principal fail closed.
    pub fn new(
        registry: Arc<Registry>,
        store: Arc<dyn Store>,
        policy: GatePolicy,
        require_authenticated_caller: bool,
    ) -> Self {
        Gateway {
            registry,
            store: store.clone(),
            fleet: store.clone(),
            trail: store.clone(),
            grants: store.clone(),
            pinning: Arc::new(crate::pins::Pinning::new(store.clone(), Default::default())),
            accounts: store.clone(),
            catalog: store,
            connectable: Arc::default(),
            exchanges: Arc::default(),
            policy_digest: policy.digest(),
            policy,
            require_authenticated_caller,
            approvers: Vec::new(),
            metrics: Arc::default(),
            limits: Arc::default(),
            required: Vec::new(),
            unbuilt: Vec::new(),
            max_grant: DEFAULT_MAX_GRANT,
            permission_prompts: Vec::new(),
        }
    }

    /// Pins each module's tool definitions as `modes` says (`first_use` for one not named).
    #[must_use]
    pub fn with_pin_modes(
        mut self,
        modes: std::collections::HashMap<String, crate::pins::PinMode>,
    ) -> Self {
        self.pinning = Arc::new(crate::pins::Pinning::new(self.catalog.clone(), modes));
        self
    }

    /// The store's pins and definition changes (the review API reads and decides them).
    pub fn catalog(&self) -> &Arc<dyn elicitation_store::CatalogStore> {
        &self.catalog
    }

    /// How the gate checks tool definitions against their pins.
    pub fn pinning(&self) -> &Arc<crate::pins::Pinning> {
        &self.pinning
    }

    /// A person's decision on a withheld definition: approving makes the proposed
    /// definition the pin; rejecting keeps it withheld until the module lists its pin
    /// again. This instance then reads the pins again and its clients are told to list
    /// again; so is every other instance sharing the store, through its broadcast (should
    /// that notice be lost, they see the decision within [`crate::pins::RECHECK`]).
    pub async fn decide_definition_change(
        &self,
        id: uuid::Uuid,
        approve: bool,
        by: &str,
    ) -> Result<elicitation_store::DefinitionChange, elicitation_store::StoreError> {
        let decided = self.catalog.decide_change(id, approve, Some(by)).await?;
        self.pins_decided();
        let told = tokio::time::timeout(
            STORE_TIMEOUT,
            self.fleet.broadcast(&crate::pins::decided_notice()),
        )
        .await;
        if !matches!(told, Ok(Ok(()))) {
            tracing::warn!(change = %id, "the other instances could not be told of a definition's decision; they see it within their next re-read of its pin");
        }
        Ok(decided)
    }

    /// A definition was decided: read the pins again, and have clients list again.
    fn pins_decided(&self) {
        self.pinning.forget_all();
        self.registry.announce_change();
    }

    /// Applies `message`, broadcast by an instance sharing the store, when it is the
    /// gate's: a definition decided on another instance is read again here. `false` when
    /// the message is not the gate's (it is the HTTP layer's to read).
    pub fn follow_fleet_notice(&self, message: &str) -> bool {
        match crate::pins::decided_elsewhere(message) {
            None => false,
            Some(elsewhere) => {
                if elsewhere {
                    tracing::info!(
                        "a definition was decided on another instance: reading the pins again"
                    );
                    self.pins_decided();
                }
                true
            }
        }
    }

    /// These modules are permission-prompt modules (`transport = "permission_prompt"`):
    /// a call of their `approve` is the agent host asking whether it may use one of its
    /// own tools, decided here ([`mcp_upstream::permission_prompt`]).
    #[must_use]
    pub fn with_permission_prompts(mut self, modules: Vec<String>) -> Self {
        self.permission_prompts = modules;
        self
    }

    /// These modules run as each caller's own connected account: a person connects theirs
    /// with its OAuth client (on the approvals page), and a caller who has not is not sent.
    #[must_use]
    pub fn with_connectable(
        mut self,
        modules: Vec<Arc<mcp_upstream::accounts::UserOAuth>>,
    ) -> Self {
        self.connectable = Arc::new(
            modules
                .into_iter()
                .map(|m| (m.module().to_owned(), m))
                .collect(),
        );
        self
    }

    /// These modules' calls carry each caller's own access token, exchanged at the identity
    /// provider for one of the module's ([`Gateway::present`] hands them the tokens).
    #[must_use]
    pub fn with_exchanges(
        mut self,
        exchanges: Vec<Arc<mcp_upstream::credentials::TokenExchange>>,
    ) -> Self {
        self.exchanges = Arc::new(exchanges);
        self
    }

    /// `principal` made a request with its own access token (mode `jwt`): the token the
    /// token-exchange modules exchange for its calls.
    pub fn present(&self, principal: &Principal) {
        if self.exchanges.is_empty() {
            return;
        }
        let Some(token) = &principal.subject_token else {
            return;
        };
        let who = instance_key(&principal.caller);
        for exchange in self.exchanges.iter() {
            exchange.present(&who, token.expose());
        }
    }

    /// The modules a person connects an account at, by name.
    pub fn connectable(
        &self,
    ) -> &std::collections::BTreeMap<String, Arc<mcp_upstream::accounts::UserOAuth>> {
        &self.connectable
    }

    /// The store's connected accounts.
    pub fn accounts(&self) -> &Arc<dyn elicitation_store::AccountStore> {
        &self.accounts
    }

    /// A person may grant later calls for at most `max` (`[gate] max_grant`).
    #[must_use]
    pub fn with_max_grant(mut self, max: time::Duration) -> Self {
        self.max_grant = max;
        self
    }

    /// The longest standing grant a person may make.
    pub fn max_grant(&self) -> time::Duration {
        self.max_grant
    }

    /// The store's standing grants (the REST API lists and revokes through them).
    pub fn grants(&self) -> &Arc<dyn GrantStore> {
        &self.grants
    }

    /// The store's audit trail (recorded by the gate; read with `audit:read`).
    pub fn trail(&self) -> &Arc<dyn AuditSink> {
        &self.trail
    }

    /// `/readyz` answers 503 while any of these modules is down.
    #[must_use]
    pub fn with_required_modules(mut self, names: Vec<String>) -> Self {
        self.required = names;
        self
    }

    /// The modules that must be up for this instance to be ready.
    pub fn required_modules(&self) -> &[String] {
        &self.required
    }

    /// The configured modules that could not be started (left out of the catalog), with
    /// why: `/readyz` names them when they are required.
    #[must_use]
    pub fn with_unbuilt_modules(mut self, unbuilt: Vec<(String, String)>) -> Self {
        self.unbuilt = unbuilt;
        self
    }

    /// Why module `name` could not be started, if it could not.
    pub fn unbuilt(&self, name: &str) -> Option<&str> {
        self.unbuilt
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, why)| why.as_str())
    }

    /// Holds each caller to these rates of calls and of confirmations.
    #[must_use]
    pub fn with_limits(mut self, limits: impl Into<Arc<crate::limits::Limits>>) -> Self {
        self.limits = limits.into();
        self
    }

    /// The per-caller limits (the REST API's elicitations count against them too).
    pub fn limits(&self) -> &Arc<crate::limits::Limits> {
        &self.limits
    }

    /// Takes one token of `caller`'s call rate for a request that is not a `tools/call` (a
    /// session change, a forwarded prompt or resource, a page sign-in): the one place such a
    /// refusal is counted. `what` says what the caller is doing too fast.
    pub fn take_call(&self, caller: &Caller, what: &'static str) -> Result<(), McpError> {
        self.limits.call(caller).map_err(|wait| {
            self.metrics.limited("calls");
            McpError::RateLimited {
                what,
                retry_after: crate::limits::retry_after_secs(wait),
            }
        })
    }

    /// Takes one REST API request of `caller` from its bucket, or says when to try again.
    pub fn take_api(&self, caller: &Caller) -> Result<(), McpError> {
        self.limits.api(caller).map_err(|wait| {
            self.metrics.limited("api");
            McpError::RateLimited {
                what: "this caller is using the REST API faster than the gateway allows",
                retry_after: crate::limits::retry_after_secs(wait),
            }
        })
    }

    /// Counts what happens to calls in `metrics` (the store should be a
    /// `elicitation_store::Metered` over the same metrics).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Where calls are counted.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// The modules' catalog.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Confirmations of the tools these rules match are answered by their groups (the
    /// first matching rule decides).
    #[must_use]
    pub fn with_approvers(mut self, rules: Vec<ApproverRule>) -> Self {
        self.approvers = rules;
        self
    }

    /// Whether the caller itself may answer confirmations of `tool` (no approver rule, or
    /// one that lets it): only then is its client asked natively.
    pub fn caller_answers(&self, tool: &str) -> bool {
        self.approvers
            .iter()
            .find(|r| r.matches(tool))
            .is_none_or(|r| r.approval.caller_may_answer())
    }

    /// Who answers `caller`'s confirmations of `tool` besides, or instead of, the caller:
    /// the group as the rule's issuer (in mode `jwt`) and the caller's tenant qualify it.
    pub fn approval_for(&self, tool: &str, caller: &Caller) -> Option<elicitation_store::Approval> {
        let rule = self.approvers.iter().find(|r| r.matches(tool))?;
        let mut approval = rule.approval.clone();
        let issuer = match &rule.groups_from {
            GroupsFrom::Configured => None,
            GroupsFrom::CallersIssuer => {
                Some(mcp_auth::jwt::issuer_of(caller.subject_id()).unwrap_or_default())
            }
            GroupsFrom::Issuer(name) => Some(name.as_str()),
        };
        approval.group = match issuer {
            Some(issuer) => {
                mcp_auth::jwt::qualified_group(&approval.group, issuer, caller.tenant_id())
            }
            // The caller's tenant's group: a token of another tenant in a group of the same
            // name answers nothing of this caller's.
            None => mcp_auth::tenant_group(&approval.group, caller.tenant_id()),
        };
        Some(approval)
    }

    /// Its elicitations kept by `elicitations` instead (a test double that fakes only them);
    /// the fleet and the audit trail stay the store's.
    #[must_use]
    pub fn with_elicitations(mut self, elicitations: Arc<dyn ElicitationStore>) -> Self {
        self.store = elicitations;
        self
    }

    /// The store's elicitations (the REST API answers through them).
    pub fn store(&self) -> &Arc<dyn ElicitationStore> {
        &self.store
    }

    /// What the instances sharing the store tell each other (ended sessions, notices).
    pub fn fleet(&self) -> &Arc<dyn Fleet> {
        &self.fleet
    }

    /// The policy rules whose tool (a name or a prefix) names no tool any module lists now
    /// — a typo, or a module not up yet. Such a rule protects nothing.
    pub fn unmatched_policy_rules(&self) -> Vec<(String, GateMode)> {
        self.policy
            .rules()
            .iter()
            .filter(|rule| !self.registry.lists_any(|name| rule.tool.matches(name)))
            // A rule on an agent host's own tool (`claude__Bash`) names what a
            // permission-prompt module asks about, never lists.
            .filter(|rule| {
                let text = rule.tool.text();
                self.permission_prompts.is_empty()
                    || !self.registry.lists_any(|name| {
                        name.strip_suffix(mcp_upstream::permission_prompt::APPROVE)
                            .is_some_and(|prefix| !prefix.is_empty() && text.starts_with(prefix))
                    })
            })
            .map(|rule| (rule.tool.text(), rule.mode))
            .collect()
    }

    /// Warns about [`Gateway::unmatched_policy_rules`] now and after every refresh of a
    /// module's tools, until the registry is dropped.
    pub fn watch_policy_rules(self: &Arc<Self>) {
        let mut refreshed = self.registry.refreshed();
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(live) = gateway.upgrade() else {
                    return;
                };
                for (tool, mode) in live.unmatched_policy_rules() {
                    tracing::warn!(%tool, ?mode, "a [[policy]] rule names a tool that no module lists; it protects nothing until one does (check the name: a rule names a qualified tool name, or a prefix ending in `*`)");
                }
                drop(live);
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) =
                    refreshed.recv().await
                {
                    return;
                }
            }
        });
    }

    /// Checks every listed tool's definition against its pin — now (awaited: the catalog
    /// as read at start-up is verified before the gateway serves) and after every refresh
    /// of a module's tools (on `list_changed`, after a restart), until the registry is
    /// dropped. A change is recorded for review as soon as a module lists it, and a tool
    /// verified here keeps working if the store goes away later.
    pub async fn watch_pins(self: &Arc<Self>) {
        let mut refreshed = self.registry.refreshed();
        self.verify_pins().await;
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) =
                    refreshed.recv().await
                {
                    return;
                }
                let Some(live) = gateway.upgrade() else {
                    return;
                };
                live.verify_pins().await;
            }
        });
    }

    /// Checks every listed tool's definition against its pin once.
    async fn verify_pins(&self) {
        for entry in self.registry.tools().await {
            if let Err(e) = self.pinning.verdict(&entry).await {
                tracing::warn!(tool = %entry.qualified, error = %e, "could not check a tool's definition against its pin; it is withheld until it can be");
            }
        }
        for entry in self.registry.prompt_entries_listed() {
            if let Err(e) = self.pinning.verdict(&entry).await {
                tracing::warn!(prompt = %entry.qualified, error = %e, "could not check a prompt's definition against its pin; it is withheld until it can be");
            }
        }
    }

    /// The tools clients see: every module's tools but those policy denies. A gated tool is
    /// listed without its `outputSchema`: the gateway may answer for it with the held result,
    /// whose `structuredContent` cannot match the module's schema, and clients validate
    /// non-error results against it (the Python SDK refuses the result otherwise).
    pub async fn list_tools(&self) -> Vec<Value> {
        let mut listed = Vec::new();
        for entry in self.registry.tools().await {
            // A definition that is not its pin is withheld (and so is one the store cannot
            // vouch for now).
            match self.pinning.verdict(&entry).await {
                Ok(crate::pins::Verdict::Listed) => {}
                Ok(crate::pins::Verdict::Held(_)) => continue,
                Err(e) => {
                    tracing::warn!(tool = %entry.qualified, error = %e, "could not check a tool's definition against its pin; not listing it");
                    continue;
                }
            }
            match self.policy.listing(&entry.qualified, hints(&entry)) {
                Listing::Hidden => {}
                Listing::Plain => listed.push(entry.tool.clone()),
                Listing::Gated => {
                    let mut tool = entry.tool.clone();
                    if let Some(map) = tool.as_object_mut() {
                        map.remove("outputSchema");
                    }
                    listed.push(tool);
                }
            }
        }
        listed
    }

    /// Every module's prompts, named `{prefix}__{name}` like tools, but those whose
    /// definition is not their pin (withheld like a changed tool).
    pub async fn list_prompts(&self) -> Vec<Value> {
        let mut listed = Vec::new();
        for entry in self.registry.prompt_entries_listed() {
            match self.pinning.verdict(&entry).await {
                Ok(crate::pins::Verdict::Listed) => listed.push(entry.prompt.clone()),
                Ok(crate::pins::Verdict::Held(_)) => {}
                Err(e) => {
                    tracing::warn!(prompt = %entry.qualified, error = %e, "could not check a prompt's definition against its pin; not listing it");
                }
            }
        }
        listed
    }

    /// `prompts/get`, routed to the module that listed the prompt. Prompts are not gated:
    /// they run no tool.
    pub async fn get_prompt(
        &self,
        caller: &Caller,
        params: CallToolParams,
    ) -> Result<ResultBody, McpError> {
        let name = params.name.clone();
        // A prompt whose definition is not its pin is not served (its text reaches the model).
        if let Some(entry) = self.registry.find_prompt(&name) {
            match self.pinning.verdict(&entry).await {
                Ok(crate::pins::Verdict::Listed) => {}
                Ok(crate::pins::Verdict::Held(change)) => {
                    return Err(McpError::InvalidParams(format!(
                        "prompt {} is withheld: its definition changed since it was trusted; it waits for an operator's review as change {}",
                        gating_core::visible(&name),
                        change.id
                    )));
                }
                Err(e) => {
                    tracing::error!(prompt = %entry.qualified, error = %e, "could not check a prompt's definition against its pin; not serving it");
                    return Err(McpError::Store(e));
                }
            }
        }
        let who = instance_key(caller);
        let answered = self.registry.get_prompt(params, Some(&who)).await;
        passed_on(&format!("prompt {name}"), answered)
    }

    /// Fires after a module's tools, prompts or resources were listed anew.
    pub fn catalog_changes(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.registry.refreshed()
    }

    /// The URIs modules say were updated.
    pub fn resource_updates(
        &self,
    ) -> tokio::sync::broadcast::Receiver<mcp_upstream::registry::ResourceUpdate> {
        self.registry.resource_updates()
    }

    /// `resources/subscribe` (`subscribe` false: `unsubscribe`) for `uri`, to its module
    /// (the caller's own instance of an isolated module).
    pub async fn subscribe_resource(
        &self,
        caller: &Caller,
        uri: &str,
        subscribe: bool,
    ) -> Result<(), McpError> {
        let who = instance_key(caller);
        match self
            .registry
            .subscribe_resource(uri, subscribe, Some(&who))
            .await
        {
            None => Err(McpError::InvalidParams(format!("unknown resource {uri}"))),
            Some(Ok(())) => Ok(()),
            Some(Err(err)) => Err(module_failure(&format!("resource {uri}"), err)),
        }
    }

    /// The inbox where a module's questions to `principal` wait for a person
    /// when its client cannot answer them; none where confirmations need an authenticated caller
    /// and this one is not.
    pub fn inbox(&self, principal: &Principal) -> Option<Inbox> {
        if self.require_authenticated_caller && !principal.authenticated {
            return None;
        }
        Some(Inbox {
            store: self.store.clone(),
            caller: principal.caller.clone(),
        })
    }

    /// `logging/setLevel` from a client, for the modules (see `Registry::set_log_level`).
    pub async fn set_log_level(&self, level: &str) {
        self.registry.set_log_level(level).await;
    }

    /// Every module's resources (URIs are the modules' own; one URI belongs to one module).
    pub fn list_resources(&self) -> Vec<Value> {
        self.registry.resources()
    }

    /// Every module's resource templates.
    pub fn list_resource_templates(&self) -> Vec<Value> {
        self.registry.resource_templates()
    }

    /// `completion/complete`, routed by its reference (see `Registry::complete`).
    pub async fn complete(
        &self,
        caller: &Caller,
        params: ForwardParams,
    ) -> Result<ResultBody, McpError> {
        let who = instance_key(caller);
        let answered = self.registry.complete(params, Some(&who)).await;
        passed_on("completion reference", answered)
    }

    /// `resources/read`, routed to the module the URI belongs to (see `Registry`).
    pub async fn read_resource(
        &self,
        caller: &Caller,
        params: ForwardParams,
    ) -> Result<ResultBody, McpError> {
        let Some(uri) = params.str("uri").map(str::to_owned) else {
            return Err(McpError::InvalidParams(
                "resources/read needs a string `uri`".into(),
            ));
        };
        let who = instance_key(caller);
        let answered = self.registry.read_resource(params, Some(&who)).await;
        passed_on(&format!("resource {uri}"), answered)
    }

    /// The tool a call names (`-32602` for one the gateway does not list).
    pub async fn tool(&self, name: &str) -> Result<Arc<ToolEntry>, McpError> {
        self.registry
            .find(name)
            .await
            .ok_or_else(|| McpError::UnknownTool(name.to_owned()))
    }

    /// Step one of the gate: which tool, and does the policy forward, deny or gate it. A
    /// gated call's binding (the digest of its arguments) and message are made here, once.
    pub async fn classify(
        &self,
        principal: &Principal,
        params: CallToolParams,
    ) -> Result<Classified, McpError> {
        let entry = self.tool(&params.name).await?;
        mcp_trace::record("mcp.tool", &entry.qualified);
        mcp_trace::record("mcp.module", &entry.module_name);
        // Every call is classified once: the caller's call rate is counted here.
        if let Err(wait) = self.limits.call(&principal.caller) {
            return Ok(Classified::Limited(entry, wait));
        }
        match self.pinning.verdict(&entry).await {
            Ok(crate::pins::Verdict::Listed) => {}
            Ok(crate::pins::Verdict::Held(change)) => {
                return Ok(Classified::Quarantined(entry, Some(change)));
            }
            Err(e) => {
                tracing::error!(tool = %entry.qualified, error = %e, "could not check a tool's definition against its pin; the call is not forwarded");
                return Ok(Classified::Quarantined(entry, None));
            }
        }
        // A module run as its callers: a caller without an account there is not sent (not
        // even held: a person would approve a call that cannot run). The store failing
        // sends nothing either.
        if self.registry.needs_account(&entry)
            && self
                .accounts
                .account(&principal.caller, &entry.module_name)
                .await?
                .is_none()
        {
            return Ok(Classified::NeedsAccount(entry));
        }
        if entry.original == mcp_upstream::permission_prompt::APPROVE
            && self.permission_prompts.contains(&entry.module_name)
        {
            return Ok(Classified::PermissionPrompt(entry, Box::new(params)));
        }
        let unreadable = |e: serde_json::Error| {
            McpError::InvalidParams(format!("`arguments` cannot be read: {e}"))
        };
        // A tool that mirrors arguments into headers has them read for its module; one that
        // cannot be read is refused here rather than sent without its headers.
        if !entry.mirrored.is_empty()
            && let Some(arguments) = &params.arguments
        {
            arguments.to_map().map_err(unreadable)?;
        }
        // Read once, and only where a rule's `when` reads the call: absent arguments are
        // `{}` to the rules, the digest and the message.
        let read = |params: &CallToolParams| match &params.arguments {
            None => Ok(Value::Object(Map::new())),
            Some(arguments) => arguments.to_value().map_err(unreadable),
        };
        // The arguments and groups are read only where a rule's `when` reads them (not on
        // the path of a tool no such rule names).
        let reads = self.policy.reads_calls(&entry.qualified);
        let arguments = if reads { Some(read(&params)?) } else { None };
        // What was decided on is what the module gets: arguments that were read (by a rule,
        // or below to be shown and digested) go upstream written from the tree that was
        // read, never as the client's text, which a module's JSON parser could read
        // differently (a duplicate key is the last one here, maybe the first one there).
        let mut params = params;
        let upstream_as_read = |params: &mut CallToolParams, arguments: &Value| {
            if let (Some(given), Value::Object(map)) = (&mut params.arguments, arguments) {
                *given = Arguments::from_map(map);
            }
        };
        if let Some(arguments) = &arguments {
            upstream_as_read(&mut params, arguments);
        }
        let groups: Vec<String> = if reads {
            principal.rule_groups()
        } else {
            Vec::new()
        };
        let decided = self.decide(
            &entry,
            arguments.as_ref().unwrap_or(&Value::Null),
            principal.caller.subject_id(),
            &groups,
        );
        for (rule, why) in &decided.failures {
            tracing::warn!(tool = %entry.qualified, rule, why = %why, "a [[policy]] rule's `when` could not be evaluated for a call; the rule was taken the way that keeps the gate shut");
        }
        let policy = || PolicyRef {
            rule: decided.rule,
            policy: Some(self.policy_digest.clone()),
        };
        Ok(match decided.decision {
            GateDecision::Forward => Classified::Forward(entry, Box::new(params)),
            GateDecision::Shadow => Classified::Shadow(entry, Box::new(params), policy()),
            GateDecision::Deny => Classified::Deny(entry, decided.reason.clone(), policy()),
            GateDecision::Confirm(reason) => {
                let arguments = match arguments {
                    Some(arguments) => arguments,
                    None => {
                        let arguments = read(&params)?;
                        upstream_as_read(&mut params, &arguments);
                        arguments
                    }
                };
                let binding = CallBinding {
                    tool: entry.qualified.clone(),
                    digest: CallDigest::of(&arguments),
                    definition: entry.digest,
                };
                let message =
                    gating_core::confirmation_message(&entry.qualified, reason, &arguments);
                Classified::Gated(Box::new(GatedCall {
                    entry,
                    params,
                    arguments,
                    binding,
                    message,
                    policy: policy(),
                    ttl: decided.ttl,
                    grants: decided.grants,
                }))
            }
        })
    }

    /// Runs `tools/call` with these params for `principal`. `_meta.confirmation_id` names a
    /// confirmation the caller believes approves this call.
    pub async fn call_tool(
        &self,
        principal: &Principal,
        params: CallToolParams,
    ) -> Result<CallOutcome, McpError> {
        let classified = self.classify(principal, params).await?;
        Ok(self.run(principal, classified, None).await)
    }

    /// Forwards, denies, or resolves a classified call (a gated one with the
    /// `_meta.confirmation_id` it carries). The module's messages about the call go to
    /// `relay`.
    pub async fn run(
        &self,
        principal: &Principal,
        classified: Classified,
        relay: Option<Arc<dyn Relay>>,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let mut upstream = Duration::ZERO;
        let outcome = match classified {
            Classified::Limited(entry, wait) => {
                return self.limited(principal, &entry, "calls", wait);
            }
            Classified::NeedsAccount(entry) => {
                mcp_trace::record("mcp.outcome", "account_required");
                let rejected = GateRecord::Rejected(RejectReason::AccountNotConnected);
                self.record(principal, &entry, rejected, None, &PolicyRef::default())
                    .await;
                CallOutcome::NeedsAccount {
                    module: entry.module_name.clone(),
                }
            }
            Classified::Quarantined(entry, change) => {
                mcp_trace::record("mcp.outcome", "quarantined");
                let rejected = GateRecord::Rejected(RejectReason::ToolQuarantined);
                self.record(principal, &entry, rejected, None, &PolicyRef::default())
                    .await;
                CallOutcome::Done(match change {
                    Some(change) => gating_core::quarantined_result(
                        &entry.qualified,
                        &change.id.to_string(),
                        &change.reasons,
                    ),
                    None => gating_core::gate_unavailable_result(
                        "the gateway could not check this tool's definition against its pin; nothing was run",
                    ),
                })
            }
            Classified::Forward(entry, params) => {
                let forwarded = Audit::Forwarded {
                    gated: false,
                    shadowed: false,
                };
                self.forward(
                    principal,
                    &entry,
                    *params,
                    (forwarded, None),
                    relay,
                    &mut upstream,
                )
                .await
            }
            Classified::Shadow(entry, params, policy) => {
                self.record(principal, &entry, GateRecord::Shadowed, None, &policy)
                    .await;
                let forwarded = Audit::Forwarded {
                    gated: false,
                    shadowed: true,
                };
                self.forward(
                    principal,
                    &entry,
                    *params,
                    (forwarded, None),
                    relay,
                    &mut upstream,
                )
                .await
            }
            Classified::Deny(entry, reason, policy) => {
                mcp_trace::record("mcp.outcome", "denied");
                let rejected = GateRecord::Rejected(RejectReason::PolicyDenied);
                self.record(principal, &entry, rejected, None, &policy)
                    .await;
                CallOutcome::Done(gating_core::denied_result(
                    &entry.qualified,
                    reason.as_deref(),
                ))
            }
            Classified::Gated(call) => {
                let confirmation = call
                    .params
                    .confirmation_id()
                    .and_then(|id| id.parse::<ElicitationId>().ok());
                self.resolve_timed(principal, &call, confirmation, relay, &mut upstream)
                    .await
            }
            // Boxed: its wait holds a resolve of its own, which would double the size of
            // every call's future.
            Classified::PermissionPrompt(entry, params) => {
                Box::pin(self.permission_prompt(principal, &entry, *params, relay, &mut upstream))
                    .await
            }
        };
        self.metrics.gateway_time(started.elapsed(), upstream);
        outcome
    }

    /// Step two of the gate: what becomes of a gated call given the confirmation the caller
    /// names (if any) — forwarded once it is consumed, refused, or held (a new confirmation,
    /// or the same one still pending). The named confirmation is redeemed in one store
    /// operation; on refusal the store returns it as it is and `gating_core::evaluate`
    /// decides the answer. A forwarded call's messages go to `relay`.
    pub async fn resolve(
        &self,
        principal: &Principal,
        call: &GatedCall,
        confirmation_id: Option<ElicitationId>,
        relay: Option<Arc<dyn Relay>>,
    ) -> CallOutcome {
        let started = std::time::Instant::now();
        let mut upstream = Duration::ZERO;
        let outcome = self
            .resolve_timed(principal, call, confirmation_id, relay, &mut upstream)
            .await;
        self.metrics.gateway_time(started.elapsed(), upstream);
        outcome
    }

    /// [`Gateway::resolve`], adding the module's time on a forwarded call to `upstream`.
    async fn resolve_timed(
        &self,
        principal: &Principal,
        call: &GatedCall,
        confirmation_id: Option<ElicitationId>,
        relay: Option<Arc<dyn Relay>>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        let entry = &*call.entry;
        let binding = &call.binding;
        let done = CallOutcome::Done;
        if self.require_authenticated_caller && !principal.authenticated {
            self.refused(principal, call, RejectReason::NoAuthenticatedCaller, None)
                .await;
            return done(gating_core::gate_unavailable_result(
                "confirmations in this gateway's store need an authenticated caller (configure auth mode \"tokens\")",
            ));
        }
        let caller = &principal.caller;
        let pending = |confirmation: Elicitation| {
            mcp_trace::record("mcp.outcome", "held");
            tracing::info!(target: "mcp_trace", confirmation = %confirmation.id, "held");
            mcp_trace::hold(&confirmation.id.to_string());
            CallOutcome::NeedsConfirmation(Box::new(PendingConfirmation {
                confirmation,
                askable_natively: call.message.shows_all_arguments,
            }))
        };
        // A call repeated with identical arguments and no id takes up the caller's
        // confirmation of exactly this call (approved and unused first, else declined and not
        // yet told, else pending): a model that cannot set `_meta` finishes the loop by
        // calling again — and hears a refusal the same way, once — and a repeated question is
        // not asked twice. The redemption below is what grants, as with an id.
        let taken_up = confirmation_id.is_none();
        let confirmation_id = match confirmation_id {
            Some(id) => Some(id),
            None => match timed(self.store.confirmation_for(caller, binding)).await {
                Ok(found) => found,
                Err(e) => return done(self.fail_closed(principal, entry, &e)),
            },
        };
        if let Some(id) = confirmation_id {
            match timed(self.store.redeem_confirmation(caller, id, binding)).await {
                // Approved, and consumed now: forwarded, once.
                Ok(Redeemed::Consumed(consumed)) => {
                    tracing::info!(target: "mcp_trace", confirmation = %id, "redeemed");
                    mcp_trace::link_hold(&id.to_string());
                    let forwarded = Audit::Forwarded {
                        gated: true,
                        shadowed: false,
                    };
                    let Some(edited) = consumed.edited_arguments else {
                        return self
                            .forward(
                                principal,
                                entry,
                                call.params.clone(),
                                (forwarded, Some(id)),
                                relay,
                                upstream,
                            )
                            .await;
                    };
                    // The person approved other arguments: those run, if the policy in
                    // force does not deny them, and the agent is told.
                    let params = match self.edited_params(principal, call, &edited) {
                        Ok(params) => params,
                        Err(refusal) => {
                            let rejected = GateRecord::Rejected(RejectReason::PolicyDenied);
                            self.record(principal, entry, rejected, Some(id), &call.policy)
                                .await;
                            return done(refusal);
                        }
                    };
                    let outcome = self
                        .forward(
                            principal,
                            entry,
                            params,
                            (forwarded, Some(id)),
                            relay,
                            upstream,
                        )
                        .await;
                    return told_of_edit(outcome, &edited);
                }
                Ok(Redeemed::Refused { current, .. }) => {
                    // The seed's truth table decides an answered confirmation; the statuses
                    // that are not answers (pending, cancelled, expired, failed) are handled
                    // around it.
                    let outcome = match current.status {
                        // Not answered yet: the same confirmation again, no new elicitation.
                        ElicitationStatus::Pending => {
                            // A grant made since covers the call: no need to wait.
                            if let Some(granted) =
                                self.granted(principal, call, relay, upstream).await
                            {
                                return granted;
                            }
                            let held = GateRecord::Held;
                            self.record(principal, entry, held, Some(id), &call.policy)
                                .await;
                            return pending(current);
                        }
                        ElicitationStatus::Cancelled => {
                            let reason = RejectReason::ConfirmationCancelled;
                            self.refused(principal, call, reason, Some(id)).await;
                            return done(gating_core::cancelled_result(id));
                        }
                        ElicitationStatus::Expired => {
                            let reason = RejectReason::ConfirmationExpired;
                            self.refused(principal, call, reason, Some(id)).await;
                            return done(gating_core::expired_result(id));
                        }
                        ElicitationStatus::Responded => {
                            gating_core::evaluate(true, current.confirmation_state())
                        }
                        // Failed validation: ask anew.
                        ElicitationStatus::ValidationFailed => {
                            ConfirmationOutcome::NeedsConfirmation
                        }
                    };
                    if outcome == ConfirmationOutcome::Declined {
                        // Told once to a call that took it up without the id (then an
                        // identical call is asked about anew); a call naming it hears it
                        // every time.
                        let first = match timed(self.store.report_decline(caller, id, binding))
                            .await
                        {
                            Ok(first) => first,
                            Err(e) => {
                                tracing::warn!(confirmation = %id, error = %e, "could not record that a decline was told; an identical call may hear it again");
                                true
                            }
                        };
                        if first || !taken_up {
                            let reason = RejectReason::UserRejected;
                            self.refused(principal, call, reason, Some(id)).await;
                            return done(gating_core::user_rejected_result(
                                current.note.as_deref(),
                            ));
                        }
                        // Told already (to a call at the same moment): asked anew below.
                    }
                    // Approved but used already (or expired after the answer), or failed:
                    // ask anew below.
                }
                // Not this caller's confirmation of this call: ask anew below.
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return done(self.fail_closed(principal, entry, &e)),
            }
        }
        // Not answered for this call, or answered but of no use any more: a standing grant
        // covers it, or a person is asked anew.
        if let Some(granted) = self.granted(principal, call, relay, upstream).await {
            return granted;
        }
        self.hold_anew(principal, call).await
    }

    /// `call`'s params with the arguments a person approved instead of the agent's, unless
    /// the policy in force denies the call with them (then the refusal).
    fn edited_params(
        &self,
        principal: &Principal,
        call: &GatedCall,
        edited: &Value,
    ) -> Result<CallToolParams, Value> {
        let entry = &call.entry;
        let Value::Object(map) = edited else {
            return Err(gating_core::gate_unavailable_result(
                "the arguments the person approved are not an object; nothing was run",
            ));
        };
        let groups: Vec<String> = principal.rule_groups();
        let decided = self.decide(entry, edited, principal.caller.subject_id(), &groups);
        if decided.decision == GateDecision::Deny {
            return Err(gating_core::denied_result(
                &entry.qualified,
                decided.reason.as_deref(),
            ));
        }
        let mut params = call.params.clone();
        params.arguments = Some(Arguments::from_map(map));
        Ok(params)
    }

    /// Forwards `call` under one of its caller's live grants that covers it, used now (one
    /// use, in one store step); `None` when none does. A store failure fails closed.
    async fn granted(
        &self,
        principal: &Principal,
        call: &GatedCall,
        relay: Option<Arc<dyn Relay>>,
        upstream: &mut Duration,
    ) -> Option<CallOutcome> {
        if !call.grants {
            return None;
        }
        let entry = &*call.entry;
        let caller = &principal.caller;
        let live = match timed(self.grants.live_grants(caller, &entry.qualified)).await {
            Ok(live) => live,
            Err(e) => return Some(CallOutcome::Done(self.fail_closed(principal, entry, &e))),
        };
        if live.is_empty() {
            return None;
        }
        let definition = definition_digest(entry);
        let approval = self.approval_for(&entry.qualified, caller);
        for grant in live {
            if !self.covers(&grant, principal, call, &definition, approval.as_ref()) {
                continue;
            }
            match timed(self.grants.use_grant(caller, grant.id, &entry.qualified)).await {
                Ok(Some(used)) => {
                    let event = (Audit::Granted(used.id), None);
                    let params = call.params.clone();
                    return Some(
                        self.forward(principal, entry, params, event, relay, upstream)
                            .await,
                    );
                }
                // Used up or revoked since it was read: the next one, if any.
                Ok(None) => {}
                Err(e) => return Some(CallOutcome::Done(self.fail_closed(principal, entry, &e))),
            }
        }
        None
    }

    /// Whether `grant` covers `call` now: made against the tool's definition as it is listed
    /// now and under the approver rule that answers the call now, and for this call (scope
    /// `call`: the same argument digest; scope `tool`: its `when`, if any, holds). A `when`
    /// that cannot be compiled or evaluated covers nothing.
    fn covers(
        &self,
        grant: &Grant,
        principal: &Principal,
        call: &GatedCall,
        definition: &str,
        approval: Option<&elicitation_store::Approval>,
    ) -> bool {
        if grant.definition != definition || grant.approval.as_ref() != approval {
            return false;
        }
        match grant.scope {
            GrantScope::Call => grant.digest.as_ref() == Some(&call.binding.digest),
            GrantScope::Tool => {
                let Some(source) = &grant.when else {
                    return true;
                };
                let groups: Vec<String> = principal.rule_groups();
                let facts = call_facts(
                    &call.entry,
                    &call.arguments,
                    principal.caller.subject_id(),
                    &groups,
                );
                match When::compile(source).map(|when| when.matches(&facts)) {
                    Ok(Ok(true)) => true,
                    Ok(Ok(false)) => false,
                    Ok(Err(why)) => {
                        tracing::debug!(grant_id = %grant.id, why = %why, "a grant's `when` could not be evaluated for a call; it does not cover it");
                        false
                    }
                    Err(why) => {
                        tracing::warn!(grant_id = %grant.id, why = %why, "a grant's `when` does not compile; it covers nothing");
                        false
                    }
                }
            }
        }
    }

    /// Holds `call` on a new confirmation (its approver rule told in its message), or says
    /// why it cannot be held: the caller's confirmation rate, the store's limits, the store
    /// failing (fail closed).
    async fn hold_anew(&self, principal: &Principal, call: &GatedCall) -> CallOutcome {
        let entry = &*call.entry;
        let binding = &call.binding;
        let caller = &principal.caller;
        let done = CallOutcome::Done;
        let pending = |confirmation: Elicitation| {
            mcp_trace::record("mcp.outcome", "held");
            tracing::info!(target: "mcp_trace", confirmation = %confirmation.id, "held");
            mcp_trace::hold(&confirmation.id.to_string());
            CallOutcome::NeedsConfirmation(Box::new(PendingConfirmation {
                confirmation,
                askable_natively: call.message.shows_all_arguments,
            }))
        };
        let approval = self.approval_for(&entry.qualified, caller);
        // Whoever reads the confirmation (the agent's held result, the page, the REST API)
        // learns who must answer it.
        let message = match &approval {
            Some(a) if !a.caller_may_answer() => format!(
                "{} A member of the approver group \"{}\" must confirm it{}.",
                call.message.text,
                a.group,
                if a.mode == elicitation_store::ApprovalMode::FourEyes {
                    ", not the person the agent acts for"
                } else {
                    ""
                }
            ),
            _ => call.message.text.clone(),
        };
        if let Err(wait) = self.limits.elicitation(caller) {
            return self.limited(principal, entry, "confirmations", wait);
        }
        let request = ConfirmationRequest {
            binding: binding.clone(),
            arguments: call.arguments.clone(),
            message,
            ttl: call.ttl,
            approval,
            policy: call.policy.clone(),
            client: principal.client.clone(),
        };
        match timed(self.store.create_confirmation(caller, request)).await {
            Ok(stored) => {
                self.audit(principal, entry, Audit::Held, Some(stored.elicitation.id));
                pending(stored.elicitation)
            }
            Err(StoreError::PendingLimit { limit }) => {
                self.refused(principal, call, RejectReason::PendingLimit, None)
                    .await;
                done(gating_core::gate_unavailable_result(&format!(
                    "this caller already has {limit} confirmations waiting; answer or cancel some first"
                )))
            }
            Err(StoreError::CallerFull { .. }) => {
                self.refused(principal, call, RejectReason::CallerFull, None)
                    .await;
                done(gating_core::gate_unavailable_result(
                    "this caller holds as many confirmations as the gateway keeps for one caller; answer or cancel some first",
                ))
            }
            Err(e) => done(self.fail_closed(principal, entry, &e)),
        }
    }

    /// A call refused by a rate limit: logged and counted, never written to the store (a
    /// caller over its rate must not be able to fill the audit trail).
    fn limited(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        limit: &'static str,
        wait: Duration,
    ) -> CallOutcome {
        mcp_trace::record("mcp.outcome", "limited");
        self.metrics.limited(limit);
        self.audit(
            principal,
            entry,
            Audit::Rejected(RejectReason::RateLimited.label()),
            None,
        );
        let what = match limit {
            "calls" => "this caller is making tool calls faster than the gateway allows",
            _ => "this caller is asking for confirmations faster than the gateway allows",
        };
        let has_output_schema = entry.tool.get("outputSchema").is_some();
        CallOutcome::Done(gating_core::rate_limited_result(
            what,
            crate::limits::retry_after_secs(wait),
            has_output_schema,
        ))
    }

    /// A gated call refused.
    async fn refused(
        &self,
        principal: &Principal,
        call: &GatedCall,
        reason: RejectReason,
        id: Option<ElicitationId>,
    ) {
        mcp_trace::record("mcp.outcome", "rejected");
        tracing::info!(target: "mcp_trace", reason = reason.label(), "rejected");
        let rejected = GateRecord::Rejected(reason);
        self.record(principal, &call.entry, rejected, id, &call.policy)
            .await;
    }

    /// What the gate did, logged and recorded in the store's audit trail (a failure to
    /// record is logged; the answer is the same either way).
    async fn record(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        record: GateRecord,
        id: Option<ElicitationId>,
        policy: &PolicyRef,
    ) {
        let event = match record {
            GateRecord::Held => Audit::Held,
            GateRecord::Rejected(reason) => Audit::Rejected(reason.label()),
            GateRecord::Shadowed => Audit::Shadowed,
            // Recorded where the call came back (`forward`).
            GateRecord::Completed(..) => return,
        };
        self.audit(principal, entry, event, id);
        if let Err(e) =
            timed(
                self.trail
                    .record_gate(&principal.caller, id, &entry.qualified, record, policy),
            )
            .await
        {
            tracing::warn!(error = %e, "could not record the gate's decision in the store's audit trail");
        }
    }

    /// Fails closed on a store failure. The refusal is recorded in the background: the store
    /// that just failed must not hold up the answer.
    fn fail_closed(&self, principal: &Principal, entry: &ToolEntry, error: &StoreError) -> Value {
        let error_id = crate::error::new_error_id();
        tracing::error!(tool = %entry.qualified, %error_id, error = %error, source = ?std::error::Error::source(error), "confirmation store failed; the call is not forwarded");
        self.audit(
            principal,
            entry,
            Audit::Rejected(RejectReason::StoreError.label()),
            None,
        );
        let trail = self.trail.clone();
        let caller = principal.caller.clone();
        let tool = entry.qualified.clone();
        tokio::spawn(async move {
            let record = GateRecord::Rejected(RejectReason::StoreError);
            let policy = PolicyRef::default();
            if let Err(e) = timed(trail.record_gate(&caller, None, &tool, record, &policy)).await {
                tracing::debug!(error = %e, "could not record a store failure in the store");
            }
        });
        gating_core::gate_unavailable_result(&format!(
            "the confirmation store is unavailable (error id {error_id})"
        ))
    }

    /// Forwards the call to its module: the params go through untouched but for the tool's
    /// own name, the gateway's `confirmation_id`, the client's multi round-trip fields and
    /// the downstream hop's protocol `_meta`.
    async fn forward(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        params: CallToolParams,
        (event, confirmation): (Audit, Option<ElicitationId>),
        relay: Option<Arc<dyn Relay>>,
        upstream: &mut Duration,
    ) -> CallOutcome {
        self.audit(principal, entry, event, confirmation);
        let started = std::time::Instant::now();
        let who = instance_key(&principal.caller);
        let call = tracing::Instrument::instrument(
            self.registry.call(
                entry,
                params.into_upstream(&entry.original),
                relay,
                Some(&who),
            ),
            mcp_trace::module_span(&entry.module_name),
        );
        // A module that exchanges the caller's own token exchanges exactly this request's.
        let answered = match &principal.subject_token {
            Some(token) if !self.exchanges.is_empty() => {
                let token: Arc<str> = Arc::from(token.expose());
                mcp_upstream::credentials::SUBJECT_TOKEN
                    .scope(token, call)
                    .await
            }
            _ => call.await,
        };
        let took = started.elapsed();
        *upstream += took;
        self.metrics.module_time(&entry.module_name, took);
        // Passed on unparsed, so read at its top level first.
        let answered = answered.and_then(|result| {
            mcp_wire::result::usable(&result)
                .map(|()| result)
                .map_err(|reason| ModuleError::Protocol {
                    module: entry.module_name.clone(),
                    reason,
                })
        });
        let (outcome, reason) = match &answered {
            Ok(_) if confirmation.is_some() => ("forwarded", "confirmed"),
            Ok(_) if matches!(event, Audit::Granted(_)) => ("forwarded", "granted"),
            Ok(_) if matches!(event, Audit::Forwarded { shadowed: true, .. }) => ("shadowed", ""),
            Ok(_) => ("forwarded", ""),
            Err(ModuleError::Rpc { .. }) => ("module_error", "rpc_error"),
            Err(ModuleError::Timeout { .. }) => ("module_error", "timeout"),
            Err(ModuleError::Busy { .. }) => {
                self.metrics.limited("module_concurrency");
                ("module_error", "busy")
            }
            Err(_) => ("module_error", "failed"),
        };
        self.metrics
            .tool_call(&entry.module_name, &entry.qualified, outcome, reason);
        mcp_trace::record("mcp.outcome", outcome);
        // A gated call's outcome joins its record (a forward with none is visibly
        // unfinished), in the background: the caller has waited for the module already.
        if confirmation.is_some() || matches!(event, Audit::Granted(_)) {
            let completion = match &answered {
                Ok(result) if mcp_wire::result::is_error(result) => CallCompletion::ToolError,
                Ok(_) => CallCompletion::Ok,
                Err(_) => CallCompletion::ModuleFailed,
            };
            let credential = self.registry.credential_kind(entry);
            tracing::info!(target: "audit", event = "tool_call_completed", subject = principal.caller.subject_id(), tenant = principal.caller.tenant_id(), tool = %entry.qualified, outcome = completion.label(), credential, elicitation_id = confirmation.as_ref().map(tracing::field::display));
            let trail = self.trail.clone();
            let caller = principal.caller.clone();
            let tool = entry.qualified.clone();
            tokio::spawn(async move {
                let record = GateRecord::Completed(completion, credential);
                if let Err(e) = timed(trail.record_gate(
                    &caller,
                    confirmation,
                    &tool,
                    record,
                    &PolicyRef::default(),
                ))
                .await
                {
                    tracing::warn!(error = %e, "could not record a call's outcome in the store's audit trail");
                }
            });
        }
        match answered {
            Ok(result) => CallOutcome::Forwarded(result),
            Err(ModuleError::Rpc {
                code,
                message,
                data,
                ..
            }) => CallOutcome::Upstream(ErrorObject {
                code,
                message,
                data: data.map(|d| *d),
            }),
            Err(err) => {
                let error_id = crate::error::new_error_id();
                tracing::warn!(tool = %entry.qualified, %error_id, error = %err, "forwarded call failed");
                // A gated tool is listed without its outputSchema; a forwarded one with it.
                let has_output_schema = matches!(event, Audit::Forwarded { gated: false, .. })
                    && entry.tool.get("outputSchema").is_some();
                CallOutcome::Done(gating_core::upstream_error_result(
                    &err.public_message(&error_id),
                    has_output_schema,
                ))
            }
        }
    }
}

/// A module's answer to a request the gateway routes but does not gate (`what` names it):
/// `None` is nothing by that name (`-32602`); a result passes on as the module wrote it once
/// its top level reads as a result; the module's own JSON-RPC error passes on with code and
/// data; any other failure is ours to report (logged, with an error id).
fn passed_on(
    what: &str,
    answered: Option<Result<Box<RawValue>, ModuleError>>,
) -> Result<ResultBody, McpError> {
    match answered {
        None => Err(McpError::InvalidParams(format!("unknown {what}"))),
        Some(Ok(raw)) => match mcp_wire::result::usable(&raw) {
            Ok(()) => Ok(ResultBody::Raw(raw)),
            Err(why) => Err(McpError::Internal(format!("{what}: {why}"))),
        },
        Some(Err(err)) => Err(module_failure(what, err)),
    }
}

/// A module's failure at a request other than `tools/call` (`what`), as the client's error:
/// its own JSON-RPC error passed on, busy as a retry, anything else internal.
fn module_failure(what: &str, err: ModuleError) -> McpError {
    match err {
        ModuleError::Rpc {
            code,
            message,
            data,
            ..
        } => McpError::Upstream {
            code,
            message,
            data: data.map(|d| *d),
        },
        // Every instance of the module is in use (another caller's load): try again.
        ModuleError::Busy { .. } => McpError::RateLimited {
            what: "the module is busy serving other callers",
            retry_after: 1,
        },
        err => McpError::Internal(format!("{what}: {err}")),
    }
}

/// What a person's approval carries beyond yes, as they asked for it (checked by
/// [`Gateway::answer_with`]).
#[derive(Debug, Clone, Copy)]
pub enum Approving<'a> {
    /// A standing grant's terms: `{"scope", "for", "max_uses"?, "when"?}`.
    Grant(&'a Value),
    /// The arguments to run the call with instead of the agent's.
    Arguments(&'a Value),
}

/// Most schema violations told about edited arguments.
const MAX_SCHEMA_ERRORS: usize = 5;

impl Gateway {
    /// Approves confirmation `id` as `principal` (as [`answer`] does: as its caller, or as a
    /// member of its approver group) with what `with` asks for, in the same store operation,
    /// or does nothing. Refused (`AnswerRefused`, a 422 saying why) when the tool is not
    /// listed now; for a grant, when the terms are malformed or longer than `[gate]
    /// max_grant`, or the policy no longer holds the call for a person or its rule says
    /// `grants = false`; for edited arguments, when they do not match the tool's
    /// `inputSchema` or the policy denies the call with them; and (by the store) on anything
    /// but an approval of a held call. The store enforces who may answer: a four-eyes or
    /// `must` rule's confirmation is approved only by someone who may answer it.
    pub async fn answer_with(
        &self,
        principal: &Principal,
        id: ElicitationId,
        payload: Value,
        answered_by: &str,
        with: Approving<'_>,
    ) -> Result<(Caller, elicitation_core::RespondOutcome, Option<Grant>), McpError> {
        let refused = |why: String| McpError::Store(StoreError::AnswerRefused(why));
        // The held call, as its caller or as an approver may read it.
        let (owner, held) = match (
            self.store.get(&principal.caller, id).await,
            principal.approver(),
        ) {
            (Ok(stored), _) => (principal.caller.clone(), stored),
            (Err(StoreError::NotFound { .. }), Some(approver)) => {
                self.grants.approver_get(&approver, id).await?
            }
            (Err(e), _) => return Err(e.into()),
        };
        let Some(call) = held.call else {
            return Err(refused(format!(
                "only a confirmation of a tool call can carry {}",
                match with {
                    Approving::Grant(_) => "a grant",
                    Approving::Arguments(_) => "edited arguments",
                }
            )));
        };
        // A module's tool, or the agent host's own that a permission prompt asked about.
        let (entry, listed) = match self.registry.find(&call.tool).await {
            Some(entry) => (entry, true),
            None => (
                Arc::new(self.host_entry(&call.tool).await.ok_or_else(|| {
                    refused(format!(
                        "{} is not listed by any module now, so the approval cannot carry anything for it",
                        call.tool
                    ))
                })?),
                false,
            ),
        };
        // What the policy decides now for the call as held (or as edited). The caller's
        // groups are known only when the caller answers; an approver's answer is decided
        // without them — the gate decides again, with them, when the call runs.
        let groups: Vec<String> = if owner == principal.caller {
            principal.rule_groups()
        } else {
            Vec::new()
        };
        let decide = |args: &Value| self.decide(&entry, args, owner.subject_id(), &groups);
        let rule = |decided: &gating_core::Decided| match decided.rule {
            Some(index) => format!("[[policy]] rule {index}"),
            None => "the tool's hints".to_owned(),
        };
        let with = match with {
            Approving::Grant(grant) => {
                let terms = GrantTerms::parse(grant, self.max_grant).map_err(refused)?;
                // A grant stands for the definition the person saw: the one the call was
                // held under, and only while that is what is listed (a changed definition,
                // withheld for an operator or approved since, was never put to this person).
                let seen = self
                    .definition_put_to_the_person(&entry, listed, call.definition)
                    .await;
                let Some(seen) = seen else {
                    return Err(refused(format!(
                        "the definition of {} is not the one this call was held under (it changed, or its change waits for an operator), so no grant can stand for it; approve without a grant",
                        entry.qualified
                    )));
                };
                let decided = decide(&call.arguments);
                match decided.decision {
                    GateDecision::Confirm(_) if decided.grants => {}
                    GateDecision::Confirm(_) => {
                        return Err(refused(format!(
                            "{} holds {} for a person at every call (`grants = false`); approve without a grant",
                            rule(&decided),
                            entry.qualified
                        )));
                    }
                    _ => {
                        return Err(refused(format!(
                            "the policy no longer holds this call of {} for a person ({} decides it), so there is nothing to grant",
                            entry.qualified,
                            rule(&decided)
                        )));
                    }
                }
                elicitation_store::AnswerWith::Grant(elicitation_store::GrantRequest {
                    scope: terms.scope,
                    when: terms.when.as_ref().map(|w| w.source().to_owned()),
                    lasts: terms.lasts,
                    max_uses: terms.max_uses,
                    definition: seen,
                })
            }
            Approving::Arguments(arguments) => {
                check_arguments(&entry, arguments).map_err(refused)?;
                let decided = decide(arguments);
                if decided.decision == GateDecision::Deny {
                    return Err(refused(format!(
                        "{} denies {} with these arguments{}",
                        rule(&decided),
                        entry.qualified,
                        decided
                            .reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    )));
                }
                elicitation_store::AnswerWith::Arguments(arguments.clone())
            }
        };
        let own = self
            .grants
            .respond_with(
                &principal.caller,
                id,
                payload.clone(),
                Some(answered_by),
                with.clone(),
            )
            .await;
        match (own, principal.approver()) {
            (
                Err(StoreError::NotFound { .. } | StoreError::ApproverRequired { .. }),
                Some(approver),
            ) => Ok(self
                .grants
                .approver_respond_with(&approver, id, payload, Some(answered_by), with)
                .await?),
            (own, _) => {
                let (outcome, grant) = own?;
                Ok((principal.caller.clone(), outcome, grant))
            }
        }
    }
}

/// Whether `arguments` may replace the agent's for `entry`: an object that the tool's
/// `inputSchema` accepts. A schema the validator cannot use refuses every edit (the gate
/// cannot check them), and it never fetches anything a `$ref` names.
fn check_arguments(entry: &ToolEntry, arguments: &Value) -> Result<(), String> {
    if !arguments.is_object() {
        return Err("edited arguments must be a JSON object".into());
    }
    let Some(schema) = entry.tool.get("inputSchema") else {
        return Err(format!(
            "{} lists no input schema, so edited arguments cannot be checked; approve the agent's or decline",
            entry.qualified
        ));
    };
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        format!(
            "{}'s input schema cannot be used to check edited arguments ({e}); approve the agent's or decline",
            entry.qualified
        )
    })?;
    let errors: Vec<String> = validator
        .iter_errors(arguments)
        .take(MAX_SCHEMA_ERRORS)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the edited arguments do not match {}'s input schema: {}",
            entry.qualified,
            errors.join("; ")
        ))
    }
}

/// A forwarded call's result, telling the agent that a person changed its arguments before
/// approving, and to what (a text item after the module's content, and `_meta`). Any other
/// outcome passes as it is.
fn told_of_edit(outcome: CallOutcome, edited: &Value) -> CallOutcome {
    let CallOutcome::Forwarded(raw) = outcome else {
        return outcome;
    };
    let Ok(Value::Object(mut result)) = serde_json::from_str::<Value>(raw.get()) else {
        return CallOutcome::Forwarded(raw);
    };
    let notice = format!(
        "A person changed the arguments before approving this call; it ran with these instead of yours: {}",
        gating_core::canonical_json(edited)
    );
    // Claude Code and Codex show their model only the structured content when there is
    // some: the notice goes there too. A gated tool is listed without its outputSchema
    // (the gateway may answer for it), so no client validates this against one.
    if let Some(Value::Object(structured)) = result.get_mut("structuredContent") {
        structured.insert(
            EDITED_META.into(),
            serde_json::json!({"notice": notice, "arguments": edited}),
        );
    }
    let told = serde_json::json!({"type": "text", "text": notice});
    match result.get_mut("content").and_then(Value::as_array_mut) {
        Some(content) => content.push(told),
        None => {
            result.insert("content".into(), Value::Array(vec![told]));
        }
    }
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(EDITED_META.into(), edited.clone());
    }
    CallOutcome::Done(Value::Object(result))
}

/// The `_meta` key of a result whose arguments a person changed: the arguments it ran with.
pub const EDITED_META: &str = "mcp-gateway/edited_arguments";

/// Answers elicitation `id` as `principal`: as its caller, or — for another caller's
/// confirmation, or one its caller may not answer — as a member of its approver group (the
/// store holds the rule: group, four eyes). Returns whose elicitation it is, and the outcome.
pub async fn answer(
    store: &dyn elicitation_store::ElicitationStore,
    principal: &Principal,
    id: ElicitationId,
    payload: Value,
    answered_by: &str,
) -> Result<(elicitation_store::Caller, elicitation_core::RespondOutcome), McpError> {
    let own = store
        .respond_as(&principal.caller, id, payload.clone(), Some(answered_by))
        .await;
    match (own, principal.approver()) {
        (
            Err(StoreError::NotFound { .. } | StoreError::ApproverRequired { .. }),
            Some(approver),
        ) => Ok(store
            .approver_respond(&approver, id, payload, Some(answered_by))
            .await?),
        (own, _) => Ok((principal.caller.clone(), own?)),
    }
}

/// The digest of a tool's pinned definition (its pin's digest when it is listed): a grant
/// or a confirmation made against one definition covers no call after it changed.
pub fn definition_digest(entry: &ToolEntry) -> String {
    entry.digest.to_string()
}

impl Gateway {
    /// The digest of the definition a held call (held under `held_under`) was put to the
    /// person with, when it is still what is listed for `entry`: the same digest and, for a
    /// module's tool (`listed`), its pin's verdict `Listed`. `None` otherwise.
    async fn definition_put_to_the_person(
        &self,
        entry: &Arc<ToolEntry>,
        listed: bool,
        held_under: Option<CallDigest>,
    ) -> Option<String> {
        let held_under = held_under?;
        if entry.digest != held_under {
            return None;
        }
        if listed
            && !matches!(
                self.pinning.verdict(entry).await,
                Ok(crate::pins::Verdict::Listed)
            )
        {
            return None;
        }
        Some(held_under.to_string())
    }
}

/// The facts of one call of `entry` that a rule's or a grant's `when` sees.
fn call_facts<'a>(
    entry: &'a ToolEntry,
    args: &'a Value,
    caller: &'a str,
    groups: &'a [String],
) -> CallFacts<'a> {
    CallFacts {
        tool: &entry.qualified,
        module: &entry.module_name,
        args,
        caller,
        groups,
        hints: hints(entry).effective(),
    }
}

impl Gateway {
    /// What the policy in force decides for a call of `entry` with `args` by `caller`.
    fn decide(
        &self,
        entry: &ToolEntry,
        args: &Value,
        caller: &str,
        groups: &[String],
    ) -> gating_core::Decided {
        self.policy
            .decide(&call_facts(entry, args, caller, groups), hints(entry))
    }
}

fn hints(entry: &ToolEntry) -> HintSource<'_> {
    match (&entry.annotations, entry.trusted) {
        (Some(annotations), true) => HintSource::Trusted(annotations),
        _ => HintSource::Untrusted,
    }
}

/// Which instance of an isolated module serves `caller`: one per caller (tenant and subject).
pub fn instance_key(caller: &Caller) -> String {
    format!(
        "{}\u{1f}{}",
        caller.tenant_id().unwrap_or_default(),
        caller.subject_id()
    )
}

/// The caller whose [`instance_key`] `key` is.
pub fn caller_of_instance_key(key: &str) -> Option<Caller> {
    let (tenant, subject) = key.split_once('\u{1f}')?;
    Caller::new(subject, (!tenant.is_empty()).then(|| tenant.to_owned())).ok()
}

/// Whether `key` is [`instance_key`]`(caller)`, without building it (once per session for
/// every log line or update a caller's instance sends).
pub fn is_instance_key_of(key: &str, caller: &Caller) -> bool {
    key.strip_prefix(caller.tenant_id().unwrap_or_default())
        .and_then(|rest| rest.strip_prefix('\u{1f}'))
        == Some(caller.subject_id())
}

async fn timed<T>(
    op: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    timed_until(tokio::time::Instant::now() + STORE_TIMEOUT, op).await
}

/// `op`, failed as the store's unavailability unless it ends by `deadline` (a wait that is
/// meant to last is bounded by its own end plus [`STORE_TIMEOUT`], not by that alone).
async fn timed_until<T>(
    deadline: tokio::time::Instant,
    op: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout_at(deadline, op)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the store did not answer in time".into(),
            ))
        })
}

impl Gateway {
    /// One structured audit event (target `audit`), never with arguments or payloads; a
    /// hold or a refusal is counted (a forward is counted once the module answered).
    fn audit(
        &self,
        principal: &Principal,
        entry: &ToolEntry,
        event: Audit,
        elicitation: Option<ElicitationId>,
    ) {
        match event {
            Audit::Held => self
                .metrics
                .tool_call(&entry.module_name, &entry.qualified, "held", ""),
            Audit::Rejected(reason) => {
                self.metrics
                    .tool_call(&entry.module_name, &entry.qualified, "rejected", reason)
            }
            Audit::Forwarded { .. } | Audit::Shadowed => {}
            // The store recorded the use (with the grant's id) as it counted it.
            Audit::Granted(_) => return,
        }
        let credential = self.registry.credential_kind(entry);
        audit(principal, entry, event, elicitation, credential);
    }
}

/// One structured audit event (target `audit`). Never arguments or payloads.
fn audit(
    principal: &Principal,
    entry: &ToolEntry,
    event: Audit,
    elicitation: Option<ElicitationId>,
    credential: Option<&'static str>,
) {
    let subject = principal.caller.subject_id();
    let tenant = principal.caller.tenant_id();
    // Formatted only if the event is recorded.
    let elicitation_id = elicitation.as_ref().map(tracing::field::display);
    match event {
        Audit::Held => {
            tracing::info!(target: "audit", event = "tool_call_held", subject, tenant, tool = %entry.qualified, elicitation_id)
        }
        Audit::Forwarded { gated, shadowed } => {
            tracing::info!(target: "audit", event = "tool_call_forwarded", subject, tenant, tool = %entry.qualified, gated, shadowed, credential, elicitation_id)
        }
        Audit::Shadowed => {
            tracing::info!(target: "audit", event = "tool_call_shadowed", subject, tenant, tool = %entry.qualified)
        }
        Audit::Rejected(reason) => {
            tracing::info!(target: "audit", event = "tool_call_rejected", subject, tenant, tool = %entry.qualified, reason, elicitation_id)
        }
        Audit::Granted(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_key_names_one_caller_only() {
        let alice = Caller::new("alice", Some("acme".into())).unwrap();
        let plain = Caller::new("alice", None).unwrap();
        let other = Caller::new("acme", Some("alice".into())).unwrap();
        for caller in [&alice, &plain, &other] {
            assert!(is_instance_key_of(&instance_key(caller), caller));
        }
        assert!(!is_instance_key_of(&instance_key(&alice), &plain));
        assert!(!is_instance_key_of(&instance_key(&plain), &alice));
        assert!(!is_instance_key_of(&instance_key(&alice), &other));
        assert!(!is_instance_key_of("acme\u{1f}alicex", &alice));
    }
}
