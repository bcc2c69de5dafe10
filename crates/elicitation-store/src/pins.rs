//! Tool-definition pins: the definition of each module's tool (and prompt) that the gateway
//! trusts — the first one it saw, or one a person approved — kept with the digest of its
//! canonical JSON, and the changes a module made since, each waiting for a person's decision.
//! A definition that is not its pin is not to be listed or run until it is approved.
//!
//! Pins are the catalog's, not a caller's: every instance sharing the store sees the same
//! ones. They are only ever added to (a new version), never rewritten.

use std::fmt;

use gating_core::CallDigest;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

/// What a pinned definition defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DefinitionKind {
    /// A tool (`tools/list`).
    Tool,
    /// A prompt (`prompts/list`).
    Prompt,
}

impl DefinitionKind {
    /// The stored and wire label.
    pub const fn label(self) -> &'static str {
        match self {
            DefinitionKind::Tool => "tool",
            DefinitionKind::Prompt => "prompt",
        }
    }

    /// The kind of a label.
    pub fn from_label(label: &str) -> Option<DefinitionKind> {
        match label {
            "tool" => Some(DefinitionKind::Tool),
            "prompt" => Some(DefinitionKind::Prompt),
            _ => None,
        }
    }
}

/// Which definition: a module's tool or prompt by its own (unprefixed) name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DefinitionKey {
    /// The module's configured name.
    pub module: String,
    /// Tool or prompt.
    pub kind: DefinitionKind,
    /// The name the module lists it by.
    pub name: String,
}

impl fmt::Display for DefinitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} of module {}",
            self.kind.label(),
            self.name,
            self.module
        )
    }
}

/// A definition as trusted: the definition itself, the digest of its canonical JSON, and
/// which version of the key's pins it is (1 for the first).
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    /// Which.
    pub key: DefinitionKey,
    /// From 1, one more with every approved change.
    pub version: u32,
    /// SHA-256 of the definition's canonical JSON.
    pub digest: CallDigest,
    /// The definition.
    pub definition: Value,
    /// When it was pinned.
    pub pinned_at: OffsetDateTime,
    /// Who approved it (`None`: pinned on first sight).
    pub pinned_by: Option<String>,
}

/// Where a change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeStatus {
    /// Waits for a person: the definition is withheld.
    Pending,
    /// Approved: it became the pin.
    Approved,
    /// Rejected: withheld for as long as the pin it would have replaced stands.
    Rejected,
}

impl ChangeStatus {
    /// The stored and wire label.
    pub const fn label(self) -> &'static str {
        match self {
            ChangeStatus::Pending => "pending",
            ChangeStatus::Approved => "approved",
            ChangeStatus::Rejected => "rejected",
        }
    }

    /// The status of a label.
    pub fn from_label(label: &str) -> Option<ChangeStatus> {
        match label {
            "pending" => Some(ChangeStatus::Pending),
            "approved" => Some(ChangeStatus::Approved),
            "rejected" => Some(ChangeStatus::Rejected),
            _ => None,
        }
    }
}

/// A definition a module listed that is not its pin (or, held for approval, a first one):
/// withheld until a person decides.
#[derive(Debug, Clone, PartialEq)]
pub struct DefinitionChange {
    /// Which change (a UUID v7).
    pub id: Uuid,
    /// Which definition.
    pub key: DefinitionKey,
    /// Where it stands.
    pub status: ChangeStatus,
    /// Why it is held (`"description changed"`, `"new tool"`, `"invisible characters in the
    /// description"`, …), for the person.
    pub reasons: Vec<String>,
    /// The pin it would replace (`None`: a first sight held for approval).
    pub pinned: Option<Pin>,
    /// What the module lists now.
    pub proposed: Value,
    /// Its digest.
    pub proposed_digest: CallDigest,
    /// When it was first seen.
    pub seen_at: OffsetDateTime,
    /// When a person decided.
    pub decided_at: Option<OffsetDateTime>,
    /// Who decided.
    pub decided_by: Option<String>,
}

/// What became of a definition a module lists, against its pin.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// It is the pin (or was pinned now, on first sight): list it.
    Pinned(Pin),
    /// It is withheld: the change that waits for (or was refused by) a person.
    Held(Box<DefinitionChange>),
}

/// How a first sight is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstSight {
    /// Pinned as it is (`pin = "first_use"`), unless it has reasons to be held.
    Trust,
    /// Held for a person's approval (`pin = "approve"`).
    Hold,
}

/// The pins of every module's definitions and the changes that wait (both stores; on
/// PostgreSQL shared by every instance).
#[async_trait::async_trait]
pub trait CatalogStore: Send + Sync + 'static {
    /// Compares `definition`, which module `key.module` lists now, with its pin:
    /// - the same digest as the pin: `Pinned`;
    /// - never pinned, `first` is `Trust` and there are no `reasons`: pinned now as version 1
    ///   (however many instances see it at once, one pin) and `Pinned`;
    /// - anything else: `Held` with the change recorded for it against the current pin —
    ///   one per proposed definition, however often it is seen; a change a person rejected
    ///   stays rejected while that pin stands. `reasons` (invisible characters, say) are
    ///   recorded with a new change.
    async fn observe(
        &self,
        key: &DefinitionKey,
        definition: &Value,
        first: FirstSight,
        reasons: &[String],
    ) -> Result<Observed, crate::StoreError>;

    /// The changes, pending first then newest first; at most `limit`.
    async fn definition_changes(
        &self,
        limit: usize,
    ) -> Result<Vec<DefinitionChange>, crate::StoreError>;

    /// Decides pending change `id` as `by`: approved, its definition becomes the key's pin
    /// (the next version); rejected, it stays withheld. `NotFound` for no such change;
    /// a change decided already is returned as it is (`Transition` when it was decided the
    /// other way).
    async fn decide_change(
        &self,
        id: Uuid,
        approve: bool,
        by: Option<&str>,
    ) -> Result<DefinitionChange, crate::StoreError>;

    /// The key's current pin, if any.
    async fn pin(&self, key: &DefinitionKey) -> Result<Option<Pin>, crate::StoreError>;
}

/// The digest a definition is pinned by.
pub fn definition_digest(definition: &Value) -> CallDigest {
    CallDigest::of(definition)
}

/// A change's event as a structured tracing event (never the definitions).
/// The subject the catalog's statements (and their audit events) run as.
pub(crate) const CATALOG_SUBJECT: &str = "mcp-gateway";

/// The `detail` of a definition change's audit event, as the PostgreSQL store writes it.
pub(crate) fn audit_detail(change: &DefinitionChange) -> Value {
    let mut detail = serde_json::Map::new();
    detail.insert("change".into(), change.id.to_string().into());
    detail.insert("module".into(), change.key.module.clone().into());
    detail.insert("kind".into(), change.key.kind.label().into());
    detail.insert(
        "proposed_digest".into(),
        change.proposed_digest.to_string().into(),
    );
    match &change.decided_by {
        Some(by) => {
            detail.insert("decided_by".into(), by.clone().into());
        }
        None if change.status == ChangeStatus::Pending => {
            if let Some(pin) = &change.pinned {
                detail.insert("pinned_digest".into(), pin.digest.to_string().into());
            }
        }
        None => {}
    }
    Value::Object(detail)
}

pub(crate) fn emit(event: crate::AuditEvent, change: &DefinitionChange) {
    tracing::info!(
        target: "audit",
        event = event.label(),
        change_id = %change.id,
        module = change.key.module.as_str(),
        kind = change.key.kind.label(),
        name = change.key.name.as_str(),
        pinned_digest = change.pinned.as_ref().map(|p| p.digest.to_string()),
        proposed_digest = %change.proposed_digest,
        decided_by = change.decided_by.as_deref(),
    );
}

/// The refusal of a second, different decision.
pub(crate) fn decided_otherwise(change: &DefinitionChange) -> crate::StoreError {
    crate::StoreError::AnswerRefused(format!(
        "change {} was {} already",
        change.id,
        change.status.label()
    ))
}

/// The refusal of an approval whose pin was replaced since the change was seen.
pub(crate) fn stale(change: &DefinitionChange) -> crate::StoreError {
    crate::StoreError::AnswerRefused(format!(
        "change {} was proposed against a pin that has been replaced since; review the newer change instead",
        change.id
    ))
}

/// The reasons recorded with a new change: the caller's, or what is known without them.
pub(crate) fn reasons_or_default(
    reasons: &[String],
    pinned: bool,
    key: &DefinitionKey,
) -> Vec<String> {
    if !reasons.is_empty() {
        return reasons.to_vec();
    }
    vec![if pinned {
        "the definition differs from its pin".to_owned()
    } else {
        format!("a new {} waits for approval", key.kind.label())
    }]
}
