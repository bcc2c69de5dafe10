//! What a configuration reload swaps: the gateway (its modules, policy, approver rules,
//! limits and metrics) and how callers are authenticated. Both are swapped whole; a request
//! takes a [`Snapshot`] when it begins and finishes on it, so a reload never changes a
//! request half-way.

use std::sync::{Arc, PoisonError, RwLock};

use elicitation_store::Clock;
use mcp_auth::Auth;
use mcp_gate::Gateway;

/// The reloadable state, shared by the MCP surface and the approvals page.
pub struct Live {
    /// One lock for both, so no request sees one reload's gateway with another's auth.
    now: RwLock<Snapshot>,
    /// When a reload happens (a token granted anew begins then).
    clock: Arc<dyn Clock>,
}

/// What one request is served with, from its start to its end.
#[derive(Clone)]
pub struct Snapshot {
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// How callers are authenticated.
    pub auth: Arc<Auth>,
}

impl Live {
    /// The state a service starts with; reloads read the time from `clock`.
    pub fn new(gateway: Arc<Gateway>, auth: Auth, clock: Arc<dyn Clock>) -> Self {
        Live {
            clock,
            now: RwLock::new(Snapshot {
                gateway,
                auth: Arc::new(auth),
            }),
        }
    }

    /// What a request begins with.
    pub fn snapshot(&self) -> Snapshot {
        self.now
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The gateway new requests are served with.
    pub fn gateway(&self) -> Arc<Gateway> {
        self.snapshot().gateway
    }

    /// How new requests are authenticated.
    pub fn auth(&self) -> Arc<Auth> {
        self.snapshot().auth
    }

    /// Swaps both: requests that begin from now on are served with `gateway` and
    /// authenticated by `auth`. The sign-ins `auth` grants anew end those made before it
    /// (`Auth::following`).
    pub fn swap(&self, gateway: Arc<Gateway>, auth: Auth) {
        let mut now = self.now.write().unwrap_or_else(PoisonError::into_inner);
        let auth = Arc::new(auth.following(&now.auth, self.clock.now()));
        *now = Snapshot { gateway, auth };
    }
}
