//! Virtual servers (`[[servers]]`): a team's bundle of tools, served at an endpoint of its own
//! with its own catalog, rules and records. A server is the gateway seen through a scope: the
//! same modules, store and limits, with only the tools (and prompts, and whole modules'
//! resources) the server offers, its own rules decided before the gateway's, and every hold
//! and record naming it. A tool the server does not offer is, there, a tool that does not
//! exist: not listed, and a call of it is an unknown tool, however it arrives (by name, in a
//! batch, as a task, by a confirmation asked elsewhere — which is bound to its server).

use mcp_auth::Principal;

use crate::groups::GroupsFrom;

/// One `[[servers]]` entry: what it offers and who may connect to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualServer {
    /// Its name, the last segment of its path (`/mcp/{name}`): lowercase letters, digits,
    /// `-` and `_`, at most 64.
    pub name: String,
    /// The tools it offers, as rules name them: a qualified name, or a prefix ending in `*`
    /// (`fs__read_*`). Prompts, named like tools, are offered by the same patterns.
    pub tools: Vec<String>,
    /// The modules it offers whole: every tool and prompt, and their resources.
    pub modules: Vec<String>,
    /// Who may connect: every one of these scopes …
    pub scopes: Vec<String>,
    /// … and, when any are named, membership of at least one of these groups.
    pub groups: Vec<String>,
    /// Whose word that someone is in one of `groups` counts.
    pub groups_from: GroupsFrom,
}

/// Why a name is not a server's.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "server name {name:?} must be 1 to 64 lowercase letters, digits, '-' or '_', beginning with a letter or digit"
        ))
    }
}

impl VirtualServer {
    /// Whether it offers the tool or prompt `qualified` of module `module`.
    pub fn offers(&self, module: &str, qualified: &str) -> bool {
        self.offers_module(module)
            || self
                .tools
                .iter()
                .any(|pattern| gating_core::covers(pattern, qualified))
    }

    /// Whether it offers module `module` whole (its resources too).
    pub fn offers_module(&self, module: &str) -> bool {
        self.modules.iter().any(|m| m == module)
    }

    /// Whether `principal` may connect, or what it lacks.
    pub fn admits(&self, principal: &Principal) -> Result<(), String> {
        if let Some(missing) = self
            .scopes
            .iter()
            .find(|s| !principal.scopes.contains(s.as_str()))
        {
            return Err(format!("it needs the scope {missing}"));
        }
        if self.groups.is_empty() {
            return Ok(());
        }
        let member = self.groups.iter().any(|group| {
            principal
                .groups
                .contains(&self.groups_from.qualify(group, &principal.caller))
        });
        if member {
            Ok(())
        } else {
            Err(format!(
                "it is for members of {}",
                self.groups
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(tools: &[&str], modules: &[&str]) -> VirtualServer {
        VirtualServer {
            name: "finance".into(),
            tools: tools.iter().map(|s| (*s).to_owned()).collect(),
            modules: modules.iter().map(|s| (*s).to_owned()).collect(),
            scopes: Vec::new(),
            groups: Vec::new(),
            groups_from: GroupsFrom::Configured,
        }
    }

    #[test]
    fn a_server_offers_its_patterns_and_its_whole_modules_and_nothing_else() {
        let s = server(&["ledger__read_*", "fs__stat"], &["books"]);
        assert!(s.offers("ledger", "ledger__read_entries"));
        assert!(s.offers("fs", "fs__stat"));
        assert!(s.offers("books", "books__anything"));
        assert!(!s.offers("ledger", "ledger__write_entry"));
        assert!(!s.offers("fs", "fs__stat_all"), "a name is not a prefix");
        assert!(!s.offers("fs", "fs__delete"));
        assert!(s.offers_module("books") && !s.offers_module("ledger"));
    }

    #[test]
    fn names_are_path_segments_only() {
        for ok in ["finance", "eng-2", "a", "team_x"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Finance",
            "../x",
            "a/b",
            "-x",
            "x.y",
            &"a".repeat(65),
            "fin ance",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn who_may_connect_needs_every_scope_and_one_group_of_the_callers_tenant() {
        let mut s = server(&["*"], &[]);
        s.scopes = vec!["mcp:tools".into()];
        s.groups = vec!["finance".into(), "audit".into()];
        let caller = elicitation_store::Caller::new("ann", Some("acme".into())).unwrap();
        let mut ann = Principal::authenticated(caller, &[]);
        assert!(s.admits(&ann).unwrap_err().contains("mcp:tools"));
        ann.scopes.insert("mcp:tools".into());
        assert!(s.admits(&ann).unwrap_err().contains("finance"));
        // The group of another tenant is not this caller's tenant's group.
        ann.groups.insert("finance#other".into());
        assert!(s.admits(&ann).is_err());
        ann.groups.insert("audit#acme".into());
        assert!(s.admits(&ann).is_ok());
    }
}
