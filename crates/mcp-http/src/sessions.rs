//! Legacy (≤ 2025-11-25) sessions: created by `initialize`, ended by DELETE or when they
//! reach their maximum age. A session of another caller is indistinguishable from an
//! unknown one (404).
//!
//! A session's small state — the negotiated version, what the client can answer, the caller
//! it is bound to, when it began — travels sealed (AES-256-GCM) in its `MCP-Session-Id`, so
//! every instance that shares the key (derived from the seal keys) serves any request of any
//! session, behind any balancer. An instance keeps what it needs of a session in memory while
//! it is used (its log level, its GET stream's events and subscriptions), drops it after the
//! idle timeout, and opens it again from the id when the session comes back. Ending a
//! session is recorded in the store, and every instance sharing the store refuses it from
//! then on (it hears at once through the store's change feed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use elicitation_store::{Caller, Clock, Fleet, SystemClock};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::answers::ClientAnswers;
use crate::channel::SessionChannel;
use mcp_auth::sealed::{Sealer, token_hash};
use mcp_http_kit::ended::EndedTokens;
use mcp_http_kit::error::McpError;

/// The HKDF `info` for the session key (distinct from the payload and state keys).
pub const SESSION_KEY_INFO: &str = "mcp-gateway/session/v1";
const PREFIX: &str = "s1.";
const AAD: &[u8] = b"mcp-gateway/session/v1";

/// The keys session ids (and page sign-ins) are sealed under, derived from each seal key with
/// [`SESSION_KEY_INFO`]: the first seals, every one opens (a rotated seal key ends no
/// session). Its `Debug` shows nothing of them.
#[derive(Clone)]
pub struct SessionKey(pub Vec<[u8; 32]>);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

/// A session held in this instance's memory: what it remembers from its `initialize`, and
/// what this instance keeps of it. Cloned as a handle (the same session).
#[derive(Debug, Clone)]
pub struct Session(Arc<Held>);

#[derive(Debug)]
struct Held {
    /// The negotiated protocol version.
    version: &'static str,
    /// What the client declared it can answer (all the gateway needs of its capabilities;
    /// keeping only this bounds a session's size).
    answers: ClientAnswers,
    /// The lowest rank of log message the client wants (`logging/setLevel`); all until it
    /// sets one. Kept by the instance that received it.
    log_level: AtomicU8,
    /// Its events, subscriptions and GET stream (on this instance).
    channel: Arc<SessionChannel>,
    caller: Caller,
    /// The virtual server it was opened on (`None`: the gateway's own endpoint): it is no
    /// session anywhere else.
    server: Option<String>,
    /// When it was last used: nanoseconds after its `Sessions`' epoch. Every request of the
    /// session sets it, under the map's read lock (so requests of many sessions, on many
    /// cores, share no lock to write).
    last_seen: AtomicU64,
    /// When it ends however it is used.
    ends_at: OffsetDateTime,
    /// SHA-256 of its id (how the store and other instances name it).
    hash: [u8; 32],
}

impl Session {
    /// The negotiated protocol version.
    pub fn version(&self) -> &'static str {
        self.0.version
    }

    /// What the client declared it can answer.
    pub fn answers(&self) -> ClientAnswers {
        self.0.answers
    }

    /// The lowest rank of log message the client wants (`logging/setLevel`, here or told by
    /// another instance); all until it sets one.
    pub fn log_level(&self) -> u8 {
        self.0.log_level.load(Ordering::Relaxed)
    }

    /// Its events, subscriptions and GET stream (on this instance).
    pub fn channel(&self) -> &Arc<SessionChannel> {
        &self.0.channel
    }

    /// Who the session belongs to.
    pub fn caller(&self) -> &Caller {
        &self.0.caller
    }
}

impl Held {
    /// When it was last used, on `epoch`'s clock.
    fn last_seen(&self, epoch: Instant) -> Instant {
        let after = Duration::from_nanos(self.last_seen.load(Ordering::Relaxed));
        epoch.checked_add(after).unwrap_or(epoch)
    }

    /// Marks it used at `now` (never earlier than a later use another request marked).
    fn seen(&self, epoch: Instant, now: Instant) {
        let nanos =
            u64::try_from(now.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX);
        self.last_seen.fetch_max(nanos, Ordering::Relaxed);
    }
}

/// What memory holds of a session (`Sessions::in_memory`).
enum InMemory {
    /// In use: marked used now.
    Live(Session),
    /// Ended, or idle past the timeout.
    Stale,
    /// Nothing.
    Absent,
}

/// The sessions held in memory, by id. The ids are sealed by this gateway's key (an id is
/// held only once it opens), so no client can choose keys that collide: the map is hashed
/// with foldhash, several times cheaper than SipHash over an id of a few hundred bytes, as
/// every legacy request looks its session up.
type HeldMap = HashMap<String, Session, foldhash::fast::RandomState>;

/// What a session id carries, sealed.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    /// Caller subject and tenant.
    sub: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ten: Option<String>,
    /// Negotiated version.
    v: String,
    /// What the client can answer: elicitation, elicitation URL mode, sampling, roots.
    a: [bool; 4],
    /// When the session ends, Unix seconds.
    exp: i64,
    /// The virtual server it was opened on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    srv: Option<String>,
}

/// Most sessions one caller may hold in an instance's memory; opening another drops its
/// oldest from memory (it opens again from its id if it comes back).
pub const MAX_SESSIONS_PER_CALLER: usize = 64;

/// How often an instance reads the store's whole list of ended sessions.
const REREAD_ENDED: Duration = Duration::from_secs(60);

/// A session that ended: its hash (what the store records) and until when it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// SHA-256 of the session id.
    pub hash: [u8; 32],
    /// When it would have ended anyway.
    pub until: OffsetDateTime,
}

/// What one instance tells the others about a session it served (through the store's
/// broadcast), so the instance holding the session's GET stream sees what the session asked
/// for elsewhere.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "k")]
pub(crate) enum SessionEvent {
    /// `resources/subscribe` (`on`) or `resources/unsubscribe` of `uri`.
    #[serde(rename = "sub")]
    Subscription {
        /// The instance that served it (it applied it itself).
        i: String,
        /// The session's hash, hex.
        s: String,
        /// The resource.
        u: String,
        /// Subscribed or not.
        on: bool,
    },
    /// `logging/setLevel`, as a rank.
    #[serde(rename = "log")]
    LogLevel {
        /// The instance that served it.
        i: String,
        /// The session's hash, hex.
        s: String,
        /// The rank.
        r: u8,
    },
}

/// A hash as hex.
pub(crate) fn hex(hash: &[u8; 32]) -> String {
    mcp_random::hex(hash)
}

/// The gateway's legacy sessions.
pub struct Sessions {
    sessions: RwLock<HeldMap>,
    /// What `last_seen` is counted from.
    epoch: Instant,
    /// Ended sessions and page sign-ins (by hash) and when they would have ended anyway.
    ended: Arc<EndedTokens>,
    idle_timeout: Duration,
    max_age: Duration,
    max_sessions: usize,
    sealer: Sealer,
    /// This instance, in what it broadcasts (random; it skips its own).
    instance: String,
    /// Where lifetimes and idle times are read.
    clock: Arc<dyn Clock>,
}

impl Sessions {
    /// Sessions dropped from memory after `idle_timeout` without a request, ending
    /// `max_age` after they began; at most `max_sessions` in memory (the longest idle is
    /// dropped to make room). Ids are sealed under `keys` (instances that share them serve each
    /// other's sessions; none: a random key).
    pub fn new(
        idle_timeout: Duration,
        max_age: Duration,
        max_sessions: usize,
        keys: &[[u8; 32]],
    ) -> Self {
        Sessions {
            sessions: RwLock::default(),
            epoch: SystemClock.instant(),
            ended: Arc::default(),
            idle_timeout,
            max_age,
            max_sessions: max_sessions.max(1),
            sealer: Sealer::new(keys, PREFIX, AAD),
            // Made once, at start-up: without a random source nothing can be served.
            instance: mcp_random::hex(&mcp_random::bytes_or_abort::<8>()),
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads lifetimes and idle times from `clock` (tests move it instead of sleeping).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.epoch = clock.instant();
        self.clock = clock;
        self
    }

    /// This instance's name in what it broadcasts.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// The sessions held, to read (and to mark used).
    fn held(&self) -> RwLockReadGuard<'_, HeldMap> {
        self.sessions.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sessions held, to add or drop one.
    fn held_mut(&self) -> RwLockWriteGuard<'_, HeldMap> {
        self.sessions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The session held in memory here whose id hashes to `hash` (hex), with its id.
    pub(crate) fn by_hash(&self, hash: &str) -> Option<(String, Session)> {
        self.held()
            .iter()
            .find(|(_, s)| hex(&s.0.hash) == hash)
            .map(|(id, s)| (id.clone(), s.clone()))
    }

    /// Sets the log level of session `id` held here (told by another instance).
    pub(crate) fn set_log_level_here(&self, id: &str, rank: u8) {
        if let Some(session) = self.held().get(id) {
            session.0.log_level.store(rank, Ordering::Relaxed);
        }
    }

    /// Sessions under a random key: valid in this process only.
    pub fn ephemeral(idle_timeout: Duration, max_age: Duration, max_sessions: usize) -> Self {
        Sessions::new(idle_timeout, max_age, max_sessions, &[])
    }

    /// Starts a session of `caller` on virtual server `server` (`None`: the gateway's own
    /// endpoint) and returns its id (the sealed state).
    pub fn create(
        &self,
        caller: &Caller,
        server: Option<&str>,
        version: &'static str,
        answers: ClientAnswers,
    ) -> Result<String, McpError> {
        let ends_at = self.clock.now()
            + time::Duration::try_from(self.max_age).unwrap_or(time::Duration::DAY);
        let claims = Claims {
            sub: caller.subject_id().to_owned(),
            ten: caller.tenant_id().map(str::to_owned),
            v: version.to_owned(),
            a: [
                answers.elicitation,
                answers.elicitation_url,
                answers.sampling,
                answers.roots,
            ],
            exp: ends_at.unix_timestamp(),
            srv: server.map(str::to_owned),
        };
        let id = self
            .seal(&claims)
            .ok_or_else(|| McpError::Internal("a session id could not be sealed".into()))?;
        self.insert(id.clone(), (caller, server), version, answers, ends_at)?;
        Ok(id)
    }

    fn seal(&self, claims: &Claims) -> Option<String> {
        self.sealer.seal(claims)
    }

    /// The claims of a session id this gateway sealed, if it is one.
    fn open(&self, id: &str) -> Option<Claims> {
        if id.len() > 1024 {
            return None;
        }
        self.sealer.open(id)
    }

    fn insert(
        &self,
        id: String,
        (caller, server): (&Caller, Option<&str>),
        version: &'static str,
        answers: ClientAnswers,
        ends_at: OffsetDateTime,
    ) -> Result<Session, McpError> {
        let (now, wall) = (self.clock.instant(), self.clock.now());
        let epoch = self.epoch;
        let mut sessions = self.held_mut();
        // Looked at under the write lock, where nothing else changes the map: a session
        // ended (here or elsewhere) since its id was opened is not put back; one another
        // request opened from the same id meanwhile is the one used.
        if self.is_ended(&id) {
            return Err(McpError::SessionNotFound);
        }
        if let Some(session) = self.settle(&mut sessions, &id, (caller, server), (now, wall))? {
            return Ok(session);
        }
        sessions.retain(|_, s| {
            let live = now.duration_since(s.0.last_seen(epoch)) < self.idle_timeout;
            if !live {
                s.0.channel.close();
            }
            live
        });
        // A caller with too many sessions in memory drops its own oldest, not someone else's.
        let own: Vec<(&String, &Session)> = sessions
            .iter()
            .filter(|(_, s)| s.0.caller == *caller)
            .collect();
        let evict = if own.len() >= MAX_SESSIONS_PER_CALLER {
            own.into_iter()
                .min_by_key(|(_, s)| s.0.last_seen(epoch))
                .map(|(k, _)| k.clone())
        } else if sessions.len() >= self.max_sessions {
            sessions
                .iter()
                .min_by_key(|(_, s)| s.0.last_seen(epoch))
                .map(|(k, _)| k.clone())
        } else {
            None
        };
        if let Some(oldest) = evict.and_then(|oldest| sessions.remove(&oldest)) {
            oldest.0.channel.close();
        }
        let session = Session(Arc::new(Held {
            version,
            answers,
            log_level: AtomicU8::new(0),
            channel: Arc::default(),
            caller: caller.clone(),
            server: server.map(str::to_owned),
            last_seen: AtomicU64::new(0),
            ends_at,
            hash: token_hash(&id),
        }));
        session.0.seen(epoch, now);
        sessions.insert(id, session.clone());
        Ok(session)
    }

    /// What memory holds of session `id` for `caller` on `server` at `now` (`wall`), marking
    /// a live one used; another caller's, or one on another server, is not found.
    fn in_memory(
        &self,
        sessions: &HeldMap,
        id: &str,
        (caller, server): (&Caller, Option<&str>),
        (now, wall): (Instant, OffsetDateTime),
    ) -> Result<InMemory, McpError> {
        let Some(session) = sessions.get(id) else {
            return Ok(InMemory::Absent);
        };
        let held = &session.0;
        if held.caller != *caller || held.server.as_deref() != server {
            return Err(McpError::SessionNotFound);
        }
        if held.ends_at > wall && now.duration_since(held.last_seen(self.epoch)) < self.idle_timeout
        {
            held.seen(self.epoch, now);
            return Ok(InMemory::Live(session.clone()));
        }
        Ok(InMemory::Stale)
    }

    /// Under the write lock: session `id` if it is live in memory (marked used), else
    /// nothing, and a stale one out of memory (its stream closed).
    fn settle(
        &self,
        sessions: &mut HeldMap,
        id: &str,
        whose: (&Caller, Option<&str>),
        at: (Instant, OffsetDateTime),
    ) -> Result<Option<Session>, McpError> {
        match self.in_memory(sessions, id, whose, at)? {
            InMemory::Live(session) => Ok(Some(session)),
            InMemory::Absent => Ok(None),
            InMemory::Stale => {
                if let Some(gone) = sessions.remove(id) {
                    gone.0.channel.close();
                }
                Ok(None)
            }
        }
    }

    fn is_ended(&self, id: &str) -> bool {
        self.ended.contains(&token_hash(id))
    }

    /// The caller's live session `id` on virtual server `server` (`None`: the gateway's own
    /// endpoint), marking it used: from memory, or opened from the id (a session begun on
    /// another instance, or dropped from memory while idle). A session of another caller, or
    /// opened on another server, is not found.
    pub fn touch(
        &self,
        id: &str,
        caller: &Caller,
        server: Option<&str>,
    ) -> Result<Session, McpError> {
        let now = self.clock.instant();
        let wall = self.clock.now();
        let found = self.in_memory(&self.held(), id, (caller, server), (now, wall))?;
        match found {
            InMemory::Live(session) => return Ok(session),
            InMemory::Absent => {}
            InMemory::Stale => {
                // Ended or idle too long: looked at again under the write lock (another
                // request may have used it since, at a later `now`, or put a new one in its
                // place), and out of memory if it still is; opened again from its id below
                // if it may still be used.
                let settled =
                    self.settle(&mut self.held_mut(), id, (caller, server), (now, wall))?;
                if let Some(session) = settled {
                    return Ok(session);
                }
            }
        }
        if self.is_ended(id) {
            return Err(McpError::SessionNotFound);
        }
        let claims = self.open(id).ok_or(McpError::SessionNotFound)?;
        let owner = Caller::new(&claims.sub, claims.ten.clone()).ok();
        if owner.as_ref() != Some(caller) || claims.srv.as_deref() != server {
            return Err(McpError::SessionNotFound);
        }
        let ends_at = OffsetDateTime::from_unix_timestamp(claims.exp)
            .map_err(|_| McpError::SessionNotFound)?;
        if ends_at <= wall {
            return Err(McpError::SessionNotFound);
        }
        let version = mcp_wire::mcp::LEGACY_VERSIONS
            .iter()
            .copied()
            .find(|v| *v == claims.v)
            .ok_or(McpError::SessionNotFound)?;
        let [elicitation, elicitation_url, sampling, roots] = claims.a;
        let answers = ClientAnswers {
            elicitation,
            elicitation_url,
            sampling,
            roots,
        };
        self.insert(id.to_owned(), (caller, server), version, answers, ends_at)
    }

    /// Sets the log level (a rank) of the caller's session `id` (on this instance).
    pub fn set_log_level(
        &self,
        id: &str,
        (caller, server): (&Caller, Option<&str>),
        rank: u8,
    ) -> Result<(), McpError> {
        self.touch(id, caller, server)?;
        self.set_log_level_here(id, rank);
        Ok(())
    }

    /// What ending the caller's session `id` must record in the store (so every instance
    /// refuses it); nothing ends yet ([`Sessions::remove`] ends it here).
    pub fn ending(
        &self,
        id: &str,
        caller: &Caller,
        server: Option<&str>,
    ) -> Result<Ended, McpError> {
        let session = self.touch(id, caller, server)?;
        Ok(Ended {
            hash: session.0.hash,
            until: session.0.ends_at,
        })
    }

    /// Ends session `id` here once its [`Sessions::ending`] was recorded (the store's notice
    /// of it may have ended it here already).
    pub fn end(&self, id: &str, ended: Ended) {
        self.end_here(ended.hash, ended.until);
        let removed = self.held_mut().remove(id);
        if let Some(session) = removed {
            session.0.channel.close();
        }
    }

    /// Ends the caller's session `id` here; what the store must record so every instance
    /// refuses it.
    pub fn remove(
        &self,
        id: &str,
        caller: &Caller,
        server: Option<&str>,
    ) -> Result<Ended, McpError> {
        let ended = self.ending(id, caller, server)?;
        self.end(id, ended);
        Ok(ended)
    }

    /// A session ended on another instance (by hash), refused here until `until` (`None`:
    /// until the longest a session lives).
    pub fn ended_elsewhere(&self, hash: [u8; 32], until: Option<OffsetDateTime>) {
        let wall = self.clock.now();
        let until = until.unwrap_or_else(|| {
            wall + time::Duration::try_from(self.max_age).unwrap_or(time::Duration::DAY)
        });
        self.end_here(hash, until);
        let mut sessions = self.held_mut();
        let id = sessions
            .iter()
            .find(|(_, s)| s.0.hash == hash)
            .map(|(id, _)| id.clone());
        if let Some(session) = id.and_then(|id| sessions.remove(&id)) {
            session.0.channel.close();
        }
    }

    /// Learns the sessions ended on other instances sharing `store` — those ended before
    /// now, and, for as long as the sessions exist, each one ended from now on.
    pub fn follow_ends(self: &Arc<Self>, store: Arc<dyn Fleet>) {
        let Some(mut ends) = store.session_ends() else {
            return;
        };
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            // Read the whole list now, after a lost notice, and every minute in any case
            // (a notice sent while the store's listener reconnected is not heard).
            let mut reread = tokio::time::interval(REREAD_ENDED);
            loop {
                let heard = tokio::select! {
                    _ = reread.tick() => None,
                    heard = ends.recv() => Some(heard),
                };
                let Some(sessions) = weak.upgrade() else {
                    return;
                };
                match heard {
                    Some(Ok(hash)) => sessions.ended_elsewhere(hash, None),
                    Some(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
                    Some(Err(tokio::sync::broadcast::error::RecvError::Lagged(n))) => {
                        tracing::warn!(
                            missed = n,
                            "ended-session notices were dropped; reading the list again"
                        );
                        sessions.read_ended(&*store).await;
                    }
                    None => {
                        sessions.prune_ended();
                        sessions.read_ended(&*store).await;
                    }
                }
            }
        });
    }

    async fn read_ended(&self, store: &dyn Fleet) {
        match store.ended_sessions().await {
            Ok(list) => {
                self.ended.extend(list);
                let ended = &self.ended;
                // One pass over the sessions held here, whatever the list's length.
                self.held_mut().retain(|_, s| {
                    let live = !ended.contains(&s.0.hash);
                    if !live {
                        s.0.channel.close();
                    }
                    live
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "the ended sessions could not be read; trying again in a minute")
            }
        }
    }

    /// Sessions held in this instance's memory now.
    pub fn len(&self) -> usize {
        self.held().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record of ended tokens (sessions and page sign-ins), to share with the page.
    pub fn ended(&self) -> Arc<EndedTokens> {
        self.ended.clone()
    }

    /// Ends, here, what hashes to `hash` until `until`.
    pub(crate) fn end_here(&self, hash: [u8; 32], until: OffsetDateTime) {
        self.ended.end(hash, until);
    }

    /// Forgets ended sessions past the time they would have ended anyway.
    fn prune_ended(&self) {
        self.ended.prune(self.clock.now());
    }

    /// Ends every session's stream (the gateway is shutting down); the sessions stay.
    pub fn end_streams(&self) {
        for session in self.held().values() {
            session.0.channel.close();
        }
    }

    /// Queues `message` for every live session's stream.
    pub fn notify_all(&self, message: &[u8]) {
        for session in self.held().values() {
            session.0.channel.push(message);
        }
    }

    /// Queues a module instance's log message (at level `rank`) for the streams of the
    /// sessions of the caller the instance serves (`who`, see `gateway::instance_key`) that
    /// want that level.
    pub fn notify_caller(&self, who: &str, rank: u8, message: &[u8]) {
        for session in self.held().values() {
            if rank >= session.log_level() && mcp_gate::is_instance_key_of(who, session.caller()) {
                session.0.channel.push(message);
            }
        }
    }

    /// Queues `message` for the streams of the sessions subscribed to the updated URI (of
    /// its caller's, for a caller's own module instance).
    pub fn notify_subscribers(
        &self,
        update: &mcp_upstream::registry::ResourceUpdate,
        message: &[u8],
    ) {
        for session in self.held().values() {
            if session.0.channel.subscribed(&update.uri)
                && update
                    .who
                    .as_deref()
                    .is_none_or(|who| mcp_gate::is_instance_key_of(who, session.caller()))
            {
                session.0.channel.push(message);
            }
        }
    }

    /// Whether the module `uri` belongs to already holds a subscription to it that another
    /// session than `except` (`""`: none) or, when `listening`, a listen stream asked for, so it need not be
    /// told again (or told to stop). Never for an isolated module: its instance is the
    /// caller's own, so it is always told.
    pub fn module_knows(
        &self,
        gateway: &mcp_gate::Gateway,
        listening: bool,
        uri: &str,
        except: &str,
    ) -> bool {
        !gateway.registry().isolates(uri) && (self.others_subscribed(uri, except) || listening)
    }

    /// Whether any live session other than `except` subscribed to `uri`.
    pub fn others_subscribed(&self, uri: &str, except: &str) -> bool {
        self.held()
            .iter()
            .any(|(id, s)| id != except && s.0.channel.subscribed(uri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn sessions_are_bound_to_their_caller_and_end_on_delete() {
        let sessions = Sessions::ephemeral(Duration::from_secs(60), DAY, 10);
        let alice = Caller::new("alice", None).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        let id = sessions
            .create(&alice, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        assert!(id.starts_with(PREFIX) && !id.contains("alice"), "{id}");
        assert_eq!(
            sessions.touch(&id, &alice, None).unwrap().version(),
            "2025-11-25"
        );
        assert!(matches!(
            sessions.touch(&id, &bob, None),
            Err(McpError::SessionNotFound)
        ));
        assert!(matches!(
            sessions.remove(&id, &bob, None),
            Err(McpError::SessionNotFound)
        ));
        let ended = sessions.remove(&id, &alice, None).unwrap();
        assert_eq!(ended.hash, token_hash(&id));
        assert!(matches!(
            sessions.touch(&id, &alice, None),
            Err(McpError::SessionNotFound)
        ));
    }

    #[test]
    fn another_instance_with_the_same_key_serves_the_session_and_hears_it_ended() {
        let key = [7u8; 32];
        let a = Sessions::new(Duration::from_secs(60), DAY, 10, &[key]);
        let b = Sessions::new(Duration::from_secs(60), DAY, 10, &[key]);
        let other_key = Sessions::new(Duration::from_secs(60), DAY, 10, &[[8u8; 32]]);
        let alice = Caller::new("alice", Some("acme".into())).unwrap();
        let answers = ClientAnswers {
            elicitation: true,
            elicitation_url: false,
            sampling: true,
            roots: false,
        };
        let id = a.create(&alice, None, "2025-06-18", answers).unwrap();
        let there = b.touch(&id, &alice, None).unwrap();
        assert_eq!(there.version(), "2025-06-18");
        assert_eq!(there.answers(), answers);
        assert!(
            other_key.touch(&id, &alice, None).is_err(),
            "another key: unknown"
        );
        let mallory = Caller::new("alice", Some("evil".into())).unwrap();
        assert!(b.touch(&id, &mallory, None).is_err(), "bound to its caller");
        // Bound to the endpoint it was opened on: a session of a virtual server is no
        // session on another, nor on the gateway's own endpoint, and the other way round.
        let on_finance = a
            .create(&alice, Some("finance"), "2025-06-18", answers)
            .unwrap();
        assert!(b.touch(&on_finance, &alice, Some("finance")).is_ok());
        for elsewhere in [None, Some("eng")] {
            assert!(
                a.touch(&on_finance, &alice, elsewhere).is_err(),
                "finance's session on {elsewhere:?}"
            );
            assert!(b.touch(&on_finance, &alice, elsewhere).is_err());
        }
        assert!(b.touch(&id, &alice, Some("finance")).is_err());
        // Tampering with any byte makes it unknown.
        let mut bytes = id.clone().into_bytes();
        let last = bytes.len() - 2;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(b.touch(&tampered, &alice, None).is_err());
        // Ended on A: B hears it and refuses it, even from memory.
        let ended = a.remove(&id, &alice, None).unwrap();
        b.ended_elsewhere(ended.hash, Some(ended.until));
        assert!(b.touch(&id, &alice, None).is_err());
    }

    #[test]
    fn a_caller_with_too_many_sessions_keeps_only_its_newest_in_memory() {
        let sessions = Sessions::ephemeral(Duration::from_secs(60), DAY, 10_000);
        let alice = Caller::new("alice", None).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        sessions
            .create(&bob, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        let first = sessions
            .create(&alice, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        for _ in 0..MAX_SESSIONS_PER_CALLER {
            sessions
                .create(&alice, None, "2025-11-25", ClientAnswers::default())
                .unwrap();
        }
        assert_eq!(
            sessions.len(),
            MAX_SESSIONS_PER_CALLER + 1,
            "alice's oldest made room, bob's stayed"
        );
        // Dropped from memory is not ended: it opens again from its id.
        assert!(sessions.touch(&first, &alice, None).is_ok());
    }

    #[test]
    fn a_session_ends_at_its_maximum_age_and_idle_ones_leave_memory() {
        let alice = Caller::new("alice", None).unwrap();
        let aged = Sessions::ephemeral(Duration::from_secs(60), Duration::ZERO, 10);
        let id = aged
            .create(&alice, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        assert!(matches!(
            aged.touch(&id, &alice, None),
            Err(McpError::SessionNotFound)
        ));
        let small = Sessions::ephemeral(Duration::from_secs(60), DAY, 1);
        let first = small
            .create(&alice, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        small
            .create(&alice, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        assert_eq!(small.len(), 1);
        let idle = Sessions::ephemeral(Duration::ZERO, DAY, 10);
        let id = idle
            .create(&alice, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        assert!(
            idle.touch(&id, &alice, None).is_ok(),
            "reopened from its id"
        );
        assert!(small.touch(&first, &alice, None).is_ok());
    }

    #[test]
    fn a_session_used_on_many_threads_at_once_is_one_session_kept_alive_by_its_latest_use() {
        let clock = Arc::new(elicitation_store::ManualClock::stopped_now());
        let idle = Duration::from_secs(60);
        let sessions = Arc::new(Sessions::ephemeral(idle, DAY, 100).with_clock(clock.clone()));
        let alice = Caller::new("alice", None).unwrap();
        let id = sessions
            .create(&alice, None, "2025-11-25", ClientAnswers::default())
            .unwrap();
        let first = sessions.touch(&id, &alice, None).unwrap();
        // Each minute less a second, eight threads use it at once; it never goes idle.
        for _ in 0..5 {
            clock.advance_std(idle - Duration::from_secs(1));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let (sessions, alice, id) = (sessions.clone(), alice.clone(), id.clone());
                    std::thread::spawn(move || {
                        let mut last = sessions.touch(&id, &alice, None).unwrap();
                        for _ in 0..200 {
                            last = sessions.touch(&id, &alice, None).unwrap();
                        }
                        last
                    })
                })
                .collect();
            for handle in handles {
                let session = handle.join().unwrap();
                assert!(
                    Arc::ptr_eq(session.channel(), first.channel()),
                    "the same session in memory, not one opened again"
                );
            }
        }
        assert_eq!(sessions.len(), 1);
        // A level set here (or told by another instance) is what every handle reads.
        sessions.set_log_level_here(&id, 5);
        assert_eq!(first.log_level(), 5);
        // Past the idle timeout it leaves memory, and a use opens it again from its id: a
        // new session in memory (its stream state begins afresh), the same caller's.
        clock.advance_std(idle);
        let again = sessions.touch(&id, &alice, None).unwrap();
        assert!(!Arc::ptr_eq(again.channel(), first.channel()));
        assert_eq!(again.log_level(), 0);
        assert_eq!(sessions.len(), 1);
        let bob = Caller::new("bob", None).unwrap();
        assert!(matches!(
            sessions.touch(&id, &bob, None),
            Err(McpError::SessionNotFound)
        ));
    }

    #[test]
    fn a_session_opened_from_its_id_is_put_in_once_and_never_once_ended() {
        // What two requests that open one id from its seal, or one that opens it while
        // it is ended elsewhere, do at the point where they put it in memory.
        let sessions = Sessions::ephemeral(Duration::from_secs(60), DAY, 10);
        let alice = Caller::new("alice", None).unwrap();
        let answers = ClientAnswers::default();
        let id = sessions
            .create(&alice, None, "2025-11-25", answers)
            .unwrap();
        let ends_at = sessions.touch(&id, &alice, None).unwrap().0.ends_at;
        sessions.held_mut().clear();
        let open = || sessions.insert(id.clone(), (&alice, None), "2025-11-25", answers, ends_at);
        let first = open().unwrap();
        let second = open().unwrap();
        assert!(
            Arc::ptr_eq(first.channel(), second.channel()),
            "the second finds the first's, whose stream it would otherwise orphan"
        );
        assert_eq!(sessions.len(), 1);
        sessions.ended_elsewhere(token_hash(&id), None);
        assert_eq!(sessions.len(), 0);
        assert!(matches!(open(), Err(McpError::SessionNotFound)));
        assert_eq!(sessions.len(), 0, "an ended session is not put back");
    }

    #[test]
    fn a_forged_or_oversized_session_id_is_unknown() {
        let sessions = Sessions::ephemeral(Duration::from_secs(60), DAY, 10);
        let alice = Caller::new("alice", None).unwrap();
        for id in ["", "s1.", "s1.!!!", "deadbeef", &"s1.A".repeat(600)] {
            assert!(matches!(
                sessions.touch(id, &alice, None),
                Err(McpError::SessionNotFound)
            ));
        }
    }
}
