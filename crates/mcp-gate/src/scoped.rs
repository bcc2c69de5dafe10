//! The gateway seen through a virtual server's scope (`servers`): building the servers, and
//! what a scoped gateway offers.

use std::collections::BTreeMap;
use std::sync::Arc;

use gating_core::PolicyRule;

use crate::Gateway;
use crate::servers::VirtualServer;

impl Gateway {
    /// Serves these virtual servers beside the gateway's own endpoint, each with its rules
    /// (decided before the gateway's `[[policy]]`). Call it last: each server is this gateway
    /// as configured so far, seen through the server's scope.
    #[must_use]
    pub fn with_servers(mut self, servers: Vec<(VirtualServer, Vec<PolicyRule>)>) -> Self {
        let mut scoped = BTreeMap::new();
        for (server, rules) in servers {
            let mut gateway = self.clone();
            gateway.policy = self.policy.clone().with_rules_first(rules);
            gateway.policy_digest = gateway.policy.digest();
            gateway.server = Some(Arc::new(server));
            let name = gateway.server_name().unwrap_or_default().to_owned();
            scoped.insert(name, Arc::new(gateway));
        }
        self.servers = Arc::new(scoped);
        self
    }

    /// Virtual server `name`, as the gateway it is.
    pub fn server(&self, name: &str) -> Option<&Arc<Gateway>> {
        self.servers.get(name)
    }

    /// The virtual servers' names.
    pub fn server_names(&self) -> impl Iterator<Item = &str> {
        self.servers.keys().map(String::as_str)
    }

    /// The virtual server this gateway is, or `None` for the gateway's own endpoint.
    pub fn server_name(&self) -> Option<&str> {
        self.server.as_ref().map(|s| s.name.as_str())
    }

    /// The record of a decision no rule made (no rule, no policy digest), naming the server.
    pub(crate) fn unruled(&self) -> elicitation_store::PolicyRef {
        elicitation_store::PolicyRef {
            server: self.server_name().map(str::to_owned),
            ..elicitation_store::PolicyRef::default()
        }
    }

    /// The scope it serves (`None`: everything, the gateway's own endpoint).
    pub fn scope(&self) -> Option<&VirtualServer> {
        self.server.as_deref()
    }

    /// Whether this endpoint offers the tool or prompt `qualified` of `module`.
    pub(crate) fn offers(&self, module: &str, qualified: &str) -> bool {
        self.server
            .as_ref()
            .is_none_or(|s| s.offers(module, qualified))
    }

    /// Whether this endpoint offers module `module`'s resources.
    pub(crate) fn offers_resources_of(&self, module: &str) -> bool {
        self.server.as_ref().is_none_or(|s| s.offers_module(module))
    }
}
