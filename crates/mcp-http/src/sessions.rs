//! Legacy (≤ 2025-11-25) sessions: created by `initialize`, named by a cryptographically
//! random `MCP-Session-Id`, bound to the caller that created them, ended by DELETE or idle
//! expiry. A session of another caller is indistinguishable from an unknown one (404).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use elicitation_store::Caller;
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::McpError;
use crate::listen::SessionChannel;
use crate::relay::ClientAnswers;

/// What a session remembers from its `initialize`.
#[derive(Debug, Clone)]
pub struct Session {
    /// The negotiated protocol version.
    pub version: &'static str,
    /// What the client declared it can answer (all the gateway needs of its capabilities;
    /// keeping only this bounds a session's size).
    pub answers: ClientAnswers,
    /// The lowest rank of log message the client wants (`logging/setLevel`); all until it
    /// sets one.
    pub log_level: u8,
    /// Its events, subscriptions and GET stream.
    pub channel: Arc<SessionChannel>,
    caller: Caller,
    last_seen: Instant,
}

/// Most sessions one caller may hold; opening another ends its oldest.
pub const MAX_SESSIONS_PER_CALLER: usize = 64;

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
        answers: ClientAnswers,
    ) -> Result<String, McpError> {
        let mut bytes = [0u8; 32];
        self.rng
            .fill(&mut bytes)
            .map_err(|_| McpError::Internal("the system random source failed".into()))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|_, s| {
            let live = now.duration_since(s.last_seen) < self.idle_timeout;
            if !live {
                s.channel.close();
            }
            live
        });
        // A caller that opens too many sessions ends its own oldest, not someone else's.
        let own: Vec<(&String, &Session)> = sessions
            .iter()
            .filter(|(_, s)| s.caller == *caller)
            .collect();
        let evict = if own.len() >= MAX_SESSIONS_PER_CALLER {
            own.into_iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone())
        } else if sessions.len() >= self.max_sessions {
            sessions
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| k.clone())
        } else {
            None
        };
        if let Some(oldest) = evict.and_then(|oldest| sessions.remove(&oldest)) {
            oldest.channel.close();
        }
        sessions.insert(
            id.clone(),
            Session {
                version,
                answers,
                log_level: 0,
                channel: Arc::default(),
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
            if sessions.get(id).is_some_and(|s| s.caller == *caller)
                && let Some(expired) = sessions.remove(id)
            {
                expired.channel.close();
            }
            return Err(McpError::SessionNotFound);
        }
        let session = sessions.get_mut(id).ok_or(McpError::SessionNotFound)?;
        session.last_seen = now;
        Ok(session.clone())
    }

    /// Sets the log level (a rank) of the caller's session `id`.
    pub fn set_log_level(&self, id: &str, caller: &Caller, rank: u8) -> Result<(), McpError> {
        self.touch(id, caller)?;
        if let Some(session) = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(id)
        {
            session.log_level = rank;
        }
        Ok(())
    }

    /// Ends the caller's session `id`.
    pub fn remove(&self, id: &str, caller: &Caller) -> Result<(), McpError> {
        self.touch(id, caller)?;
        let removed = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(session) = removed {
            session.channel.close();
        }
        Ok(())
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends every session's stream (the gateway is shutting down); the sessions stay.
    pub fn end_streams(&self) {
        for session in self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            session.channel.close();
        }
    }

    /// Queues `message` for every live session's stream.
    pub fn notify_all(&self, message: &[u8]) {
        for session in self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            session.channel.push(message);
        }
    }

    /// Queues `message` for the streams of the sessions subscribed to `uri`.
    pub fn notify_subscribers(&self, uri: &str, message: &[u8]) {
        for session in self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            if session.channel.subscribed(uri) {
                session.channel.push(message);
            }
        }
    }

    /// Whether any live session other than `except` subscribed to `uri`.
    pub fn others_subscribed(&self, uri: &str, except: &str) -> bool {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(id, s)| id != except && s.channel.subscribed(uri))
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
        let id = sessions
            .create(&alice, "2025-11-25", ClientAnswers::default())
            .unwrap();
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
    fn a_caller_with_too_many_sessions_ends_its_own_oldest() {
        let sessions = Sessions::new(Duration::from_secs(60), 10_000);
        let alice = Caller::new("alice", None).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        let bobs = sessions
            .create(&bob, "2025-11-25", ClientAnswers::default())
            .unwrap();
        let first = sessions
            .create(&alice, "2025-11-25", ClientAnswers::default())
            .unwrap();
        for _ in 0..MAX_SESSIONS_PER_CALLER {
            sessions
                .create(&alice, "2025-11-25", ClientAnswers::default())
                .unwrap();
        }
        assert!(
            sessions.touch(&first, &alice).is_err(),
            "alice's oldest made room"
        );
        assert!(
            sessions.touch(&bobs, &bob).is_ok(),
            "bob's session is untouched"
        );
    }

    #[test]
    fn idle_sessions_expire_and_the_oldest_makes_room() {
        let alice = Caller::new("alice", None).unwrap();
        let expired = Sessions::new(Duration::ZERO, 10);
        let id = expired
            .create(&alice, "2025-11-25", ClientAnswers::default())
            .unwrap();
        assert!(matches!(
            expired.touch(&id, &alice),
            Err(McpError::SessionNotFound)
        ));
        let small = Sessions::new(Duration::from_secs(60), 1);
        let first = small
            .create(&alice, "2025-11-25", ClientAnswers::default())
            .unwrap();
        let second = small
            .create(&alice, "2025-11-25", ClientAnswers::default())
            .unwrap();
        assert!(small.touch(&first, &alice).is_err());
        assert!(small.touch(&second, &alice).is_ok());
    }
}
