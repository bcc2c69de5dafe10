//! The `Module` trait for an HTTP module: calls, lists, reads and subscriptions over
//! Streamable HTTP in the module's era.

use crate::module::CallLink;
use crate::rpc;
use crate::{Module, ModuleError, ToolCall};
use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::Full;
use mcp_wire::CallToolParams;
use mcp_wire::headers::{MCP_PROTOCOL_VERSION, MCP_SESSION_ID, param_header_values};
use mcp_wire::tools::ForwardParams;
use serde_json::Value;
use serde_json::value::RawValue;
use std::time::Duration;
use tokio::sync::broadcast;

use super::*;
use std::sync::atomic::Ordering;

#[async_trait]
impl Module for HttpModule {
    fn credential_kind(&self) -> Option<&'static str> {
        self.link.credentials.as_ref().map(|c| c.kind())
    }

    async fn list_tools(&self) -> Result<Vec<Value>, ModuleError> {
        rpc::list_all(&self.config.name, "tools", |params| {
            Box::pin(self.request("tools/list", params, None, &[], None))
        })
        .await
    }

    async fn list_prompts(&self) -> Result<Vec<Value>, ModuleError> {
        self.era().await?;
        if !self.offers.includes("prompts") {
            return Ok(Vec::new());
        }
        rpc::none_if_unoffered(
            rpc::list_all(&self.config.name, "prompts", |params| {
                Box::pin(self.request("prompts/list", params, None, &[], None))
            })
            .await,
        )
    }

    async fn get_prompt(&self, params: CallToolParams) -> Result<Box<RawValue>, ModuleError> {
        let name = params.name.clone();
        self.request("prompts/get", params, Some(&name), &[], None)
            .await
    }

    async fn list_resources(&self) -> Result<Vec<Value>, ModuleError> {
        self.era().await?;
        if !self.offers.includes("resources") {
            return Ok(Vec::new());
        }
        rpc::none_if_unoffered(
            rpc::list_all(&self.config.name, "resources", |params| {
                Box::pin(self.request("resources/list", params, None, &[], None))
            })
            .await,
        )
    }

    async fn list_resource_templates(&self) -> Result<Vec<Value>, ModuleError> {
        self.era().await?;
        if !self.offers.includes("resources") {
            return Ok(Vec::new());
        }
        rpc::none_if_unoffered(
            rpc::list_all(&self.config.name, "resourceTemplates", |params| {
                Box::pin(self.request("resources/templates/list", params, None, &[], None))
            })
            .await,
        )
    }

    async fn read_resource(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        let uri = params.str("uri").unwrap_or_default().to_owned();
        self.request("resources/read", params, Some(&uri), &[], None)
            .await
    }

    fn stateless(&self) -> bool {
        matches!(self.known_era(), Some(Era::Modern))
    }

    async fn task_request(
        &self,
        method: &'static str,
        params: Value,
        relay: Option<Arc<dyn crate::Relay>>,
    ) -> Result<Box<RawValue>, ModuleError> {
        let mut params = ForwardParams(match params {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        });
        let link = relay.map(CallLink::plain);
        // A 2026-07-28 request about a task is routed by its id (`Mcp-Name`).
        let task_id = params.str("taskId").map(str::to_owned);
        self.request_with(method, &mut params, task_id.as_deref(), &[], link.as_ref())
            .await
    }

    fn routes_by_request(&self) -> bool {
        true
    }

    fn runs_modern_tasks(&self) -> bool {
        matches!(self.known_era(), Some(Era::Modern))
            && self.offers.extends(mcp_wire::tasks::TASKS_EXTENSION)
    }

    fn generation(&self) -> u64 {
        self.sessions.load(Ordering::Relaxed)
    }

    fn speaks_both(&self) -> bool {
        // Reached at 2026-07-28 by its own choice (`era = "auto"`); whether it also answers
        // the 2025 handshake is found out by its twin.
        self.config.era == ModuleEra::Auto && matches!(self.known_era(), Some(Era::Modern))
    }

    async fn legacy_twin(&self) -> Result<Arc<dyn Module>, ModuleError> {
        let config = HttpConfig {
            era: ModuleEra::Legacy,
            ..self.config.clone()
        };
        let twin = HttpModule::new(config).map_err(|reason| self.unavailable(reason))?;
        twin.era().await?;
        Ok(Arc::new(twin))
    }

    fn log_messages(&self) -> Option<broadcast::Receiver<Value>> {
        Some(self.feeds.logs.subscribe())
    }

    fn tools_changed(&self) -> Option<broadcast::Receiver<()>> {
        Some(self.feeds.changed.subscribe())
    }

    fn resource_updates(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.feeds.updated.subscribe())
    }

    async fn shutdown(&self) {
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(listener) = listener {
            listener.abort();
        }
        // A legacy session is ended at the module (2025-11-25 clients SHOULD), so an idle
        // caller's upstream session does not linger there.
        if let Some(Era::Legacy {
            session: Some(session),
            version,
        }) = self.known_era()
        {
            let mut headers = self.headers();
            headers.remove(header::CONTENT_TYPE);
            headers.insert(MCP_SESSION_ID, session);
            headers.insert(MCP_PROTOCOL_VERSION, version);
            let mut request = Request::new(Full::new(Bytes::new()));
            *request.method_mut() = Method::DELETE;
            *request.uri_mut() = self.config.url.clone();
            *request.headers_mut() = headers;
            let _ = tokio::time::timeout(Duration::from_secs(5), self.link.request(request)).await;
        }
    }

    async fn subscribe_resource(&self, uri: &str, subscribe: bool) -> Result<(), ModuleError> {
        if matches!(self.era().await?, Era::Modern) {
            return self.listen_for(uri, subscribe).await;
        }
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let mut params = serde_json::Map::new();
        params.insert("uri".into(), Value::String(uri.to_owned()));
        self.request(method, ForwardParams(params), None, &[], None)
            .await
            .map(drop)
    }

    async fn set_log_level(&self, level: &str) -> Result<(), ModuleError> {
        // A 2026-07-28 module has no logging/setLevel: each request carries its level.
        if matches!(self.era().await?, Era::Modern) || !self.offers.includes("logging") {
            return Ok(());
        }
        let params = ForwardParams(rpc::level_params(level));
        self.request("logging/setLevel", params, None, &[], None)
            .await
            .map(drop)
    }

    async fn complete(&self, params: ForwardParams) -> Result<Box<RawValue>, ModuleError> {
        self.request("completion/complete", params, None, &[], None)
            .await
    }

    async fn call_tool(&self, call: ToolCall<'_>) -> Result<Box<RawValue>, ModuleError> {
        let name = call.params.name.clone();
        // Arguments are read only for a tool that mirrors some into headers.
        let mirrored = if call.mirrored.is_empty() {
            Vec::new()
        } else {
            // Read by the gateway already (it refuses arguments it cannot read for such a
            // tool); unreadable here would send no mirrored header, which the module refuses.
            let arguments = call.params.arguments.as_ref().and_then(|a| a.to_map().ok());
            param_header_values(call.mirrored, arguments.as_ref())
        };
        let mut params = call.params;
        // Progress arrives on the call's own stream: the client's token is sent as it is.
        let link = call
            .relay
            .map(|relay| CallLink::new(relay, &mut params, None));
        // The module's era is the module's business: the gateway checks the result's
        // resultType (whatever the module) before passing it on.
        let mut result = self
            .request_with(
                "tools/call",
                &mut params,
                Some(&name),
                &mirrored,
                link.as_ref(),
            )
            .await?;
        // A 2026-07-28 module that needs input answers `input_required`: its requests are
        // asked of the call's client (as a legacy module's would be) and the call is sent
        // again with the answers and the module's state, until it completes.
        let Some(link) = link else {
            return Ok(result);
        };
        // The rounds, and the client's answers in them, share the call's timeout.
        let rounds = async {
            for _ in 0..MAX_INPUT_ROUNDS {
                let Some((requests, state)) = input_required(&result) else {
                    return Ok(result);
                };
                if requests.len() > MAX_INPUT_REQUESTS {
                    return Err(self.protocol(format!(
                        "input_required with {} input requests; at most {MAX_INPUT_REQUESTS} are asked",
                        requests.len()
                    )));
                }
                let mut responses = serde_json::Map::new();
                for (key, request) in requests {
                    let method = request
                        .get("method")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    match link.ask(method, request.get("params").cloned()).await {
                        Ok(answer) => {
                            responses.insert(key, answer);
                        }
                        Err(error) => {
                            return Err(self.protocol(format!(
                                "its input request {method} could not be answered: {}",
                                error.message
                            )));
                        }
                    }
                }
                params.input_responses = Some(responses);
                params.request_state = state;
                result = self
                    .request_with(
                        "tools/call",
                        &mut params,
                        Some(&name),
                        &mirrored,
                        Some(&link),
                    )
                    .await?;
            }
            Ok(result)
        };
        tokio::time::timeout(self.config.call_timeout, rounds)
            .await
            .unwrap_or_else(|_| {
                Err(ModuleError::Timeout {
                    module: self.config.name.clone(),
                    seconds: self.config.call_timeout.as_secs(),
                })
            })
    }
}
