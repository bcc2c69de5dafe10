//! The layering, checked: the pure crates (`elicitation-core`, `gating-core`, `mcp-wire`,
//! `mcp-clock`) hold no async runtime, HTTP stack or database driver in their normal
//! dependency graph;
//! the crates' own edges point down (the client side never depends on the server side, the
//! gate never on HTTP, the page and the gate never on the server); and no module of any
//! crate imports a module that imports it back ([`crate::cycles`]).

use anyhow::{Context, Result, bail};

use crate::cmd::cargo;

/// The pure crates.
const CORE_CRATES: &[&str] = &[
    "elicitation-core",
    "gating-core",
    "mcp-wire",
    "mcp-clock",
    "mcp-random",
    "mcp-seal",
];

/// Packages a pure crate must not depend on, by exact name or name prefix (`deadpool*`).
const FORBIDDEN: &[&str] = &["tokio", "tokio-postgres", "hyper", "mio", "deadpool"];

/// Edges that must not exist anywhere in a crate's normal dependency graph: the client side
/// never depends on the server side, identity and the gate never on the server.
const SIDES: &[(&str, &str)] = &[
    ("mcp-upstream", "mcp-http"),
    ("mcp-wire", "mcp-upstream"),
    ("mcp-auth", "mcp-http"),
    ("mcp-auth", "mcp-gate"),
    ("mcp-gate", "mcp-http"),
    ("mcp-gate", "mcp-http-kit"),
    ("mcp-http-kit", "mcp-http"),
    ("mcp-http-kit", "mcp-approvals"),
    ("mcp-approvals", "mcp-http"),
    // The metrics are a leaf the notifier and the gate both count in.
    ("mcp-metrics", "mcp-gate"),
    ("mcp-metrics", "mcp-upstream"),
    ("mcp-notify", "mcp-gate"),
    // Who is calling needs no store: `Caller` and `Approver` are elicitation-core's.
    ("mcp-auth", "elicitation-store"),
    // The gate is a library without the world: no HTTP client or server, TLS or JWT stack
    // anywhere in its tree (its module clients' HTTP, mode `jwt` and the OTLP exporter are
    // features the binary turns on).
    ("mcp-gate", "hyper"),
    ("mcp-gate", "hyper-util"),
    ("mcp-gate", "reqwest"),
    ("mcp-gate", "rustls"),
    ("mcp-gate", "jsonwebtoken"),
    ("mcp-gate", "aws-lc-sys"),
];

/// Direct dependencies a crate must not have. The gate is driven without a server: no HTTP
/// types of its own.
const DIRECT: &[(&str, &[&str])] = &[(
    "mcp-gate",
    &["hyper", "hyper-util", "http", "http-body-util", "reqwest"],
)];

pub(crate) fn check() -> Result<()> {
    let mut problems = Vec::new();
    for krate in CORE_CRATES {
        let tree = normal_tree(krate)?;
        for hit in forbidden_packages(&tree) {
            problems.push(format!("{krate} depends on {hit}"));
        }
    }
    for (krate, other) in SIDES {
        let tree = normal_tree(krate)?;
        if tree
            .lines()
            .any(|line| line.split_whitespace().next() == Some(*other))
        {
            problems.push(format!("{krate} depends on {other}"));
        }
    }
    for (krate, banned) in DIRECT {
        let direct = direct_dependencies(krate)?;
        for name in banned.iter().filter(|b| direct.iter().any(|d| d == *b)) {
            problems.push(format!("{krate} depends directly on {name}"));
        }
    }
    let written = written_edges()?;
    let actual = crate_edges()?;
    if written != actual {
        problems.push(format!(
            "ARCHITECTURE.md's crate edges are not Cargo.toml's; run `cargo xtask layering --write`. They are:\n{actual}"
        ));
    }
    for (krate, src) in crate::cycles::workspace_crates(&crate::cmd::workspace_root())? {
        for cycle in crate::cycles::cycles(&src)? {
            problems.push(format!(
                "the modules {} of {krate} import each other ({})",
                cycle.modules.join(", "),
                cycle.imports.join("; ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("the layering is broken:\n  {}", problems.join("\n  "))
    }
}

/// Where ARCHITECTURE.md's crate edges begin and end.
const EDGES_BEGIN: &str = "<!-- crate edges: checked by `cargo xtask layering`, written by `cargo xtask layering --write` -->\n```text\n";
const EDGES_END: &str = "```\n<!-- end of crate edges -->";

/// Each workspace crate and the workspace crates it depends on directly (normal edges),
/// one line each, as ARCHITECTURE.md shows them.
fn crate_edges() -> Result<String> {
    let crates: Vec<String> = crate::cycles::workspace_crates(&crate::cmd::workspace_root())?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let mut out = String::new();
    for krate in &crates {
        let mut deps: Vec<String> = direct_dependencies(krate)?
            .into_iter()
            .filter(|d| crates.contains(d) && d != krate)
            .collect();
        deps.sort();
        deps.dedup();
        let deps = if deps.is_empty() {
            "(none)".to_owned()
        } else {
            deps.join(", ")
        };
        out.push_str(&format!("{krate} → {deps}\n"));
    }
    Ok(out)
}

fn architecture() -> std::path::PathBuf {
    crate::cmd::workspace_root().join("ARCHITECTURE.md")
}

/// The crate edges ARCHITECTURE.md shows now.
fn written_edges() -> Result<String> {
    let text = std::fs::read_to_string(architecture()).context("read ARCHITECTURE.md")?;
    let start = text
        .find(EDGES_BEGIN)
        .context("ARCHITECTURE.md has no crate edges block; run `cargo xtask layering --write`")?
        + EDGES_BEGIN.len();
    let end = text[start..]
        .find(EDGES_END)
        .context("ARCHITECTURE.md's crate edges block does not end")?;
    Ok(text[start..start + end].to_owned())
}

/// `cargo xtask layering --write`: ARCHITECTURE.md's crate edges made Cargo.toml's.
pub(crate) fn write() -> Result<()> {
    let path = architecture();
    let text = std::fs::read_to_string(&path).context("read ARCHITECTURE.md")?;
    let written = written_edges()?;
    let actual = crate_edges()?;
    let block = |edges: &str| format!("{EDGES_BEGIN}{edges}{EDGES_END}");
    std::fs::write(&path, text.replacen(&block(&written), &block(&actual), 1))
        .context("write ARCHITECTURE.md")?;
    println!("{actual}");
    Ok(())
}

/// The names of a package's direct normal dependencies.
fn direct_dependencies(krate: &str) -> Result<Vec<String>> {
    let output = cargo()
        .args([
            "tree",
            "--package",
            krate,
            "--edges",
            "normal",
            "--depth",
            "1",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .context("could not run cargo tree")?;
    if !output.status.success() {
        bail!(
            "cargo tree -p {krate} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// `cargo tree` of a package's normal dependencies, one `name version` per line.
fn normal_tree(krate: &str) -> Result<String> {
    let output = cargo()
        .args([
            "tree",
            "--package",
            krate,
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .context("could not run cargo tree")?;
    if !output.status.success() {
        bail!(
            "cargo tree -p {krate} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The forbidden packages named in `cargo tree --prefix none --format {p}` output, whose
/// lines look like `name v1.2.3` (sometimes followed by a path or `(*)`).
fn forbidden_packages(tree: &str) -> Vec<String> {
    let mut hits: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| {
            FORBIDDEN
                .iter()
                .any(|f| *name == *f || (*f == "deadpool" && name.starts_with("deadpool")))
        })
        .map(str::to_owned)
        .collect();
    hits.sort();
    hits.dedup();
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_forbidden_packages_and_ignores_lookalikes() {
        let tree = "gating-core v0.0.0 (/w/crates/gating-core)\nserde v1.0.228\ntokio v1.54.1\n\
                    tokio-util v0.7.20\nhyper-util v0.1.21\ndeadpool-postgres v0.14.2\nmio v1.0.4 (*)\nhyper v1.12.0\n";
        assert_eq!(
            forbidden_packages(tree),
            ["deadpool-postgres", "hyper", "mio", "tokio"]
        );
        assert!(forbidden_packages("serde v1\nring v0.17\n").is_empty());
    }
}
