//! Flow labels and the lethal-trifecta rule: what a tool's calls bring into a conversation
//! (untrusted content, private data) or take out of it (data sent out), the trail of what a
//! caller's calls touched, and the rule that holds a call sending data out from a flow that
//! holds both untrusted content and private data.
//!
//! Pure: the labels come from the operator's `[[flow.tools]]` entries (the first whose
//! pattern matches the tool gives its labels) or, failing that, from the tool's effective
//! hints (an open-world tool reads untrusted content and may send data out); the trail
//! (a [`Flow`]) is kept by whoever runs the gate, bounded here.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use time::OffsetDateTime;

use crate::EffectiveHints;
use crate::pattern::ToolPattern;

/// What a tool's calls do to a conversation's flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FlowLabel {
    /// Its results carry content from outside that may hold instructions (a web page, an
    /// issue, an email).
    Untrusted,
    /// Its results carry private data (a database, a file, a token).
    Private,
    /// Its calls send data out (a post, a message, a comment, a push, a fetched URL).
    SendsOut,
}

impl FlowLabel {
    /// Every label.
    pub const ALL: [FlowLabel; 3] = [
        FlowLabel::Untrusted,
        FlowLabel::Private,
        FlowLabel::SendsOut,
    ];

    /// Its configuration (and CEL) name.
    pub const fn label(self) -> &'static str {
        match self {
            FlowLabel::Untrusted => "untrusted",
            FlowLabel::Private => "private",
            FlowLabel::SendsOut => "sends_out",
        }
    }

    /// The label named `name`.
    pub fn from_label(name: &str) -> Option<FlowLabel> {
        FlowLabel::ALL.into_iter().find(|l| l.label() == name)
    }

    const fn bit(self) -> u8 {
        match self {
            FlowLabel::Untrusted => 1,
            FlowLabel::Private => 2,
            FlowLabel::SendsOut => 4,
        }
    }

    /// What a person is told a call of such a tool did.
    pub(crate) const fn told(self) -> &'static str {
        match self {
            FlowLabel::Untrusted => "read untrusted content",
            FlowLabel::Private => "read private data",
            FlowLabel::SendsOut => "sent data out",
        }
    }
}

/// A set of flow labels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FlowLabels(u8);

impl FlowLabels {
    /// No label.
    pub const NONE: FlowLabels = FlowLabels(0);

    /// The set of `labels`.
    pub fn of(labels: impl IntoIterator<Item = FlowLabel>) -> FlowLabels {
        FlowLabels(labels.into_iter().fold(0, |bits, l| bits | l.bit()))
    }

    /// Whether it has `label`.
    pub const fn has(self, label: FlowLabel) -> bool {
        self.0 & label.bit() != 0
    }

    /// Whether it has none.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Its labels, in [`FlowLabel::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = FlowLabel> {
        FlowLabel::ALL.into_iter().filter(move |l| self.has(*l))
    }

    /// Its labels' names.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(FlowLabel::label).collect()
    }
}

impl fmt::Display for FlowLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.names().join(", "))
    }
}

/// `[[flow.tools]]`: the labels of the tools a pattern names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRule {
    /// The tools it names (as policy rules name them).
    pub tool: ToolPattern,
    /// Their labels (none: the tool touches no flow, whatever its hints).
    pub labels: FlowLabels,
}

/// What the lethal-trifecta rule does with a call it matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TrifectaMode {
    /// Hold it for a person, with the trail (the default).
    #[default]
    Hold,
    /// Let it through, recording that it would have been held.
    Shadow,
    /// Nothing.
    Off,
}

impl TrifectaMode {
    /// The mode named `name` (`hold`, `shadow`, `off`).
    pub fn from_label(name: &str) -> Option<TrifectaMode> {
        match name {
            "hold" => Some(TrifectaMode::Hold),
            "shadow" => Some(TrifectaMode::Shadow),
            "off" => Some(TrifectaMode::Off),
            _ => None,
        }
    }

    /// Its configuration name.
    pub const fn label(self) -> &'static str {
        match self {
            TrifectaMode::Hold => "hold",
            TrifectaMode::Shadow => "shadow",
            TrifectaMode::Off => "off",
        }
    }
}

/// How long a caller's flow remembers what its calls touched, unless configured.
pub const DEFAULT_FLOW_WINDOW: Duration = Duration::from_secs(60 * 60);

/// The operator's flow configuration: the tools' labels and the trifecta rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowPolicy {
    /// The `[[flow.tools]]` entries, in order.
    pub rules: Vec<FlowRule>,
    /// What the lethal-trifecta rule does.
    pub trifecta: TrifectaMode,
    /// How long a touch stays in a caller's flow.
    pub window: Duration,
}

impl Default for FlowPolicy {
    fn default() -> Self {
        FlowPolicy {
            rules: Vec::new(),
            trifecta: TrifectaMode::Hold,
            window: DEFAULT_FLOW_WINDOW,
        }
    }
}

/// Where a tool's labels come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelSource {
    /// The `[[flow.tools]]` entry at this index.
    Rule(usize),
    /// The tool's effective hints (open-world: untrusted content, sends out).
    Hints,
}

impl FlowPolicy {
    /// The labels of `tool`, whose effective hints are `hints`, and where they come from.
    pub fn labels(&self, tool: &str, hints: EffectiveHints) -> (FlowLabels, LabelSource) {
        if let Some((index, rule)) = self
            .rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.tool.matches(tool))
        {
            return (rule.labels, LabelSource::Rule(index));
        }
        let labels = if hints.open_world {
            FlowLabels::of([FlowLabel::Untrusted, FlowLabel::SendsOut])
        } else {
            FlowLabels::NONE
        };
        (labels, LabelSource::Hints)
    }
}

/// One touch of a flow: a call of `tool` that brought `label` in, at `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touch {
    /// What it brought in.
    pub label: FlowLabel,
    /// The tool called (its qualified name).
    pub tool: String,
    /// When (the latest such call of that tool).
    pub at: OffsetDateTime,
}

/// Most tools remembered per label in one flow (the latest; a flood of calls of many
/// tools keeps the flow this size).
pub const MAX_SOURCES_PER_LABEL: usize = 8;

/// Most secrets remembered per flow (their fingerprints; the latest).
pub const MAX_SEEN: usize = 64;

/// A secret that reached the agent as it was, remembered by its keyed fingerprint only
/// (never the secret): a call that sends it out later is held, naming where it was read.
#[derive(Clone, PartialEq, Eq)]
pub struct Seen {
    /// The keyed fingerprint of the secret (its keeper's key; the value is not kept).
    pub fingerprint: [u8; 16],
    /// The tool whose result carried it.
    pub tool: String,
    /// When.
    pub at: OffsetDateTime,
}

impl fmt::Debug for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seen")
            .field("tool", &self.tool)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

/// What one caller's calls touched within the window: per label, the latest few tools that
/// brought it in, with when; and the fingerprints of the secrets its results showed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flow {
    touches: BTreeMap<FlowLabel, Vec<Touch>>,
    seen: Vec<Seen>,
    unreadable: bool,
}

/// The tool an unreadable flow names as its source.
pub const UNREADABLE_SOURCE: &str = "(the caller's flow, which could not be read)";

impl Flow {
    /// The flow of a caller whose flow could not be read (at `at`), taken as the worst: it
    /// holds untrusted content and private data (so the lethal-trifecta rule holds a call
    /// that sends out), and a `when` that reads it fails to evaluate (so a rule naming it
    /// keeps the gate shut) — [`Flow::is_unreadable`].
    pub fn unreadable(at: OffsetDateTime) -> Flow {
        let mut flow = Flow::default();
        flow.record(
            UNREADABLE_SOURCE,
            FlowLabels::of([FlowLabel::Untrusted, FlowLabel::Private]),
            at,
        );
        flow.unreadable = true;
        flow
    }

    /// Whether it stands for a flow that could not be read ([`Flow::unreadable`]).
    pub fn is_unreadable(&self) -> bool {
        self.unreadable
    }

    /// Records that a call of `tool` at `at` brought in `labels` (only untrusted content and
    /// private data are carried by a flow; sending out is what the rule judges).
    pub fn record(&mut self, tool: &str, labels: FlowLabels, at: OffsetDateTime) {
        for label in labels.iter().filter(|l| *l != FlowLabel::SendsOut) {
            let touches = self.touches.entry(label).or_default();
            touches.retain(|t| t.tool != tool);
            touches.push(Touch {
                label,
                tool: tool.to_owned(),
                at,
            });
            touches.sort_by_key(|t| t.at);
            if touches.len() > MAX_SOURCES_PER_LABEL {
                let excess = touches.len() - MAX_SOURCES_PER_LABEL;
                touches.drain(..excess);
            }
        }
    }

    /// Forgets what was touched (and seen) before `since`.
    pub fn forget_before(&mut self, since: OffsetDateTime) {
        for touches in self.touches.values_mut() {
            touches.retain(|t| t.at >= since);
        }
        self.touches.retain(|_, t| !t.is_empty());
        self.seen.retain(|s| s.at >= since);
    }

    /// Whether nothing was touched or seen.
    pub fn is_empty(&self) -> bool {
        self.touches.is_empty() && self.seen.is_empty()
    }

    /// Remembers that a result of `tool` at `at` showed the agent the secret whose keyed
    /// fingerprint is `fingerprint`.
    pub fn record_seen(&mut self, fingerprint: [u8; 16], tool: &str, at: OffsetDateTime) {
        self.seen.retain(|s| s.fingerprint != fingerprint);
        self.seen.push(Seen {
            fingerprint,
            tool: tool.to_owned(),
            at,
        });
        if self.seen.len() > MAX_SEEN {
            let excess = self.seen.len() - MAX_SEEN;
            self.seen.drain(..excess);
        }
    }

    /// Where the secret whose fingerprint is `fingerprint` was seen, if it was.
    pub fn seen(&self, fingerprint: &[u8; 16]) -> Option<&Seen> {
        self.seen.iter().find(|s| &s.fingerprint == fingerprint)
    }

    /// Whether any secret was seen.
    pub fn saw_secrets(&self) -> bool {
        !self.seen.is_empty()
    }

    /// The labels it holds.
    pub fn labels(&self) -> FlowLabels {
        FlowLabels::of(self.touches.keys().copied())
    }

    /// The tools that brought `label` in, oldest first.
    pub fn sources(&self, label: FlowLabel) -> impl Iterator<Item = &Touch> {
        self.touches.get(&label).into_iter().flatten()
    }

    /// The latest touch of every label, oldest first (the trail a person is shown: [`crate::flow_trail`]).
    pub fn trail(&self) -> Vec<&Touch> {
        let mut trail: Vec<&Touch> = self.touches.values().filter_map(|t| t.last()).collect();
        trail.sort_by_key(|t| t.at);
        trail
    }

    /// Whether the lethal trifecta holds for a call of a tool labelled `tool`: it sends
    /// data out, and the flow holds both untrusted content and private data.
    pub fn trifecta(&self, tool: FlowLabels) -> bool {
        let held = self.labels();
        tool.has(FlowLabel::SendsOut)
            && held.has(FlowLabel::Untrusted)
            && held.has(FlowLabel::Private)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn rule(tool: &str, labels: &[FlowLabel]) -> FlowRule {
        FlowRule {
            tool: ToolPattern::parse(tool),
            labels: FlowLabels::of(labels.iter().copied()),
        }
    }

    const OPEN: EffectiveHints = EffectiveHints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: true,
    };
    const CLOSED: EffectiveHints = EffectiveHints {
        open_world: false,
        ..OPEN
    };

    #[test]
    fn labels_come_from_the_first_entry_naming_the_tool_else_from_the_hints() {
        let policy = FlowPolicy {
            rules: vec![
                rule("db__*", &[FlowLabel::Private]),
                rule("web__fetch", &[]),
                rule("web__*", &[FlowLabel::Untrusted]),
            ],
            ..FlowPolicy::default()
        };
        assert_eq!(
            policy.labels("db__query", CLOSED),
            (FlowLabels::of([FlowLabel::Private]), LabelSource::Rule(0))
        );
        // An entry with no labels takes the hints' away.
        assert_eq!(
            policy.labels("web__fetch", OPEN),
            (FlowLabels::NONE, LabelSource::Rule(1))
        );
        assert_eq!(
            policy.labels("web__search", OPEN).0,
            FlowLabels::of([FlowLabel::Untrusted])
        );
        assert_eq!(
            policy.labels("mail__send", OPEN),
            (
                FlowLabels::of([FlowLabel::Untrusted, FlowLabel::SendsOut]),
                LabelSource::Hints
            )
        );
        assert_eq!(
            policy.labels("calc__add", CLOSED),
            (FlowLabels::NONE, LabelSource::Hints)
        );
    }

    #[test]
    fn the_trifecta_needs_all_three_and_the_trail_tells_them_in_order() {
        let send = FlowLabels::of([FlowLabel::SendsOut]);
        let mut flow = Flow::default();
        assert!(!flow.trifecta(send));
        flow.record(
            "web__fetch",
            FlowLabels::of([FlowLabel::Untrusted, FlowLabel::SendsOut]),
            datetime!(2026-12-05 10:02:11 UTC),
        );
        assert!(!flow.trifecta(send), "untrusted alone");
        assert_eq!(flow.labels(), FlowLabels::of([FlowLabel::Untrusted]));
        flow.record(
            "db__query",
            FlowLabels::of([FlowLabel::Private]),
            datetime!(2026-12-05 10:03:40 UTC),
        );
        assert!(flow.trifecta(send));
        assert!(
            !flow.trifecta(FlowLabels::of([FlowLabel::Private])),
            "a tool that sends nothing out"
        );
        assert_eq!(
            crate::flow_trail(&flow, "mail__send"),
            "In this conversation the agent read untrusted content with `web__fetch` at 10:02:11 UTC, then read private data with `db__query` at 10:03:40 UTC; now it wants to send data out with `mail__send`. Untrusted content may carry instructions that make an agent send private data away."
        );
        // Outside the window it is forgotten.
        flow.forget_before(datetime!(2026-12-05 10:03:00 UTC));
        assert!(!flow.trifecta(send));
        assert_eq!(flow.labels(), FlowLabels::of([FlowLabel::Private]));
    }

    #[test]
    fn a_flood_of_tools_keeps_a_flow_bounded_and_the_latest_sources() {
        let mut flow = Flow::default();
        let start = datetime!(2026-12-05 10:00:00 UTC);
        for i in 0..1000 {
            flow.record(
                &format!("t{i}"),
                FlowLabels::of([FlowLabel::Untrusted]),
                start + time::Duration::seconds(i),
            );
        }
        let sources: Vec<&str> = flow
            .sources(FlowLabel::Untrusted)
            .map(|t| t.tool.as_str())
            .collect();
        assert_eq!(sources.len(), MAX_SOURCES_PER_LABEL);
        assert_eq!(sources.last(), Some(&"t999"));
        // The same tool again moves to the end, once.
        flow.record(
            "t992",
            FlowLabels::of([FlowLabel::Untrusted]),
            start + time::Duration::seconds(2000),
        );
        let sources: Vec<&str> = flow
            .sources(FlowLabel::Untrusted)
            .map(|t| t.tool.as_str())
            .collect();
        assert_eq!(sources.len(), MAX_SOURCES_PER_LABEL);
        assert_eq!(sources.iter().filter(|t| **t == "t992").count(), 1);
        assert_eq!(sources.last(), Some(&"t992"));
    }

    #[test]
    fn seen_secrets_are_kept_by_fingerprint_bounded_and_forgotten_with_the_window() {
        let mut flow = Flow::default();
        let at = datetime!(2026-12-05 10:00:00 UTC);
        flow.record_seen([1; 16], "db__query", at);
        assert_eq!(
            flow.seen(&[1; 16]).map(|s| s.tool.as_str()),
            Some("db__query")
        );
        assert!(flow.seen(&[2; 16]).is_none());
        assert!(
            !format!("{flow:?}").contains("[1,"),
            "no fingerprint in Debug"
        );
        for i in 0..200u8 {
            flow.record_seen([i; 16], "t", at + time::Duration::seconds(i64::from(i)));
        }
        assert!(flow.seen.len() <= MAX_SEEN);
        flow.forget_before(at + time::Duration::seconds(1000));
        assert!(flow.is_empty());
    }

    #[test]
    fn a_tool_name_in_the_trail_cannot_hide_what_it_is() {
        let mut flow = Flow::default();
        let at = datetime!(2026-12-05 10:00:00 UTC);
        flow.record(
            "evil\u{202e}__fetch",
            FlowLabels::of([FlowLabel::Untrusted]),
            at,
        );
        flow.record("db__query", FlowLabels::of([FlowLabel::Private]), at);
        let text = crate::flow_trail(&flow, "x\u{200b}__send");
        assert!(
            text.contains("\\u202e") && text.contains("\\u200b"),
            "{text}"
        );
    }
}
