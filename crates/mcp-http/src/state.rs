//! Sealed `requestState` for multi round-trip requests (2026-07-28): AES-256-GCM under a key
//! every instance derives from the same configured material, so any instance accepts the
//! retry. A state binds the caller, the qualified tool, the call digest, the confirmation
//! elicitation and an expiry, and is accepted once per instance.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use mcp_auth::sealed::Sealer;

/// The HKDF `info` for the state key (distinct from the payload key's).
pub const STATE_KEY_INFO: &str = "mcp-gateway/request-state/v1";
const PREFIX: &str = "v1.";
const AAD: &[u8] = b"mcp-gateway/request-state/v1";

/// What a state says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateClaims {
    /// Caller subject.
    pub sub: String,
    /// Caller tenant.
    pub ten: Option<String>,
    /// Qualified tool.
    pub tool: String,
    /// Call digest, hex.
    pub dig: String,
    /// The confirmation elicitation.
    pub eid: String,
    /// Expiry, Unix seconds.
    pub exp: i64,
    /// The client was sent the approvals page's URL (URL mode): its answer says only
    /// whether the person went there, and is never recorded as theirs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub url: bool,
    /// How many times the client was sent to the page again for this confirmation after
    /// saying it had gone there (URL mode): past a few, it gets the held result instead.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub round: u8,
}

/// Whether `n` is 0 (a first ask: no `round` in the state).
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// An opened, unexpired, not yet used state.
#[derive(Debug, Clone)]
pub struct OpenedState {
    /// What it says.
    pub claims: StateClaims,
    /// The token's hash (what "used" remembers).
    used_as: [u8; 32],
}

/// Why a state was refused (all map to `-32602` on the wire).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not a state this gateway sealed, or tampered with.
    #[error("invalid requestState")]
    Invalid,
    /// Past its expiry.
    #[error("expired requestState")]
    Expired,
    /// Already accepted once.
    #[error("requestState was already used")]
    Replayed,
}

/// The handle of a task the gateway holds itself (a call held for a person, or the answer it
/// gave a task-augmented call at once): what it says, sealed like a state (so any instance
/// that shares the key serves it) under a label of its own (a state is no handle, a handle
/// no state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskClaims {
    /// Caller subject.
    pub sub: String,
    /// Caller tenant.
    pub ten: Option<String>,
    /// Created, Unix seconds.
    pub at: i64,
    /// Answered about until, Unix seconds.
    pub exp: i64,
    /// What the task is.
    #[serde(flatten)]
    pub task: HostedTask,
}

/// What a task the gateway holds itself is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "k")]
pub enum HostedTask {
    /// A call held for a person's answer to its confirmation (the call itself, its tool and
    /// arguments, is the confirmation's in the store).
    #[serde(rename = "h")]
    Held {
        /// The confirmation.
        eid: String,
    },
    /// An answer the gateway gave at once (a refusal, a module's plain result).
    #[serde(rename = "a")]
    Answered {
        /// The result.
        result: serde_json::Value,
    },
}

/// The prefix of a task handle of the gateway's own ([`TaskClaims`]).
pub const TASK_PREFIX: &str = "t1.";
const TASK_AAD: &[u8] = b"mcp-gateway/held-task/v1";

/// Seals and opens states.
pub struct RequestStates {
    sealer: Sealer,
    /// The sealer of the gateway's own task handles.
    tasks: Sealer,
    used: Mutex<HashMap<[u8; 32], i64>>,
}

impl RequestStates {
    /// States keyed by `key` (derive it from the configured key material with
    /// [`STATE_KEY_INFO`]).
    pub fn new(key: [u8; 32]) -> Self {
        RequestStates::with_keys(&[key])
    }

    /// States sealed under the first of `keys` and opened under any (each derived from one
    /// seal key with [`STATE_KEY_INFO`], the active first): a rotated seal key ends no state.
    pub fn with_keys(keys: &[[u8; 32]]) -> Self {
        RequestStates {
            sealer: Sealer::new(keys, PREFIX, AAD),
            tasks: Sealer::new(keys, TASK_PREFIX, TASK_AAD),
            used: Mutex::new(HashMap::new()),
        }
    }

    /// States under a random key: valid for this process only (fine for a single instance
    /// with the memory store).
    pub fn ephemeral() -> Self {
        RequestStates::with_keys(&[])
    }

    /// A sealed state token.
    pub fn seal(&self, claims: &StateClaims) -> Option<String> {
        self.sealer.seal(claims)
    }

    /// Opens a token and checks its expiry at `now`, and whether it was used already. Call
    /// [`RequestStates::mark_used`] once the state was found to belong to the request.
    pub fn open(&self, token: &str, now: OffsetDateTime) -> Result<OpenedState, StateError> {
        let claims: StateClaims = self.sealer.open(token).ok_or(StateError::Invalid)?;
        if claims.exp <= now.unix_timestamp() {
            return Err(StateError::Expired);
        }
        let used_as = mcp_auth::sealed::token_hash(token);
        if self
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&used_as)
        {
            return Err(StateError::Replayed);
        }
        Ok(OpenedState { claims, used_as })
    }

    /// Marks an opened state used; false if it was used meanwhile (a concurrent replay).
    pub fn mark_used(&self, opened: &OpenedState, now: OffsetDateTime) -> bool {
        let now = now.unix_timestamp();
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        used.retain(|_, exp| *exp > now);
        used.insert(opened.used_as, opened.claims.exp).is_none()
    }

    /// A sealed task handle.
    pub fn seal_task(&self, claims: &TaskClaims) -> Option<String> {
        self.tasks.seal(claims)
    }

    /// What a task handle says, when it is one of this gateway's and answered about at
    /// `now` (a handle may be sent any number of times: it is polled).
    pub fn open_task(&self, handle: &str, now: OffsetDateTime) -> Option<TaskClaims> {
        let claims: TaskClaims = self.tasks.open(handle)?;
        (claims.exp > now.unix_timestamp()).then_some(claims)
    }

    /// [`RequestStates::open`] and [`RequestStates::mark_used`] at once.
    pub fn accept(&self, token: &str, now: OffsetDateTime) -> Result<StateClaims, StateError> {
        let opened = self.open(token, now)?;
        if !self.mark_used(&opened, now) {
            return Err(StateError::Replayed);
        }
        Ok(opened.claims)
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    fn claims(exp: i64) -> StateClaims {
        StateClaims {
            sub: "alice".into(),
            ten: None,
            tool: "fs__write_file".into(),
            dig: "00".repeat(32),
            eid: "0190f7b2-0000-7000-8000-000000000000".into(),
            exp,
            url: false,
            round: 0,
        }
    }

    /// A pending `requestState` sealed before the seal key rotated is accepted while the old
    /// key is still listed, and refused once it is dropped.
    #[test]
    fn a_state_sealed_before_a_key_rotation_is_accepted_until_the_old_key_goes() {
        let now = datetime!(2026-11-30 10:00 UTC);
        let (old, new) = ([7; 32], [9; 32]);
        let token = RequestStates::new(old)
            .seal(&claims(now.unix_timestamp() + 600))
            .unwrap();
        assert!(
            RequestStates::with_keys(&[new, old])
                .accept(&token, now)
                .is_ok()
        );
        assert_eq!(
            RequestStates::with_keys(&[new]).accept(&token, now),
            Err(StateError::Invalid)
        );
    }

    #[test]
    fn a_task_handle_is_no_state_and_a_state_no_task_handle() {
        let now = datetime!(2026-11-30 10:00 UTC);
        let states = RequestStates::new([7; 32]);
        let state = states.seal(&claims(now.unix_timestamp() + 600)).unwrap();
        let task = TaskClaims {
            sub: "alice".into(),
            ten: None,
            at: now.unix_timestamp(),
            exp: now.unix_timestamp() + 600,
            task: HostedTask::Answered {
                result: serde_json::json!({"content": []}),
            },
        };
        let handle = states.seal_task(&task).unwrap();
        assert!(handle.starts_with(TASK_PREFIX));
        assert_eq!(states.open_task(&handle, now), Some(task));
        assert_eq!(states.open_task(&state, now), None);
        assert_eq!(states.open(&handle, now).err(), Some(StateError::Invalid));
        // Past its time, and under another key, it is nobody's.
        assert_eq!(
            states.open_task(&handle, now + time::Duration::seconds(600)),
            None
        );
        assert_eq!(RequestStates::new([8; 32]).open_task(&handle, now), None);
    }

    #[test]
    fn states_open_once_and_only_untampered_and_in_time() {
        let now = datetime!(2026-11-30 10:00 UTC);
        let states = RequestStates::new([7; 32]);
        let token = states.seal(&claims(now.unix_timestamp() + 600)).unwrap();
        assert!(token.starts_with("v1."));
        assert_eq!(
            states.accept(&token, now).unwrap(),
            claims(now.unix_timestamp() + 600)
        );
        assert_eq!(states.accept(&token, now), Err(StateError::Replayed));

        let other_instance = RequestStates::new([7; 32]);
        let token = states.seal(&claims(now.unix_timestamp() + 600)).unwrap();
        assert!(
            other_instance.accept(&token, now).is_ok(),
            "instances sharing the key accept each other's states"
        );
        assert_eq!(
            RequestStates::new([8; 32]).accept(&token, now),
            Err(StateError::Invalid)
        );

        let mut tampered = token.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            states.accept(&String::from_utf8(tampered).unwrap(), now),
            Err(StateError::Invalid)
        );
        for junk in [
            "",
            "v1.",
            "v2.abc",
            "v1.!!!!",
            "eyJsb2NhdGlvbiI6Ik5ldyBZb3JrIn0",
        ] {
            assert_eq!(states.accept(junk, now), Err(StateError::Invalid), "{junk}");
        }
        let old = states.seal(&claims(now.unix_timestamp() - 1)).unwrap();
        assert_eq!(states.accept(&old, now), Err(StateError::Expired));
    }
}
