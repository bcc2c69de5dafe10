//! The gate: the tools/call pipeline in two steps and everything it needs beside a server.
//! [`Gateway::classify`] resolves the tool and asks `gating-core` whether the call is
//! forwarded, denied or held; [`Gateway::resolve`] settles a held call against the
//! confirmation it names, in the store. Beside it: the catalog passed through from the
//! modules ungated (tools, prompts, resources, completions), the per-caller [`limits`], the
//! [`metrics`] of every call, the [`Inbox`] where a module's question waits for a person,
//! and [`error::GateError`], its own error (the server maps it to JSON-RPC and HTTP).
//!
//! Fail closed: a gated call is forwarded only after its confirmation was consumed (atomically,
//! once) from the store. Store errors, missing identity, or anything unexpected answer with an
//! in-band error, never a forward. A non-gated call never waits for the store: its tool's
//! pin is read once, then again in the background at most every `pins::RECHECK`.
//!
//! No server here: no hyper, no HTTP types, no sessions. It is driven, and tested, without
//! one; `mcp-http` puts it on the wire.
//!
//! This file holds the [`Gateway`] and its builder; `gate.rs` step one and the forward,
//! `hold.rs` step two, `approve.rs` approvals with grants or edits, `catalog.rs` the
//! pass-through, `outcome.rs` the values they pass around.

mod approve;
mod catalog;
mod content;
mod definitions;
mod delegate;
mod delegated;
pub mod error;
mod flow;
mod gate;
mod groups;
mod held_result;
mod hold;
mod inbox;
mod instance;
pub mod limits;
mod outcome;
mod own;
mod own_tool;
mod past_quota;
mod permission;
pub mod pins;
pub mod quotas;
mod respond;
#[cfg(feature = "rmcp")]
pub mod rmcp;
mod scoped;
pub mod servers;
pub mod streams;
mod task_routes;
pub mod tasks;

pub use delegate::delegation_terms;
pub use groups::GroupsFrom;
pub use inbox::{Inbox, RELEASE, WITHHOLD};
pub use instance::{caller_of_instance_key, instance_key, is_instance_key_of};
/// The gateway's metrics (the `mcp-metrics` crate), which the gate counts every call in.
pub use mcp_metrics as metrics;
pub use outcome::{
    Approving, CallOutcome, Classified, EDITED_META, GatedCall, PendingConfirmation, Run, RunBy,
    Settled,
};
pub use own_tool::{ClientAnswer, OwnTool};
pub use pins::definition_digest;
pub use respond::answer;

use std::sync::Arc;
use std::time::Duration;

use elicitation_store::{
    AuditSink, Caller, ElicitationStore, Fleet, GrantStore, Store, StoreError,
};
use gating_core::GatePolicy;
use mcp_upstream::registry::Registry;

use crate::error::GateError;
use mcp_auth::Principal;

/// How long one store operation may take before the gate gives up (and fails closed).
const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// The gateway's decision-making core, shared by both protocol eras. A clone shares its
/// modules, store, limits and metrics (a virtual server is one, [`servers`]).
#[derive(Clone)]
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
    connectable: Arc<std::collections::BTreeMap<String, Arc<dyn mcp_upstream::accounts::Connect>>>,
    /// The modules whose calls carry each caller's own token, exchanged (RFC 8693).
    exchanges: Arc<Vec<Arc<dyn mcp_upstream::credentials::SubjectTokens>>>,
    /// Where the gate reads the time: a confirmation's time left, the pins' re-reads.
    clock: Arc<dyn mcp_clock::Clock>,
    /// How its texts name who holds calls and where people answer.
    surfaces: Arc<gating_core::Surfaces>,
    /// Where the tasks handed to clients live ([`tasks`]).
    tasks: Arc<crate::task_routes::TaskRoutes>,
    /// What each caller's forwarded calls touched ([`flow`]): the store's.
    flows: Arc<dyn elicitation_store::FlowStore>,
    /// Whose approvals are handed to whom, for a while: the store's.
    delegations: Arc<dyn elicitation_store::DelegationStore>,
    /// The quotas and budgets (`[[quotas]]`), and the store's counters of them.
    quotas: Arc<crate::quotas::Quotas>,
    counters: Arc<dyn elicitation_store::QuotaStore>,
    /// Tool definitions as the content policy lets clients see them, by name and digest.
    definitions: Arc<crate::definitions::Definitions>,
    /// The results waiting for a person, per caller (`held_result`).
    held_results: crate::streams::StreamSlots,
    /// The virtual server this gateway is (`None`: the gateway's own endpoint).
    server: Option<Arc<crate::servers::VirtualServer>>,
    /// The virtual servers beside it, by name (the gateway's own endpoint's only).
    servers: Arc<std::collections::BTreeMap<String, Arc<Gateway>>>,
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

impl ApproverRule {
    /// Whether the rule covers `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        gating_core::covers(&self.tools, tool)
    }
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
            flows: store.clone(),
            delegations: store.clone(),
            quotas: Arc::default(),
            counters: store.clone(),
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
            clock: Arc::new(mcp_clock::SystemClock),
            surfaces: Arc::new(gating_core::Surfaces::gateway()),
            tasks: Arc::default(),
            definitions: Arc::default(),
            held_results: crate::streams::StreamSlots::new(crate::inbox::MAX_HELD_PER_CALLER),
            server: None,
            servers: Arc::default(),
        }
    }

    /// Its texts (held results, refusals, a person's question) name who holds calls and
    /// where people answer as `surfaces` says ([`Gateway::new`]: the gateway's approvals
    /// page and REST API; [`Gateway::for_own_tools`]: no surface).
    #[must_use]
    pub fn with_surfaces(mut self, surfaces: gating_core::Surfaces) -> Self {
        // Shown to people and agents: nothing in them may hide or reorder what they read.
        let shown = |text: String| gating_core::visible(&text);
        self.surfaces = Arc::new(gating_core::Surfaces {
            name: shown(surfaces.name),
            answer_at: surfaces.answer_at.map(shown),
            pending_at: surfaces.pending_at.map(shown),
            review_at: surfaces.review_at.map(shown),
            accounts_at: surfaces.accounts_at.map(shown),
        });
        self
    }

    /// How its texts name who holds calls and where people answer.
    pub fn surfaces(&self) -> &Arc<gating_core::Surfaces> {
        &self.surfaces
    }

    /// A gate for a server's own tools, with no modules of its own (an embedder's; its
    /// tools come through [`Gateway::classify_own`], or the `rmcp` adapter with feature
    /// `rmcp`). The embedder vouches for its callers: an unauthenticated one is gated like
    /// any other.
    pub async fn for_own_tools(
        store: Arc<dyn Store>,
        policy: GatePolicy,
    ) -> Result<Gateway, GateError> {
        let registry = Registry::start(Vec::new())
            .await
            .map_err(|e| GateError::Internal(e.to_string()))?;
        Ok(Gateway::new(registry, store, policy, false).with_surfaces(Default::default()))
    }

    /// Where the gateway reads the time.
    pub fn clock(&self) -> &Arc<dyn mcp_clock::Clock> {
        &self.clock
    }

    /// The gateway reading the time from `clock` (the store's, in tests a `ManualClock`)
    /// instead of the system's.
    pub fn with_clock(mut self, clock: Arc<dyn mcp_clock::Clock>) -> Self {
        let modes = self.pinning.modes().clone();
        self.pinning = Arc::new(
            crate::pins::Pinning::new(self.catalog.clone(), modes).with_clock(clock.clone()),
        );
        self.clock = clock;
        self
    }

    /// Pins each module's tool definitions as `modes` says (`first_use` for one not named).
    #[must_use]
    pub fn with_pin_modes(
        mut self,
        modes: std::collections::HashMap<String, crate::pins::PinMode>,
    ) -> Self {
        self.pinning = Arc::new(
            crate::pins::Pinning::new(self.catalog.clone(), modes).with_clock(self.clock.clone()),
        );
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
        modules: Vec<Arc<dyn mcp_upstream::accounts::Connect>>,
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
        exchanges: Vec<Arc<dyn mcp_upstream::credentials::SubjectTokens>>,
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
    ) -> &std::collections::BTreeMap<String, Arc<dyn mcp_upstream::accounts::Connect>> {
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

    /// Counts the calls about to run against these quotas and budgets (`[[quotas]]`).
    #[must_use]
    pub fn with_quotas(mut self, quotas: crate::quotas::Quotas) -> Self {
        self.quotas = Arc::new(quotas);
        self
    }

    /// Where `principal` stands against every quota that counts its calls now (`GET
    /// /v1/quotas`).
    pub async fn quota_standing(
        &self,
        principal: &Principal,
    ) -> Result<Vec<serde_json::Value>, GateError> {
        Ok(self
            .quotas
            .standing(self.counters.as_ref(), principal)
            .await?)
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
    pub fn take_call(&self, caller: &Caller, what: &'static str) -> Result<(), GateError> {
        self.limits.call(caller).map_err(|wait| {
            self.metrics.limited("calls");
            GateError::RateLimited {
                what,
                retry_after: crate::limits::retry_after_secs(wait),
            }
        })
    }

    /// Takes one REST API request of `caller` from its bucket, or says when to try again.
    pub fn take_api(&self, caller: &Caller) -> Result<(), GateError> {
        self.limits.api(caller).map_err(|wait| {
            self.metrics.limited("api");
            GateError::RateLimited {
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
        let qualify = |group: &str| rule.groups_from.qualify(group, caller);
        approval.group = qualify(&approval.group);
        for group in &mut approval.quorum.also {
            *group = qualify(group);
        }
        Some(approval)
    }

    /// Its elicitations kept by `elicitations` instead (a test double that fakes only them);
    /// the fleet and the audit trail stay the store's.
    #[must_use]
    pub fn with_elicitations(mut self, elicitations: Arc<dyn ElicitationStore>) -> Self {
        self.store = elicitations;
        self
    }

    /// The store's delegations (made and ended on the page and over REST).
    pub fn delegations(&self) -> &Arc<dyn elicitation_store::DelegationStore> {
        &self.delegations
    }

    /// The store's elicitations (the REST API answers through them).
    pub fn store(&self) -> &Arc<dyn ElicitationStore> {
        &self.store
    }

    /// What the instances sharing the store tell each other (ended sessions, notices).
    pub fn fleet(&self) -> &Arc<dyn Fleet> {
        &self.fleet
    }
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
