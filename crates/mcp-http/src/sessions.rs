//! Legacy (≤ 2025-11-25) sessions: created by `initialize`, named by a cryptographically
//! random `MCP-Session-Id`, bound to the caller that created them, ended by DELETE or idle
//! expiry. A session of another caller is indistinguishable from an unknown one (404).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use elicitation_store::Caller;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value;

use crate::error::McpError;

/// What a session remembers from its `initialize`.
#[derive(Debug, Clone)]
pub struct Session {
    /// The negotiated protocol version.
    pub version: &'static str,
    /// The client's declared capabilities.
    pub capabilities: Value,
    caller: Caller,
    last_seen: Instant,
}

/// The gateway's legacy sessions.
pub struct Sessions {
    sessions: Mutex<HashMap<String, Session>>,
    idle_timeout: Duration,
    max_sessions: usize,
    rng: SystemRandom,
}

impl Sessions {
    /// Sessions ending after `idle_timeout` without a request; at most `max_sessions` (the
    /// longest idle is dropped to make room).
    pub fn new(idle_timeout: Duration, max_sessions: usize) -> Self {
        Sessions {
            sessions: Mutex::new(HashMap::new()),
            idle_timeout,
            max_sessions: max_sessions.max(1),
            rng: SystemRandom::new(),
        }
    }

    /// Starts a session and returns its id (32 random bytes, hex).
    pub fn create(
        &self,
        caller: &Caller,
        version: &'static str,
        capabilities: Value,
    ) -> Result<String, McpError> {
        let mut bytes = [0u8; 32];
        self.rng
            .fill(&mut bytes)
            .map_err(|_| McpError::Internal("the system random source failed".into()))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|_, s| now.duration_since(s.last_seen) < self.idle_timeout);
        if sessions.len() >= self.max_sessions
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(
            id.clone(),
            Session {
                version,
                capabilities,
                caller: caller.clone(),
                last_seen: now,
            },
        );
        Ok(id)
    }

    /// The caller's live session `id`, marking it used.
    pub fn touch(&self, id: &str, caller: &Caller) -> Result<Session, McpError> {
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let live = sessions.get(id).is_some_and(|s| {
            s.caller == *caller && now.duration_since(s.last_seen) < self.idle_timeout
        });
        if !live {
            if sessions.get(id).is_some_and(|s| s.caller == *caller) {
                sessions.remove(id);
            }
            return Err(McpError::SessionNotFound);
        }
        let session = sessions.get_mut(id).ok_or(McpError::SessionNotFound)?;
        session.last_seen = now;
        Ok(session.clone())
    }

    /// Ends the caller's session `id`.
    pub fn remove(&self, id: &str, caller: &Caller) -> Result<(), McpError> {
        self.touch(id, caller)?;
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_bound_to_their_caller_and_end_on_delete() {
        let sessions = Sessions::new(Duration::from_secs(60), 10);
        let alice = Caller::new("alice", None).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        let id = sessions.create(&alice, "2025-11-25", Value::Null).unwrap();
        assert_eq!(id.len(), 64);
        assert_eq!(sessions.touch(&id, &alice).unwrap().version, "2025-11-25");
        assert!(matches!(
            sessions.touch(&id, &bob),
            Err(McpError::SessionNotFound)
        ));
        assert!(matches!(
            sessions.remove(&id, &bob),
            Err(McpError::SessionNotFound)
        ));
        sessions.remove(&id, &alice).unwrap();
        assert!(matches!(
            sessions.touch(&id, &alice),
            Err(McpError::SessionNotFound)
        ));
    }

    #[test]
    fn idle_sessions_expire_and_the_oldest_makes_room() {
        let alice = Caller::new("alice", None).unwrap();
        let expired = Sessions::new(Duration::ZERO, 10);
        let id = expired.create(&alice, "2025-11-25", Value::Null).unwrap();
        assert!(matches!(
            expired.touch(&id, &alice),
            Err(McpError::SessionNotFound)
        ));
        let small = Sessions::new(Duration::from_secs(60), 1);
        let first = small.create(&alice, "2025-11-25", Value::Null).unwrap();
        let second = small.create(&alice, "2025-11-25", Value::Null).unwrap();
        assert!(small.touch(&first, &alice).is_err());
        assert!(small.touch(&second, &alice).is_ok());
    }
}
