//! A policy rule's `when`: a CEL expression over the facts of one call, compiled when the
//! policy is loaded and evaluated for every call its rule's tool pattern matches.
//!
//! The expression sees `tool` (the qualified name), `module`, `args` (the call's arguments),
//! `caller` (the subject), `groups` (a list of strings) and `hints` (the effective
//! `readOnly`, `destructive`, `idempotent` and `openWorld`, as booleans).
//!
//! Evaluation is bounded: the source is at most [`MAX_SOURCE`] bytes nested at most
//! [`MAX_NESTING`] deep; the macros that build lists (`map`, `filter`) are refused, and a
//! macro may not run inside another, so the work is at most linear in what the expression
//! reads times its own size; and the arguments it reads (only the fields it names, when it
//! names `args` only as `args.field`) are at most [`MAX_ARGS_BYTES`] of JSON nested at most
//! [`MAX_ARGS_DEPTH`] deep. Past a bound evaluation fails, and a failure is never an open
//! gate: the caller decides what a failure means for its rule (`crate::policy`).
//!
//! Comparisons are strict about types. CEL's `==`, `!=` and `in` answer `false` for values of
//! different types, so `args.force == true` would not match `{"force": "true"}`, `1` or
//! `"yes"` (which a lax module may still read as true), and a `deny` rule would be talked past
//! by changing a JSON type. Here they fail instead: two values compare only when both are
//! strings, booleans, numbers (of any kind: `1 == 1.0`), or lists or maps of such; `null`
//! compares with another value only where the rule itself writes the literal `null`
//! (`args.x == null`, `x in [null, 'a']`) — else `{"env": null}`, which a module may read as
//! its default, would slip past `deny when args.env == 'prod'`; `x in list` fails when any
//! element cannot be compared with `x`, and `x in map` when `x` is not of its keys' type.
//! Ordering (`<`, `>`, …) already fails between types.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, operators};
use cel::objects::Key;
use cel::{Context, ExecutionError, IdedExpr, Program, Value as Cel};
use serde_json::Value;

use crate::EffectiveHints;
use crate::flow::{Flow, FlowLabel, FlowLabels};

/// Longest `when`, in bytes.
pub const MAX_SOURCE: usize = 4096;
/// Deepest nesting of brackets in a `when`.
pub const MAX_NESTING: usize = 32;
/// Most JSON of the arguments a `when` reads, in bytes (serialized).
pub const MAX_ARGS_BYTES: usize = 32 * 1024;
/// Deepest nesting of the arguments a `when` reads.
pub const MAX_ARGS_DEPTH: usize = 32;

/// A compiled `when`.
#[derive(Clone)]
pub struct When {
    source: Arc<str>,
    /// The program with its comparisons made strict ([`strict`]).
    expression: Arc<IdedExpr>,
    /// The top-level argument fields it reads, when it reads `args` only as `args.field`
    /// (`None`: it reads `args` whole).
    fields: Option<Vec<String>>,
}

impl fmt::Debug for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("When").field(&self.source).finish()
    }
}

impl PartialEq for When {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for When {}

/// Why a `when` cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhenError {
    /// Longer than [`MAX_SOURCE`].
    #[error("the expression is longer than {MAX_SOURCE} bytes")]
    TooLong,
    /// Nested deeper than [`MAX_NESTING`].
    #[error("the expression nests deeper than {MAX_NESTING} brackets")]
    TooDeep,
    /// Not CEL.
    #[error("the expression does not parse: {0}")]
    Syntax(String),
    /// Names a variable there is none of.
    #[error(
        "the expression names `{0}`, which is none of tool, module, args, caller, groups, hints"
    )]
    Unknown(String),
    /// Uses `map` or `filter`, or a macro inside another.
    #[error("the expression {0}")]
    Unbounded(&'static str),
}

/// The facts of one call that a `when` sees.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The qualified tool name.
    pub tool: &'a str,
    /// The module's name.
    pub module: &'a str,
    /// The call's arguments (`{}` when it has none).
    pub args: &'a Value,
    /// The caller's subject.
    pub caller: &'a str,
    /// The caller's groups.
    pub groups: &'a [String],
    /// The tool's effective hints.
    pub hints: EffectiveHints,
    /// What the caller's calls touched (`None`: nothing known, as an empty flow; the gate
    /// reads it only for a call judged on it: [`crate::GatePolicy::reads_flow`]).
    pub flow: Option<&'a Flow>,
}

const VARIABLES: [&str; 7] = [
    "tool", "module", "args", "caller", "groups", "hints", "flow",
];

impl When {
    /// Compiles `source`, refusing what would not be bounded.
    pub fn compile(source: &str) -> Result<When, WhenError> {
        if source.len() > MAX_SOURCE {
            return Err(WhenError::TooLong);
        }
        let mut depth = 0usize;
        for c in source.chars() {
            match c {
                '(' | '[' | '{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(WhenError::TooDeep);
                    }
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        // The parser is third-party code given the operator's text: a panic in it is a
        // compile error, not a gateway that will not start for no stated reason.
        let program = std::panic::catch_unwind(|| Program::compile(source))
            .map_err(|_| WhenError::Syntax("the parser failed on it".into()))?
            .map_err(|e| WhenError::Syntax(e.to_string()))?;
        let mut check = Check::default();
        check.walk(program.expression(), 0)?;
        if let Some(unknown) = check
            .free
            .iter()
            .find(|name| !VARIABLES.contains(&name.as_str()))
        {
            return Err(WhenError::Unknown(unknown.clone()));
        }
        let fields = (!check.whole_args).then(|| {
            let mut fields: Vec<String> = check.arg_fields.into_iter().collect();
            fields.sort();
            fields
        });
        let mut expression = program.expression().clone();
        strict(&mut expression);
        Ok(When {
            source: source.into(),
            expression: Arc::new(expression),
            fields,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it reads the caller's flow (names `flow`; a string that merely says "flow"
    /// counts too, which only costs reading the flow).
    pub fn reads_flow(&self) -> bool {
        self.source.contains("flow")
    }

    /// Whether the call's facts satisfy it; `Err` with why when it cannot be evaluated (a
    /// missing key, a type error, a result that is not a boolean, arguments past the bounds).
    pub fn matches(&self, facts: &CallFacts<'_>) -> Result<bool, String> {
        if self.reads_flow() && facts.flow.is_some_and(Flow::is_unreadable) {
            return Err("the caller's flow could not be read".into());
        }
        let args = match &self.fields {
            None => facts.args.clone(),
            Some(fields) => {
                let mut seen = serde_json::Map::new();
                if let Value::Object(all) = facts.args {
                    for field in fields {
                        if let Some(value) = all.get(field) {
                            seen.insert(field.clone(), value.clone());
                        }
                    }
                }
                Value::Object(seen)
            }
        };
        let size = serde_json::to_vec(&args).map_or(usize::MAX, |v| v.len());
        if size > MAX_ARGS_BYTES {
            return Err(format!(
                "the arguments it reads are {size} bytes, more than {MAX_ARGS_BYTES}"
            ));
        }
        let args = to_cel(&args, 0)
            .ok_or_else(|| format!("the arguments nest deeper than {MAX_ARGS_DEPTH}"))?;
        let mut context = Context::default();
        context.add_variable_from_value("args", args);
        context.add_variable_from_value("tool", facts.tool.to_owned());
        context.add_variable_from_value("module", facts.module.to_owned());
        context.add_variable_from_value("caller", facts.caller.to_owned());
        context.add_variable_from_value(
            "groups",
            Cel::List(Arc::new(
                facts
                    .groups
                    .iter()
                    .map(|g| Cel::String(Arc::new(g.clone())))
                    .collect(),
            )),
        );
        let h = facts.hints;
        let hints: HashMap<String, Cel> = [
            ("readOnly", h.read_only),
            ("destructive", h.destructive),
            ("idempotent", h.idempotent),
            ("openWorld", h.open_world),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Cel::Bool(v)))
        .collect();
        context.add_variable_from_value("hints", hints);
        context.add_variable_from_value("flow", flow_value(facts.flow));
        for (name, function) in STRICT {
            // The names cannot be spelled in CEL, so none is declared already.
            let _ = context.add_function(name, function);
        }
        // What went wrong, never with the values (they are the agent's arguments, which
        // are not logged).
        // The evaluator is third-party code given the agent's arguments: a panic in it is a
        // failure to evaluate (which never opens the gate), not a dropped request.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            context.resolve(&self.expression)
        }))
        .map_err(|_| "it cannot be evaluated".to_owned())?;
        match result {
            Ok(Cel::Bool(b)) => Ok(b),
            Ok(_) => Err("its value is not a boolean".into()),
            Err(cel::ExecutionError::NoSuchKey(_)) => Err("a key it reads is missing".into()),
            Err(
                cel::ExecutionError::UnexpectedType { .. }
                | cel::ExecutionError::UnsupportedTargetType { .. }
                | cel::ExecutionError::NoSuchOverload(_)
                | cel::ExecutionError::NotSupportedAsMethod { .. }
                | cel::ExecutionError::ValuesNotComparable(..),
            ) => Err("a value it reads has another type".into()),
            Err(_) => Err("it cannot be evaluated".into()),
        }
    }
}

/// `flow` as a `when` sees it: `labels` (the labels the flow holds) and `sources` (per
/// label, every label present, the tools that brought it in).
fn flow_value(flow: Option<&Flow>) -> Cel {
    let strings = |items: Vec<String>| {
        Cel::List(Arc::new(
            items
                .into_iter()
                .map(|s| Cel::String(Arc::new(s)))
                .collect(),
        ))
    };
    let labels = flow.map_or(FlowLabels::NONE, Flow::labels);
    let sources: HashMap<String, Cel> = FlowLabel::ALL
        .into_iter()
        .map(|label| {
            let tools = flow
                .map(|f| f.sources(label).map(|t| t.tool.clone()).collect())
                .unwrap_or_default();
            (label.label().to_owned(), strings(tools))
        })
        .collect();
    let mut map: HashMap<String, Cel> = HashMap::new();
    map.insert(
        "labels".into(),
        strings(labels.names().into_iter().map(str::to_owned).collect()),
    );
    map.insert("sources".into(), sources.into());
    map.into()
}

/// The names of the strict comparisons: not identifiers, so no `when` can call them itself.
const STRICT_EQ: &str = "_==_ strict";
const STRICT_NE: &str = "_!=_ strict";
const STRICT_IN: &str = "@in strict";
/// The same where the rule writes a literal `null` in the comparison: `null` compares.
const NULLABLE_EQ: &str = "_==_ strict nullable";
const NULLABLE_NE: &str = "_!=_ strict nullable";
const NULLABLE_IN: &str = "@in strict nullable";

type Strict = fn(Cel, Cel) -> Result<Cel, ExecutionError>;

const STRICT: [(&str, Strict); 6] = [
    (STRICT_EQ, |a, b| strict_eq(&a, &b, false).map(Cel::Bool)),
    (STRICT_NE, |a, b| {
        strict_eq(&a, &b, false).map(|eq| Cel::Bool(!eq))
    }),
    (STRICT_IN, |a, b| strict_in(&a, &b, false).map(Cel::Bool)),
    (NULLABLE_EQ, |a, b| strict_eq(&a, &b, true).map(Cel::Bool)),
    (NULLABLE_NE, |a, b| {
        strict_eq(&a, &b, true).map(|eq| Cel::Bool(!eq))
    }),
    (NULLABLE_IN, |a, b| strict_in(&a, &b, true).map(Cel::Bool)),
];

/// Whether `e` is the literal `null`, or a list literal holding one.
fn writes_null(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(literal) => matches!(literal, cel::common::ast::LiteralValue::Null),
        Expr::List(list) => list.elements.iter().any(writes_null),
        _ => false,
    }
}

/// Makes every `==`, `!=` and `in` of `expr` (macros' expansions included) a call of its
/// strict form.
fn strict(expr: &mut IdedExpr) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if call.args.len() == 2 {
                let nullable = call.args.iter().any(writes_null);
                let strict = match (call.func_name.as_str(), nullable) {
                    (operators::EQUALS, false) => Some(STRICT_EQ),
                    (operators::NOT_EQUALS, false) => Some(STRICT_NE),
                    (operators::IN, false) => Some(STRICT_IN),
                    (operators::EQUALS, true) => Some(NULLABLE_EQ),
                    (operators::NOT_EQUALS, true) => Some(NULLABLE_NE),
                    (operators::IN, true) => Some(NULLABLE_IN),
                    _ => None,
                };
                if let Some(strict) = strict {
                    call.func_name = strict.to_owned();
                }
            }
            if let Some(target) = &mut call.target {
                strict(target);
            }
            call.args.iter_mut().for_each(strict);
        }
        Expr::Select(select) => strict(&mut select.operand),
        Expr::List(list) => list.elements.iter_mut().for_each(strict),
        Expr::Map(map) => map.entries.iter_mut().for_each(strict_entry),
        Expr::Struct(s) => s.entries.iter_mut().for_each(strict_entry),
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                strict(part);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn strict_entry(entry: &mut cel::common::ast::IdedEntryExpr) {
    match &mut entry.expr {
        EntryExpr::StructField(field) => strict(&mut field.value),
        EntryExpr::MapEntry(entry) => {
            strict(&mut entry.key);
            strict(&mut entry.value);
        }
    }
}

fn not_comparable(a: &Cel, b: &Cel) -> ExecutionError {
    ExecutionError::ValuesNotComparable(a.clone(), b.clone())
}

const fn is_number(v: &Cel) -> bool {
    matches!(v, Cel::Int(_) | Cel::UInt(_) | Cel::Float(_))
}

/// Whether `a` equals `b`, failing where their types differ (numbers of different kinds
/// compare; `null` equals `null`, and compares with anything else only when `nullable`: the
/// rule wrote a literal `null`), at any depth.
fn strict_eq(a: &Cel, b: &Cel, nullable: bool) -> Result<bool, ExecutionError> {
    match (a, b) {
        (Cel::Null, Cel::Null) => Ok(true),
        (Cel::Null, _) | (_, Cel::Null) if nullable => Ok(false),
        (Cel::String(_), Cel::String(_))
        | (Cel::Bool(_), Cel::Bool(_))
        | (Cel::Bytes(_), Cel::Bytes(_)) => Ok(a == b),
        _ if is_number(a) && is_number(b) => Ok(a == b),
        (Cel::List(x), Cel::List(y)) => {
            let mut equal = x.len() == y.len();
            for (a, b) in x.iter().zip(y.iter()) {
                equal &= strict_eq(a, b, nullable)?;
            }
            Ok(equal)
        }
        (Cel::Map(x), Cel::Map(y)) => {
            let mut equal = x.map.len() == y.map.len();
            for (key, a) in x.map.iter() {
                match y.map.get(key) {
                    Some(b) => equal &= strict_eq(a, b, nullable)?,
                    None => equal = false,
                }
            }
            Ok(equal)
        }
        _ => Err(not_comparable(a, b)),
    }
}

/// Whether `item` is in `container` (an element of a list, a key of a map), failing where
/// an element, or a key, cannot be compared with it.
fn strict_in(item: &Cel, container: &Cel, nullable: bool) -> Result<bool, ExecutionError> {
    match container {
        Cel::List(items) => {
            let mut found = false;
            for element in items.iter() {
                found |= strict_eq(item, element, nullable)?;
            }
            Ok(found)
        }
        Cel::Map(map) => {
            let mut found = false;
            for key in map.map.keys() {
                let key = match key {
                    Key::Int(i) => Cel::Int(*i),
                    Key::Uint(u) => Cel::UInt(*u),
                    Key::Bool(b) => Cel::Bool(*b),
                    Key::String(s) => Cel::String(s.clone()),
                };
                if matches!(item, Cel::Null) {
                    return Err(not_comparable(item, &key));
                }
                found |= strict_eq(item, &key, nullable)?;
            }
            Ok(found)
        }
        _ => Err(not_comparable(item, container)),
    }
}

/// The JSON as a CEL value, or `None` past [`MAX_ARGS_DEPTH`].
fn to_cel(value: &Value, depth: usize) -> Option<Cel> {
    if depth > MAX_ARGS_DEPTH {
        return None;
    }
    Some(match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Cel::Int(i),
            (None, Some(u), _) => Cel::UInt(u),
            (None, None, f) => Cel::Float(f.unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(
            items
                .iter()
                .map(|v| to_cel(v, depth + 1))
                .collect::<Option<Vec<_>>>()?,
        )),
        Value::Object(map) => {
            let mut out = HashMap::with_capacity(map.len());
            for (k, v) in map {
                out.insert(k.clone(), to_cel(v, depth + 1)?);
            }
            Cel::from(out)
        }
    })
}

/// What a walk of the expression found.
#[derive(Default)]
struct Check {
    /// Identifiers not bound by a macro.
    free: Vec<String>,
    /// Variables macros bind, innermost last.
    bound: Vec<String>,
    /// `args.field` reads.
    arg_fields: std::collections::BTreeSet<String>,
    /// `args` read other than as `args.field`.
    whole_args: bool,
}

impl Check {
    fn walk(&mut self, e: &IdedExpr, in_macro: usize) -> Result<(), WhenError> {
        match &e.expr {
            Expr::Ident(name) => {
                if !self.bound.contains(name) {
                    if name == "args" {
                        self.whole_args = true;
                    }
                    if !self.free.contains(name) {
                        self.free.push(name.clone());
                    }
                }
            }
            Expr::Select(select) => match &select.operand.expr {
                Expr::Ident(name) if name == "args" && !self.bound.iter().any(|b| b == "args") => {
                    self.arg_fields.insert(select.field.clone());
                    if !self.free.iter().any(|f| f == "args") {
                        self.free.push("args".into());
                    }
                }
                _ => self.walk(&select.operand, in_macro)?,
            },
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    self.walk(target, in_macro)?;
                }
                for arg in &call.args {
                    self.walk(arg, in_macro)?;
                }
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.walk(element, in_macro)?;
                }
            }
            Expr::Map(map) => self.entries(&map.entries, in_macro)?,
            Expr::Struct(s) => self.entries(&s.entries, in_macro)?,
            Expr::Comprehension(c) => {
                if matches!(c.accu_init.expr, Expr::List(_) | Expr::Map(_)) {
                    return Err(WhenError::Unbounded(
                        "uses `map` or `filter`, which build lists (use `all`, `exists` or `exists_one`)",
                    ));
                }
                if in_macro > 0 {
                    return Err(WhenError::Unbounded(
                        "runs a macro (`all`, `exists`, `exists_one`) inside another",
                    ));
                }
                self.walk(&c.iter_range, in_macro)?;
                self.walk(&c.accu_init, in_macro)?;
                let pushed = 2 + usize::from(c.iter_var2.is_some());
                self.bound.push(c.iter_var.clone());
                if let Some(second) = &c.iter_var2 {
                    self.bound.push(second.clone());
                }
                self.bound.push(c.accu_var.clone());
                let inner = self
                    .walk(&c.loop_cond, in_macro + 1)
                    .and_then(|()| self.walk(&c.loop_step, in_macro + 1))
                    .and_then(|()| self.walk(&c.result, in_macro + 1));
                self.bound.truncate(self.bound.len() - pushed);
                inner?;
            }
            Expr::Literal(_) | Expr::Unspecified => {}
        }
        Ok(())
    }

    fn entries(
        &mut self,
        entries: &[cel::common::ast::IdedEntryExpr],
        in_macro: usize,
    ) -> Result<(), WhenError> {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(field) => self.walk(&field.value, in_macro)?,
                EntryExpr::MapEntry(entry) => {
                    self.walk(&entry.key, in_macro)?;
                    self.walk(&entry.value, in_macro)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts<'a>(args: &'a Value, groups: &'a [String]) -> CallFacts<'a> {
        CallFacts {
            tool: "fs__write_file",
            module: "fs",
            args,
            caller: "alice",
            groups,
            hints: EffectiveHints::DEFAULTS,
            flow: None,
        }
    }

    #[test]
    fn a_when_reads_the_callers_flow() {
        use crate::flow::{Flow, FlowLabel, FlowLabels};
        let args = json!({});
        let mut flow = Flow::default();
        flow.record(
            "web__fetch",
            FlowLabels::of([FlowLabel::Untrusted]),
            time::macros::datetime!(2026-12-05 10:00 UTC),
        );
        let with = CallFacts {
            flow: Some(&flow),
            ..facts(&args, &[])
        };
        let without = facts(&args, &[]);
        for (source, want_with, want_without) in [
            ("'untrusted' in flow.labels", true, false),
            ("'private' in flow.labels", false, false),
            ("'web__fetch' in flow.sources.untrusted", true, false),
            ("size(flow.sources.private) == 0", true, true),
            ("size(flow.sources.sends_out) == 0", true, true),
        ] {
            let when = When::compile(source).unwrap();
            assert!(when.reads_flow());
            assert_eq!(when.matches(&with), Ok(want_with), "{source}");
            assert_eq!(when.matches(&without), Ok(want_without), "{source}");
        }
        assert!(!When::compile("args.x == 1").unwrap().reads_flow());
        // A flow that could not be read fails every `when` reading it (a rule's failure
        // keeps the gate shut), though it holds both labels for the trifecta.
        let unreadable = Flow::unreadable(time::OffsetDateTime::UNIX_EPOCH);
        assert!(unreadable.trifecta(FlowLabels::of([FlowLabel::SendsOut])));
        let unread = CallFacts {
            flow: Some(&unreadable),
            ..facts(&args, &[])
        };
        for source in [
            "'web__fetch' in flow.sources.untrusted",
            "size(flow.labels) == 0",
        ] {
            assert!(
                When::compile(source).unwrap().matches(&unread).is_err(),
                "{source}"
            );
        }
        assert_eq!(
            When::compile("args == {}").unwrap().matches(&unread),
            Ok(true)
        );
    }

    #[test]
    fn a_when_reads_every_fact_of_the_call() {
        let args = json!({"path": "/srv/shared/tmp/a", "n": 3, "tags": ["x", "y"]});
        let groups = vec!["sre".to_owned()];
        let f = facts(&args, &groups);
        for (source, want) in [
            ("args.path.startsWith('/srv/shared/tmp/')", true),
            ("!args.path.contains('..')", true),
            ("args.n > 2 && args.n < 4", true),
            ("args.tags.exists(t, t == 'y')", true),
            ("args.tags.all(t, t.size() == 1)", true),
            ("tool == 'fs__write_file' && module == 'fs'", true),
            ("caller == 'alice' && 'sre' in groups", true),
            ("hints.destructive && !hints.readOnly", true),
            ("has(args.missing)", false),
            ("size(args) == 3", true),
        ] {
            let when = When::compile(source).unwrap();
            assert_eq!(when.matches(&f), Ok(want), "{source}");
        }
    }

    #[test]
    fn what_cannot_be_evaluated_is_an_error_not_a_false() {
        let args = json!({"path": 7});
        let f = facts(&args, &[]);
        for source in [
            "args.missing == 'x'",
            "args.path.startsWith('/')",
            "args.path",
            "args.path + 'x' == 'y'",
        ] {
            let when = When::compile(source).unwrap();
            assert!(
                when.matches(&f).is_err(),
                "{source}: {:?}",
                when.matches(&f)
            );
        }
    }

    /// `==`, `!=` and `in` between values of different types fail rather than answer
    /// `false` (which a `deny` rule would read as "not this call").
    #[test]
    fn comparisons_between_types_fail_instead_of_answering_false() {
        let args = json!({
            "s": "true", "b": true, "i": 1, "f": 1.0, "n": null,
            "l": ["prod"], "m": {"k": "v"}, "mixed": ["a", 1]
        });
        let f = facts(&args, &[]);
        for source in [
            "args.s == true",
            "args.s != true",
            "args.i == true",
            "args.b == 1",
            "args.s == 1",
            "args.l == 'prod'",
            "args.m == 'v'",
            "args.l == [1]",
            "args.m == {'k': 1}",
            "args.s in [true, false]",
            "args.l in ['prod']",
            "'a' in args.mixed",
            "1 in args.m",
            "args.n in args.m",
            "args.s in 'true'",
            "args.l.exists(x, x == 1)",
            "[args.s].exists_one(x, x == true)",
            // null, where the rule does not write it: {"env": null} is not "not prod".
            "args.n == 'prod'",
            "args.n != 'prod'",
            "args.n in ['prod', 'production']",
            "'prod' in [args.n]",
            "args.s == args.n",
        ] {
            let when = When::compile(source).unwrap();
            assert!(
                when.matches(&f).is_err(),
                "{source}: {:?}",
                when.matches(&f)
            );
        }
        for (source, want) in [
            ("args.s == 'true'", true),
            ("args.b == true", true),
            ("args.b != false", true),
            ("args.i == 1.0 && args.f == 1 && args.i == 1u", true),
            ("args.n == null && args.s != null && null != args.b", true),
            (
                "args.n in [null, 'prod'] && !(args.s in [null, 'prod'])",
                true,
            ),
            ("args.l == ['prod'] && args.l != ['dev']", true),
            (
                "args.m == {'k': 'v'} && args.m != {'k': 'w'} && args.m != {}",
                true,
            ),
            ("'prod' in args.l && !('dev' in args.l)", true),
            ("'k' in args.m && !('j' in args.m)", true),
            ("null in [null, 'a'] && !(args.s in [null])", true),
            ("!has(args.missing) || args.missing == null", true),
            ("args.l.exists_one(x, x == 'prod')", true),
            ("[1, 2].exists_one(x, x == 2)", true),
        ] {
            let when = When::compile(source).unwrap();
            assert_eq!(when.matches(&f), Ok(want), "{source}");
        }
    }

    #[test]
    fn what_would_not_be_bounded_does_not_compile() {
        assert_eq!(
            When::compile(&"a".repeat(MAX_SOURCE + 1)).unwrap_err(),
            WhenError::TooLong
        );
        let deep = format!("{}true{}", "(".repeat(40), ")".repeat(40));
        assert_eq!(When::compile(&deep).unwrap_err(), WhenError::TooDeep);
        assert!(matches!(
            When::compile("args.xs.map(x, x + x).size() > 0").unwrap_err(),
            WhenError::Unbounded(_)
        ));
        assert!(matches!(
            When::compile("args.xs.filter(x, x > 1).size() > 0").unwrap_err(),
            WhenError::Unbounded(_)
        ));
        assert!(matches!(
            When::compile("args.xs.all(x, args.ys.exists(y, y == x))").unwrap_err(),
            WhenError::Unbounded(_)
        ));
        assert!(matches!(
            When::compile("args.path ==").unwrap_err(),
            WhenError::Syntax(_)
        ));
        assert_eq!(
            When::compile("request.path == '/'").unwrap_err(),
            WhenError::Unknown("request".into())
        );
    }

    #[test]
    fn the_arguments_it_reads_are_bounded_and_only_the_fields_it_names_count() {
        let big = "x".repeat(MAX_ARGS_BYTES * 2);
        let args = json!({"path": "/tmp/a", "content": big});
        let f = facts(&args, &[]);
        let by_field = When::compile("args.path == '/tmp/a'").unwrap();
        assert_eq!(by_field.matches(&f), Ok(true), "content is not read");
        let whole = When::compile("size(args) == 2").unwrap();
        assert!(
            whole.matches(&f).is_err(),
            "the whole arguments are too big"
        );
        let read = When::compile("args.content.size() > 0").unwrap();
        assert!(read.matches(&f).is_err(), "a field too big to read");
        let mut deep = json!("leaf");
        for _ in 0..40 {
            deep = json!({ "d": deep });
        }
        let args = json!({ "d": deep });
        let nested = When::compile("has(args.d)").unwrap();
        assert!(nested.matches(&facts(&args, &[])).is_err());
    }

    use proptest::prelude::*;

    /// Pieces CEL is made of, so arbitrary sequences of them reach deep into the parser and
    /// the evaluator rather than failing at the first character.
    fn token() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "args",
            "tool",
            "module",
            "caller",
            "groups",
            "hints",
            ".",
            "path",
            "x",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            ",",
            ":",
            "'a'",
            "\"..\"",
            "1",
            "-1",
            "2.5",
            "true",
            "null",
            "==",
            "!=",
            "<",
            "&&",
            "||",
            "!",
            "+",
            "-",
            "*",
            "/",
            "%",
            "?",
            "in",
            "has",
            "size",
            "startsWith",
            "contains",
            "matches",
            "exists",
            "all",
            "map",
            "filter",
            "exists_one",
            "e",
            "int",
            "string",
            " ",
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whatever an operator writes, compiling answers with a program or a reason, and a
        /// program answers every call with a verdict or a failure — never a panic.
        #[test]
        fn any_expression_compiles_or_is_refused_and_never_panics_when_evaluated(
            tokens in prop::collection::vec(token(), 0..40),
            path in "[a-z/.]{0,12}",
            n in any::<i64>(),
        ) {
            let source = tokens.concat();
            if let Ok(when) = When::compile(&source) {
                let args = json!({"path": path, "x": n, "xs": [1, "a", null, {"e": true}]});
                let groups = vec!["sre".to_owned()];
                let _ = when.matches(&facts(&args, &groups));
            }
        }
    }
}
