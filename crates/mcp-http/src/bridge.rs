//! A module's requests during a 2026-07-28 client's call, asked through multi round-trip
//! requests: the call is driven by the client's request; when its module asks (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`), the client's request is answered
//! `input_required` with the module's request as its one input request and a
//! `requestState` naming the suspended call; the client's retry carries the answer, which
//! goes to the module, and the call goes on — to its result or the next question.
//!
//! The module's call stays open in this process meanwhile (a legacy module cannot be asked
//! later), so the state is a handle to this process's memory, not a sealed token: 32 random
//! bytes, bound to the caller and the tool, usable once, forgotten (and the call cancelled)
//! after [`SUSPEND_TIMEOUT`] (pruned whenever a call is suspended or resumed). With several gateway instances, the retry must reach the
//! instance that holds the call; elsewhere it is refused as an invalid state (`-32602`)
//! and the client starts the call again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use elicitation_store::{Caller, Clock};
use mcp_wire::ResultBody;
use mcp_wire::jsonrpc::ErrorObject;
use mcp_wire::tools::{InputRequest, InputRequiredResult};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::answers::ClientAnswers;
use crate::relay::ClientRelay;
use mcp_auth::Principal;
use mcp_http_kit::error::McpError;
use mcp_upstream::registry::ToolEntry;

/// The prefix of a bridged call's `requestState`.
pub(crate) const STATE_PREFIX: &str = "mcp-gateway-bridge-";
/// How long a suspended call waits for the client's retry.
pub(crate) const SUSPEND_TIMEOUT: Duration = Duration::from_secs(600);
/// The key of the one input request of a bridged call's `input_required`.
const INPUT_KEY: &str = "input";
/// Most suspended calls of one caller (its own oldest is cancelled to make room).
const MAX_SUSPENDED_PER_CALLER: usize = 64;
/// Most suspended calls at once (beyond, a module's question is refused).
const MAX_SUSPENDED: usize = 10_000;

/// A module's request waiting for the client.
pub(crate) struct Asked {
    method: String,
    params: Option<Value>,
    reply: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// Asks a 2026-07-28 client: hands the request to the request that drives the call.
pub(crate) struct MrtrAsker {
    pub(crate) can: ClientAnswers,
    tx: mpsc::Sender<Asked>,
}

#[async_trait::async_trait]
impl crate::relay::Asker for MrtrAsker {
    fn can(&self, method: &str) -> bool {
        self.can.can(method)
    }

    /// Hands the request to the request that drives the call (the call's stream is not
    /// where a 2026-07-28 client is asked).
    async fn ask(
        &self,
        _queue: mpsc::Sender<Vec<u8>>,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, ErrorObject> {
        let (reply, answer) = oneshot::channel();
        let asked = Asked {
            method: method.to_owned(),
            params,
            reply,
        };
        let gone = || ErrorObject {
            code: mcp_wire::codes::INTERNAL_ERROR,
            message: format!("the client went away before answering {method}"),
            data: None,
        };
        self.tx.send(asked).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// A call in flight, and where its module's requests arrive. The call is a future polled
/// by whichever request drives it (no task of its own): dropped with `Running`, which
/// cancels its module call.
pub(crate) struct Running {
    call: std::pin::Pin<Box<dyn Future<Output = Result<ResultBody, McpError>> + Send>>,
    /// Where the module's questions arrive; `None` when the client can answer none (each is
    /// then answered by the relay without the client, and the call is never suspended).
    asks: Option<mpsc::Receiver<Asked>>,
    relay: Arc<ClientRelay>,
}

impl Running {
    /// An asker for the call's relay, and what `start` needs besides the relay; neither
    /// when the client can answer nothing (no channel is made for a question that cannot
    /// come).
    pub(crate) fn asker(can: ClientAnswers) -> (Option<MrtrAsker>, Option<mpsc::Receiver<Asked>>) {
        if !can.any() {
            return (None, None);
        }
        let (tx, asks) = mpsc::channel(1);
        (Some(MrtrAsker { can, tx }), Some(asks))
    }

    /// The call, ready to be driven.
    pub(crate) fn start(
        call: impl Future<Output = Result<ResultBody, McpError>> + Send + 'static,
        asks: Option<mpsc::Receiver<Asked>>,
        relay: Arc<ClientRelay>,
    ) -> Running {
        Running {
            call: Box::pin(call),
            asks,
            relay,
        }
    }
}

struct Suspended {
    principal: Arc<Principal>,
    tool: Arc<ToolEntry>,
    running: Running,
    asked: Asked,
    since: Instant,
}

/// The suspended calls of this process.
pub(crate) struct Bridges {
    suspended: Mutex<HashMap<String, Suspended>>,
    /// Where the suspended calls' ages are read.
    clock: Arc<dyn Clock>,
}

impl Bridges {
    /// No suspended calls yet; their ages read from `clock`.
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Bridges {
            suspended: Mutex::default(),
            clock,
        }
    }
}

impl Bridges {
    /// Runs `running` until it ends or its module asks; a question suspends it and answers
    /// `input_required`.
    pub(crate) async fn drive(
        self: &Arc<Self>,
        principal: Arc<Principal>,
        tool: Arc<ToolEntry>,
        mut running: Running,
    ) -> Result<ResultBody, McpError> {
        loop {
            let asked = loop {
                let Some(asks) = running.asks.as_mut() else {
                    return (&mut running.call).await;
                };
                tokio::select! {
                    biased;
                    Some(asked) = asks.recv() => {
                        // A question whose asker gave up (its call ended) needs no answer.
                        if !asked.reply.is_closed() {
                            break asked;
                        }
                    }
                    done = &mut running.call => return done,
                }
            };
            let token =
                mcp_random::hex_token::<32>().map_err(|e| McpError::Internal(e.to_string()))?;
            let state = format!("{STATE_PREFIX}{token}");
            let request = InputRequest {
                method: asked.method.clone().into(),
                params: asked.params.clone().unwrap_or_else(|| json!({})),
            };
            let result =
                serde_json::to_value(InputRequiredResult::one(INPUT_KEY, request, state.clone()))
                    .map_err(|e| McpError::Internal(format!("an input_required result: {e}")))?;
            let mut suspended = self
                .suspended
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = self.clock.instant();
            prune(&mut suspended, now);
            // A caller makes room among its own calls, never another caller's.
            let caller = &principal.caller;
            let oldest_own = suspended
                .iter()
                .filter(|(_, s)| s.principal.caller == *caller)
                .min_by_key(|(_, s)| s.since)
                .map(|(k, _)| k.clone());
            let own = suspended
                .values()
                .filter(|s| s.principal.caller == *caller)
                .count();
            if own >= MAX_SUSPENDED_PER_CALLER
                && let Some(oldest) = oldest_own
            {
                suspended.remove(&oldest);
            }
            if suspended.len() >= MAX_SUSPENDED {
                drop(suspended);
                let _ = asked.reply.send(Err(ErrorObject {
                    code: mcp_wire::codes::INTERNAL_ERROR,
                    message: "the gateway holds too many calls waiting for their clients".into(),
                    data: None,
                }));
                continue;
            }
            suspended.insert(
                state,
                Suspended {
                    principal,
                    tool,
                    running,
                    asked,
                    since: now,
                },
            );
            return Ok(result.into());
        }
    }

    /// Resumes the call `state` names for `caller` and `tool` with the client's answer
    /// (`inputResponses`): the answer goes to the module and the call goes on. A state that
    /// is not this caller's call of this tool, spent, or expired is `-32602`, and a call
    /// named by another caller is left as it is.
    pub(crate) fn resume(
        self: &Arc<Self>,
        caller: &Caller,
        tool: &str,
        state: &str,
        responses: Option<Map<String, Value>>,
    ) -> Result<Running, McpError> {
        let invalid = || McpError::InvalidParams("Invalid or expired requestState".into());
        let mut suspended = self
            .suspended
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Calls past their time are dropped first, which cancels their module calls (a
        // module waiting on a question nobody will answer holds its connection's requests).
        prune(&mut suspended, self.clock.instant());
        let fits = suspended
            .get(state)
            .is_some_and(|s| s.principal.caller == *caller && s.tool.qualified == tool);
        if !fits {
            return Err(invalid());
        }
        let resumed = suspended.remove(state).ok_or_else(invalid)?;
        drop(suspended);
        let answer = responses
            .and_then(|mut r| r.remove(INPUT_KEY))
            .ok_or_else(|| ErrorObject {
                code: mcp_wire::codes::INVALID_PARAMS,
                message: format!("the client gave no answer to {}", resumed.asked.method),
                data: None,
            });
        let _ = resumed.asked.reply.send(answer);
        Ok(resumed.running)
    }
}

/// Drops the suspended calls older than [`SUSPEND_TIMEOUT`] at `now` (cancelling them).
fn prune(suspended: &mut HashMap<String, Suspended>, now: Instant) {
    suspended.retain(|_, s| now.saturating_duration_since(s.since) < SUSPEND_TIMEOUT);
}

impl Running {
    /// The relay of the call (its messages go to the request that resumes it).
    pub(crate) fn relay(&self) -> &Arc<ClientRelay> {
        &self.relay
    }
}
