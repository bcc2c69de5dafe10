//! What crosses instances and sessions: the catalog's changes and modules' resource
//! updates passed to the sessions' streams, and what other instances tell of them.

use std::sync::Arc;

use mcp_wire::jsonrpc::{self};
use serde_json::{Value, json};

use crate::sessions::Sessions;
use mcp_gate::Gateway;

/// Passes the catalog's changes and modules' resource updates to the sessions' streams
/// (for as long as the sessions exist).
pub(super) fn notify_sessions(gateway: &Gateway, sessions: &Arc<Sessions>) {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = gateway.catalog_changes();
    let weak = Arc::downgrade(sessions);
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(()) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            for list in ["tools", "prompts", "resources"] {
                let method = format!("notifications/{list}/list_changed");
                sessions.notify_all(&jsonrpc::notification_bytes::<Value>(&method, None));
            }
        }
    });
    // A caller's own module instance logging outside any call: to that caller's sessions.
    let mut logs = gateway.registry().instance_logs();
    let weak = Arc::downgrade(sessions);
    tokio::spawn(async move {
        loop {
            let (who, params) = match logs.recv().await {
                Ok(message) => message,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            let Some(rank) = params
                .get("level")
                .and_then(Value::as_str)
                .and_then(mcp_wire::mcp::log_level_rank)
            else {
                continue;
            };
            let message = jsonrpc::notification_bytes("notifications/message", Some(&params));
            sessions.notify_caller(&who, rank, &message);
        }
    });
    let mut updates = gateway.resource_updates();
    let weak = Arc::downgrade(sessions);
    tokio::spawn(async move {
        loop {
            let update = match updates.recv().await {
                Ok(update) => update,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            let message = jsonrpc::notification_bytes(
                "notifications/resources/updated",
                Some(&json!({"uri": update.uri})),
            );
            sessions.notify_subscribers(&update, &message);
        }
    });
}

/// Applies what other instances tell about the sessions held here: a subscription made or
/// a log level set through them (for as long as the sessions exist); and the gate's own
/// notices (a tool definition decided elsewhere).
pub(super) fn follow_other_instances(
    store: Arc<dyn elicitation_store::Fleet>,
    live: Arc<mcp_http_kit::live::Live>,
    sessions: Arc<Sessions>,
    listeners: Arc<crate::listen::Listeners>,
) {
    use crate::sessions::SessionEvent;
    use tokio::sync::broadcast::error::RecvError;
    let Some(mut told) = store.broadcasts() else {
        return;
    };
    let weak = Arc::downgrade(&sessions);
    drop(sessions);
    tokio::spawn(async move {
        loop {
            let message = match told.recv().await {
                Ok(message) => message,
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "notices from other instances were dropped");
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let Some(sessions) = weak.upgrade() else {
                return;
            };
            if live.gateway().follow_fleet_notice(&message) {
                continue;
            }
            let Ok(event) = serde_json::from_str::<SessionEvent>(&message) else {
                continue;
            };
            match event {
                SessionEvent::Subscription { i, s, u, on } if i != sessions.instance() => {
                    let Some((id, session)) = sessions.by_hash(&s) else {
                        continue;
                    };
                    let gateway = live.gateway();
                    if session.channel().set_subscription(&u, on) != Ok(true)
                        || sessions.module_knows(&gateway, listeners.subscribed(&u), &u, &id)
                    {
                        continue;
                    }
                    if let Err(e) = gateway.subscribe_resource(session.caller(), &u, on).await {
                        tracing::info!(uri = %u, error = %e, "a subscription made on another instance could not be made here");
                    }
                }
                SessionEvent::LogLevel { i, s, r } if i != sessions.instance() => {
                    if let Some((id, _)) = sessions.by_hash(&s) {
                        sessions.set_log_level_here(&id, r);
                    }
                }
                _ => {}
            }
        }
    });
}

/// Tells the other instances sharing the store about a session (in the background; a
/// failure is logged: the other instances' streams then miss it).
pub(crate) fn tell_other_instances(
    store: &Arc<dyn elicitation_store::Fleet>,
    event: &crate::sessions::SessionEvent,
) {
    if store.broadcasts().is_none() {
        return;
    }
    let Ok(message) = serde_json::to_string(event) else {
        return;
    };
    let store = store.clone();
    tokio::spawn(async move {
        if let Err(e) = store.broadcast(&message).await {
            tracing::warn!(error = %e, "other instances could not be told about a session");
        }
    });
}
