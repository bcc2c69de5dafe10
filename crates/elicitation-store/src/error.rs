//! The store's one error type. Backend errors are mapped onto its variants; the source is
//! kept for logs only.

use elicitation_core::{ElicitationId, SpecError, TransitionError};

/// The environment variable holding the key ring: `id:BASE64,id:BASE64,...`.
pub const SEAL_KEYS_ENV: &str = "MCP_GATEWAY_SEAL_KEYS";

/// Why keys could not be loaded or a payload could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// No key is configured.
    #[error(
        "no seal key configured: the postgres store seals payloads and refuses to start without one; set {SEAL_KEYS_ENV}=k1:<base64 of 32 random bytes> (e.g. from `openssl rand -base64 32`) or store.seal_keys"
    )]
    NoKeys,
    /// A key entry is not `id:base64`.
    #[error("seal key entry {index} is not `id:base64`")]
    Malformed {
        /// Its position in the list, from 0.
        index: usize,
    },
    /// A key id has characters other than letters, digits, `_`, `-` and `.`, or is too long.
    #[error("seal key id {id:?} must be 1 to 64 letters, digits, '_', '-' or '.'")]
    BadKeyId {
        /// The id.
        id: String,
    },
    /// Two keys have the same id.
    #[error("seal key id {id:?} appears twice")]
    DuplicateKeyId {
        /// The id.
        id: String,
    },
    /// The key material is not base64 of exactly 32 bytes.
    #[error("seal key {id:?} must be base64 of exactly 32 bytes")]
    BadKeyMaterial {
        /// The id.
        id: String,
    },
    /// The payload was sealed with a key the ring does not have.
    #[error("sealed with unknown key {id:?}")]
    UnknownKey {
        /// The id.
        id: String,
    },
    /// The payload did not open: tampered, moved to another row or caller, or corrupt.
    #[error("a sealed payload failed to open (tampered, moved, or sealed for another row)")]
    Open,
    /// The keys file could not be read.
    #[error("cannot read the seal keys file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The system's random source failed.
    #[error("the system random source failed")]
    Random,
}

type Source = Box<dyn std::error::Error + Send + Sync>;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No grant with this id is the caller's or made by it.
    #[error("grant {id} not found")]
    GrantNotFound {
        /// The id asked for.
        id: uuid::Uuid,
    },
    /// No delegation with this id was given or received by the caller (or it has ended).
    #[error("delegation {id} not found")]
    DelegationNotFound {
        /// The id asked for.
        id: uuid::Uuid,
    },
    /// No such tool-definition change.
    #[error("tool-definition change {id} not found")]
    ChangeNotFound {
        /// The id asked for.
        id: uuid::Uuid,
    },
    /// A connected account that cannot be stored as given (said why).
    #[error("the account cannot be stored: {0}")]
    InvalidAccount(String),
    /// The caller holds as many connected accounts as allowed.
    #[error(
        "the caller already holds {limit} connected accounts, the most allowed; disconnect one first"
    )]
    AccountLimit {
        /// The per-caller limit.
        limit: usize,
    },
    /// What an approval was asked to carry (a standing grant, edited arguments) cannot be
    /// made (said why, for the person): nothing was recorded.
    #[error("{0}")]
    AnswerRefused(String),
    /// The caller answered a confirmation that an approver group must answer.
    #[error("confirmation {id} must be answered by a member of {group:?}")]
    ApproverRequired {
        /// The confirmation.
        id: ElicitationId,
        /// The group that answers it.
        group: String,
    },
    /// An approver tried to answer their own call's four-eyes confirmation.
    #[error("confirmation {id} needs a second person: its caller may not answer it")]
    FourEyes {
        /// The confirmation.
        id: ElicitationId,
    },
    /// No elicitation with this id belongs to the caller (it may not exist, or belong to
    /// someone else: the two are indistinguishable on purpose).
    #[error("elicitation {id} not found")]
    NotFound {
        /// The id asked for.
        id: ElicitationId,
    },
    /// The elicitation's state does not allow the operation.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// The caller already has as many pending elicitations as allowed.
    #[error(
        "the caller already has {limit} pending elicitations, the most allowed; answer or cancel some first"
    )]
    PendingLimit {
        /// The per-caller limit.
        limit: usize,
    },
    /// The caller holds as many elicitations (or bytes of them) as the memory store allows
    /// one caller, and none of its finished ones can be dropped.
    #[error(
        "the caller holds as many elicitations as allowed ({records}, or {bytes} bytes) and none can be dropped; answer or cancel some first"
    )]
    CallerFull {
        /// Elicitations one caller may hold.
        records: usize,
        /// Estimated bytes one caller may hold.
        bytes: usize,
    },
    /// The memory store holds as many elicitations as configured and none can be evicted.
    #[error("the store is full ({limit} elicitations, all pending)")]
    Full {
        /// The configured capacity.
        limit: usize,
    },
    /// A caller id is empty, too long, or contains control characters.
    #[error("caller ids must be 1 to 512 bytes without control characters")]
    InvalidCaller,
    /// A time to live under one second.
    #[error("an elicitation's time to live must be at least one second")]
    InvalidTtl,
    /// The spec cannot be answered as written.
    #[error("invalid elicitation spec: {0}")]
    Spec(#[from] SpecError),
    /// A sealed payload did not open, or the key configuration is unusable.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// A stored row could not be read back as an elicitation.
    #[error("stored elicitation {id} is unreadable: {reason}")]
    Corrupt {
        /// The row's id.
        id: ElicitationId,
        /// What was wrong with it.
        reason: String,
    },
    /// The store's configuration is unusable (for example a bad database URL).
    #[error("store configuration: {0}")]
    Config(String),
    /// The database has no (or an older) schema.
    #[error(
        "the database is not migrated: run `mcp-gateway migrate` (or `cargo xtask migrate`) first"
    )]
    NotMigrated,
    /// The database refused for lack of privilege: the login role is not set up as
    /// docs/postgres.md describes.
    #[error(
        "the database refused the operation: the login role lacks a privilege (see docs/postgres.md)"
    )]
    PermissionDenied(#[source] Source),
    /// A concurrent transaction conflicted; the operation may be retried.
    #[error("the operation conflicted with a concurrent one; retry it")]
    Conflict(#[source] Source),
    /// The database cannot be reached or did not answer in time.
    #[error("the store is unavailable")]
    Unavailable(#[source] Source),
    /// Any other backend failure.
    #[error("the store failed")]
    Backend(#[source] Source),
}

impl StoreError {
    /// Whether a stored row could not be opened (a sealed part under a key no longer in the
    /// ring, tampered, or damaged): a fault of that row, not of the store.
    pub fn is_unreadable(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. } | StoreError::Seal(_))
    }

    /// Whether the caller made the mistake (as opposed to the store or its configuration).
    pub fn is_caller_error(&self) -> bool {
        matches!(
            self,
            StoreError::NotFound { .. }
                | StoreError::AnswerRefused(_)
                | StoreError::InvalidAccount(_)
                | StoreError::AccountLimit { .. }
                | StoreError::GrantNotFound { .. }
                | StoreError::DelegationNotFound { .. }
                | StoreError::ChangeNotFound { .. }
                | StoreError::ApproverRequired { .. }
                | StoreError::FourEyes { .. }
                | StoreError::Transition(_)
                | StoreError::PendingLimit { .. }
                | StoreError::CallerFull { .. }
                | StoreError::InvalidCaller
                | StoreError::InvalidTtl
                | StoreError::Spec(_)
        )
    }
}

/// Maps a database error onto the store's variants by SQLSTATE.
#[cfg(feature = "postgres")]
pub(crate) fn map_db_error(err: tokio_postgres::Error) -> StoreError {
    use tokio_postgres::error::SqlState;
    let Some(code) = err.code().cloned() else {
        // No SQLSTATE: the connection failed or closed, or (a bug) a value did not convert.
        let io = std::error::Error::source(&err).is_some_and(|s| s.is::<std::io::Error>());
        return if err.is_closed() || io {
            StoreError::Unavailable(Box::new(err))
        } else {
            StoreError::Backend(Box::new(err))
        };
    };
    if code == SqlState::T_R_SERIALIZATION_FAILURE
        || code == SqlState::T_R_DEADLOCK_DETECTED
        || code == SqlState::UNIQUE_VIOLATION
        || code == SqlState::LOCK_NOT_AVAILABLE
    {
        StoreError::Conflict(Box::new(err))
    } else if code == SqlState::INSUFFICIENT_PRIVILEGE {
        StoreError::PermissionDenied(Box::new(err))
    } else if code == SqlState::UNDEFINED_TABLE
        || code == SqlState::UNDEFINED_FUNCTION
        || code == SqlState::UNDEFINED_OBJECT
    {
        StoreError::NotMigrated
    } else if code.code().starts_with("08")
        || code.code().starts_with("57")
        || code == SqlState::TOO_MANY_CONNECTIONS
    {
        StoreError::Unavailable(Box::new(err))
    } else {
        StoreError::Backend(Box::new(err))
    }
}

impl From<elicitation_core::InvalidCaller> for StoreError {
    fn from(_: elicitation_core::InvalidCaller) -> Self {
        StoreError::InvalidCaller
    }
}
