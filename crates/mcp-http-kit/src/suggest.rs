//! Suggestions that turn repeated approvals into a rule (issue 50): where a person approved
//! every one of many calls of a tool whose arguments share a shape — a path under one
//! folder, a value from a small set — the `[[policy]]` rule (a `when`) that would have let
//! them run, with how many approved calls it covers and how many declined or unanswered
//! ones it would have let through too. A suggestion is only ever shown: the operator copies
//! the rule, nothing applies it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// Fewest approved calls of a tool before a rule is suggested for it.
pub const MIN_APPROVED: usize = 5;
/// Most distinct values of an argument a suggested `in [...]` lists.
const MAX_VALUES: usize = 5;

/// One answered call: its tool, its arguments, whether a person approved it.
#[derive(Debug, Clone)]
pub struct Answered {
    /// The qualified tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// Approved (`false`: declined, or left to expire).
    pub approved: bool,
}

/// `text` as a CEL string literal (single-quoted, its backslashes and quotes escaped, its
/// control characters as escapes): an agent's path cannot end the string early.
fn cel_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// The folder every path of `paths` is under (ending in `/`), if it is more than the root.
fn common_folder<'a>(paths: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut paths = paths.into_iter();
    let first = paths.next()?;
    let mut prefix: &str = &first[..=first.rfind('/')?];
    for path in paths {
        while !path.starts_with(prefix) {
            let shorter = prefix[..prefix.len() - 1].rfind('/')?;
            prefix = &prefix[..=shorter];
        }
    }
    // A path that climbs (`..`) is not under the folder it names.
    (prefix.len() > 1 && !prefix.contains("/../") && !prefix.ends_with("/.."))
        .then(|| prefix.to_owned())
}

/// CEL's reserved words: never a field after a dot.
const CEL_RESERVED: [&str; 21] = [
    "as",
    "break",
    "const",
    "continue",
    "else",
    "false",
    "for",
    "function",
    "if",
    "import",
    "in",
    "let",
    "loop",
    "package",
    "namespace",
    "null",
    "return",
    "true",
    "var",
    "void",
    "while",
];

/// An argument's name as CEL reads it (`args.path`, or `args['a-b']` when it is not an
/// identifier, or is a reserved word).
fn cel_field(name: &str) -> String {
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !CEL_RESERVED.contains(&name);
    if identifier {
        format!("args.{name}")
    } else {
        format!("args[{}]", cel_string(name))
    }
}

/// The conditions every one of `calls` (a tool's approved arguments) meets, one per string
/// argument they all have: under a common folder, or one of a few values.
fn conditions(calls: &[&Value]) -> Vec<(String, Condition)> {
    let mut names: Option<BTreeSet<&String>> = None;
    for call in calls {
        let Some(map) = call.as_object() else {
            return Vec::new();
        };
        let strings: BTreeSet<&String> = map
            .iter()
            .filter(|(_, v)| v.is_string())
            .map(|(k, _)| k)
            .collect();
        names = Some(match names {
            None => strings,
            Some(seen) => seen.intersection(&strings).copied().collect(),
        });
    }
    let mut out = Vec::new();
    for name in names.unwrap_or_default() {
        let values: Vec<&str> = calls
            .iter()
            .filter_map(|c| c.get(name).and_then(Value::as_str))
            .collect();
        let distinct: BTreeSet<&str> = values.iter().copied().collect();
        if values.iter().all(|v| v.starts_with('/'))
            && let Some(folder) = common_folder(values.iter().copied())
        {
            out.push((name.clone(), Condition::Under(folder)));
        } else if distinct.len() <= MAX_VALUES && distinct.len() < values.len() {
            out.push((
                name.clone(),
                Condition::OneOf(distinct.into_iter().map(str::to_owned).collect()),
            ));
        }
    }
    out
}

/// What a suggested rule asks of one argument.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    /// A path under this folder (ending in `/`).
    Under(String),
    /// One of these values.
    OneOf(Vec<String>),
}

impl Condition {
    fn holds(&self, value: Option<&Value>) -> bool {
        let Some(value) = value.and_then(Value::as_str) else {
            return false;
        };
        match self {
            Condition::Under(folder) => {
                value.starts_with(folder.as_str())
                    && !value.contains("/../")
                    && !value.ends_with("/..")
            }
            Condition::OneOf(values) => values.iter().any(|v| v == value),
        }
    }

    fn cel(&self, field: &str) -> String {
        match self {
            Condition::Under(folder) => format!(
                "{field}.startsWith({}) && !{field}.contains('/../') && !{field}.endsWith('/..')",
                cel_string(folder)
            ),
            Condition::OneOf(values) => {
                let listed: Vec<String> = values.iter().map(|v| cel_string(v)).collect();
                format!("{field} in [{}]", listed.join(", "))
            }
        }
    }
}

/// The shape many approved calls share: a condition per argument that narrows.
struct Rule {
    conditions: Vec<(String, Condition)>,
}

impl Rule {
    /// The rule of `approved` (at least [`MIN_APPROVED`] calls' arguments), if their
    /// arguments share a shape.
    fn of(approved: &[&Value]) -> Option<Rule> {
        if approved.len() < MIN_APPROVED {
            return None;
        }
        let conditions = conditions(approved);
        (!conditions.is_empty()).then_some(Rule { conditions })
    }

    /// Whether a call with `arguments` has the shape.
    fn covers(&self, arguments: &Value) -> bool {
        self.conditions
            .iter()
            .all(|(name, condition)| condition.holds(arguments.get(name)))
    }

    /// The shape as a CEL `when` over `args`.
    fn when(&self) -> String {
        let when: Vec<String> = self
            .conditions
            .iter()
            .map(|(name, condition)| condition.cel(&cel_field(name)))
            .collect();
        when.join(" && ")
    }
}

/// The `when` of the shape that every one of `approved` (the arguments of a caller's calls
/// of one tool that a person approved lately) shares, if `held` (a call of the same tool
/// waiting now) has it too: what a one-click standing grant beside the held call would allow
/// — for a while, only that caller's calls of the tool, only where the `when` holds.
pub fn covering_when(approved: &[&Value], held: &Value) -> Option<String> {
    Rule::of(approved)
        .filter(|rule| rule.covers(held))
        .map(|rule| rule.when())
}

/// The suggestions for `answered` (one caller's or one tenant's answered calls): per tool
/// with at least [`MIN_APPROVED`] approved calls whose arguments share a shape, the rule that
/// would have let every approved one run, with what else it would have let through.
pub fn suggestions(answered: &[Answered]) -> Vec<Value> {
    let mut by_tool: BTreeMap<&str, Vec<&Answered>> = BTreeMap::new();
    for call in answered {
        by_tool.entry(call.tool.as_str()).or_default().push(call);
    }
    let mut out = Vec::new();
    for (tool, calls) in by_tool {
        let approved: Vec<&Value> = calls
            .iter()
            .filter(|c| c.approved)
            .map(|c| &c.arguments)
            .collect();
        if approved.len() < MIN_APPROVED {
            continue;
        }
        let Some(rule) = Rule::of(&approved) else {
            continue;
        };
        let conditions = &rule.conditions;
        let covers = |arguments: &Value| rule.covers(arguments);
        let refused_covered = calls
            .iter()
            .filter(|c| !c.approved && covers(&c.arguments))
            .count();
        // What the rule leaves open: every argument an approved call carried that no
        // condition narrows (it allows any value of those).
        let narrowed: BTreeSet<&String> = conditions.iter().map(|(name, _)| name).collect();
        let unconstrained: BTreeSet<&String> = approved
            .iter()
            .filter_map(|a| a.as_object())
            .flat_map(|m| m.keys())
            .filter(|k| !narrowed.contains(k))
            .collect();
        let when = rule.when();
        let policy = format!(
            "[[policy]]\ntool = {}\nwhen = {}\ngate = \"allow\"\n",
            toml_string(tool),
            toml_string(&when)
        );
        out.push(json!({
            "tool": tool,
            "approved": approved.len(),
            "when": when,
            "policy": policy,
            "covers_approved": approved.iter().filter(|a| covers(a)).count(),
            "also_allows_refused": refused_covered,
            "unconstrained": unconstrained,
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(path: &str, mode: &str, approved: bool) -> Answered {
        Answered {
            tool: "fs__write_file".into(),
            arguments: json!({"path": path, "mode": mode, "content": format!("text {path}")}),
            approved,
        }
    }

    #[test]
    fn a_held_call_of_the_shape_people_approved_is_offered_its_when() {
        let approved: Vec<Value> = (0..6)
            .map(|i| json!({"path": format!("/srv/notes/{i}.txt"), "content": format!("text {i}")}))
            .collect();
        let refs: Vec<&Value> = approved.iter().collect();
        let inside = json!({"path": "/srv/notes/7.txt", "content": "y"});
        let outside = json!({"path": "/etc/passwd", "content": "y"});
        let when = covering_when(&refs, &inside).unwrap();
        assert!(when.contains("startsWith('/srv/notes/')"), "{when}");
        assert_eq!(
            covering_when(&refs, &outside),
            None,
            "a call of another shape"
        );
        assert_eq!(covering_when(&refs[..4], &inside), None, "too few approved");
    }

    #[test]
    fn forty_approved_writes_under_one_folder_become_a_rule_for_that_folder() {
        let mut calls: Vec<Answered> = (0..40)
            .map(|n| {
                answered(
                    &format!("/srv/notes/2026/day-{n}.md"),
                    if n % 2 == 0 { "create" } else { "append" },
                    true,
                )
            })
            .collect();
        calls.push(answered("/srv/notes/../etc/passwd", "create", false));
        calls.push(answered("/srv/other/x.md", "create", false));
        let found = suggestions(&calls);
        assert_eq!(found.len(), 1, "{found:?}");
        let s = &found[0];
        assert_eq!(s["approved"], 40);
        assert_eq!(s["covers_approved"], 40);
        assert_eq!(s["also_allows_refused"], 0, "{s}");
        assert_eq!(
            s["when"],
            "args.mode in ['append', 'create'] && args.path.startsWith('/srv/notes/2026/') && !args.path.contains('/../') && !args.path.endsWith('/..')"
        );
        assert_eq!(
            s["unconstrained"],
            json!(["content"]),
            "any content is allowed: {s}"
        );
        // The snippet reads back as the rule it shows.
        let rule: toml::Value = toml::from_str(s["policy"].as_str().unwrap()).unwrap();
        assert_eq!(rule["policy"][0]["when"].as_str(), s["when"].as_str());
        assert_eq!(rule["policy"][0]["gate"].as_str(), Some("allow"));
    }

    #[test]
    fn too_few_or_shapeless_calls_suggest_nothing_and_odd_text_stays_inside_its_string() {
        let few: Vec<Answered> = (0..4)
            .map(|n| answered(&format!("/srv/a/{n}"), "create", true))
            .collect();
        assert!(suggestions(&few).is_empty());
        // Everywhere under the root: no folder to name.
        let scattered: Vec<Answered> = ["/etc/a", "/srv/b", "/home/c", "/tmp/d", "/var/e"]
            .iter()
            .map(|p| Answered {
                tool: "fs__delete".into(),
                arguments: json!({"path": p}),
                approved: true,
            })
            .collect();
        assert!(suggestions(&scattered).is_empty());
        let quoted: Vec<Answered> = (0..5)
            .map(|n| Answered {
                tool: "fs__delete".into(),
                arguments: json!({"path": format!("/srv/it's \\ 'odd'/{n}")}),
                approved: true,
            })
            .collect();
        let found = suggestions(&quoted);
        assert_eq!(
            found[0]["when"],
            "args.path.startsWith('/srv/it\\'s \\\\ \\'odd\\'/') && !args.path.contains('/../') && !args.path.endsWith('/..')"
        );
        let when = gating_core::When::compile(found[0]["when"].as_str().unwrap()).unwrap();
        let args = json!({"path": "/srv/it's \\ 'odd'/9"});
        let facts = gating_core::CallFacts {
            tool: "fs__delete",
            module: "fs",
            args: &args,
            caller: "alice",
            groups: &[],
            hints: gating_core::HintSource::Untrusted.effective(),
            flow: None,
        };
        assert_eq!(when.matches(&facts), Ok(true));
    }

    #[test]
    fn a_reserved_word_is_a_bracketed_field_and_a_climbing_path_is_not_under_its_folder() {
        assert_eq!(cel_field("in"), "args['in']");
        assert_eq!(cel_field("path"), "args.path");
        let under = Condition::Under("/srv/notes/".into());
        assert!(!under.holds(Some(&json!("/srv/notes/.."))));
        assert!(!under.holds(Some(&json!("/srv/notes/a/../../etc"))));
        assert!(under.holds(Some(&json!("/srv/notes/a.md"))));
    }

    #[test]
    fn a_rule_that_would_have_let_a_declined_call_through_says_so() {
        let mut calls: Vec<Answered> = (0..6)
            .map(|n| answered(&format!("/srv/notes/{n}.md"), "create", true))
            .collect();
        calls.push(answered("/srv/notes/secret.md", "create", false));
        let found = suggestions(&calls);
        assert_eq!(found[0]["also_allows_refused"], 1, "{:?}", found);
    }
}
