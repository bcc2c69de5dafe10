//! What a call costs outside the instructions, counted: system calls and heap allocations
//! of the process under test per call, read by `perf stat` attached to it (the kernel's
//! `raw_syscalls:sys_enter` tracepoint and uprobes on the allocator entry points: the C
//! library's and mimalloc's, which the gateway's global allocator calls), and its context
//! switches from /proc in a run before the probes attach. A probe costs about a
//! microsecond a hit, so these rows run apart from the CPU rows and their timings are not
//! reported.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::load::{self, MakeRequest};
use crate::peers::forwarded;
use crate::procstat;

/// Probe groups of this bench (removed before they are added and after the counts).
const GROUPS: [&str; 2] = ["benchlibc", "benchmi"];

/// The allocator's entry points probed: `(event, function, a fresh block or a resize)` in
/// the C library, which Rust's system allocator calls, ...
const LIBC: [(&str, &str, bool); 4] = [
    ("malloc", "malloc", true),
    ("calloc", "calloc", true),
    ("posix_memalign", "posix_memalign", true),
    ("realloc", "realloc", false),
];
/// ... and in mimalloc, linked into the gateway (what its `#[global_allocator]` calls).
/// Event names are unique across groups: `perf probe` answers a name another group has
/// with success and no probe.
const MIMALLOC: [(&str, &str, bool); 3] = [
    ("mi_malloc", "mi_malloc_aligned", true),
    ("mi_zalloc", "mi_zalloc_aligned", true),
    ("mi_realloc", "mi_realloc_aligned", false),
];

/// One process's counts per call.
pub(super) struct Counts {
    pub(super) path: &'static str,
    pub(super) calls: usize,
    pub(super) syscalls: f64,
    pub(super) switches: f64,
    pub(super) allocations: f64,
    pub(super) reallocations: f64,
}

/// The allocator probes in place: `(event, a fresh block or a resize)`.
pub(super) struct Probes {
    events: Vec<(String, bool)>,
}

async fn perf(args: &[&str]) -> Result<std::process::Output, String> {
    Command::new("perf")
        .args(args)
        .output()
        .await
        .map_err(|e| format!("perf is not available ({e}); Debian's linux-perf has it"))
}

impl Probes {
    /// Uprobes on the allocator entry points of the C library `pid` has mapped and, where
    /// its executable links mimalloc, of mimalloc; why not, where `perf` cannot (not
    /// installed, not root, no uprobes).
    pub(super) async fn add(pid: u32) -> Result<Probes, String> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map_err(|e| format!("cannot read the process's maps: {e}"))?;
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .ok_or("the process maps no C library")?
            .to_owned();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map_err(|e| format!("cannot read the process's executable: {e}"))?;
        Probes::clear().await;
        let mut probes = Probes { events: Vec::new() };
        for (group, binary, entries) in [
            ("benchlibc", libc.as_str(), &LIBC[..]),
            ("benchmi", &*exe.to_string_lossy(), &MIMALLOC[..]),
        ] {
            for &(event, function, fresh) in entries {
                let spec = format!("{group}:{event}={function}");
                let out = perf(&["probe", "-q", "-x", binary, "--add", &spec]).await?;
                if out.status.success() {
                    probes.events.push((format!("{group}:{event}"), fresh));
                } else if group == "benchlibc" {
                    Probes::clear().await;
                    return Err(format!(
                        "perf probe could not add {spec} (uprobes need root): {} {}",
                        String::from_utf8_lossy(&out.stdout).trim(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                } else {
                    // An executable without mimalloc has no such function: nothing to count.
                    eprintln!(
                        "  (no probe {spec} in {binary}: {})",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
        }
        Ok(probes)
    }

    async fn clear() {
        for group in GROUPS {
            let _ = perf(&["probe", "-q", "-d", &format!("{group}:*")]).await;
        }
    }

    pub(super) async fn remove(self) {
        Probes::clear().await;
    }
}

/// Counts `calls` calls of `make` at concurrency 16 on `target` (process `pid`), after 200
/// calls that warm it up.
pub(super) async fn count(
    probes: &Probes,
    path: &'static str,
    target: SocketAddr,
    pid: u32,
    calls: usize,
    make: MakeRequest,
) -> Result<Counts> {
    load::run(target, 16, 200, make.clone(), forwarded()).await?;
    // Context switches from /proc in a run of their own before perf attaches: a uprobe
    // hit can switch its thread out, so under the allocation probes the count grows with
    // the allocations (2.0 a gateway call against 0.45 without them).
    let before = procstat::context_switches(pid);
    let run = async |make: MakeRequest| -> Result<()> {
        let load = load::run(target, 16, calls, make, forwarded()).await?;
        if load.errors > 0 {
            bail!("{path}: {} answers were not the expected ones", load.errors);
        }
        Ok(())
    };
    run(make.clone()).await?;
    let switches = (procstat::context_switches(pid) - before) / calls as f64;
    let events: Vec<&str> = ["raw_syscalls:sys_enter"]
        .into_iter()
        .chain(probes.events.iter().map(|(e, _)| e.as_str()))
        .collect();
    let mut perf = Command::new("perf")
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            &events.join(","),
            "-p",
            &pid.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("start perf stat")?;
    // perf attaches before it counts; give it a moment.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    run(make).await?;
    let perf_pid = perf.id().context("perf exited early")?;
    Command::new("kill")
        .args(["-INT", &perf_pid.to_string()])
        .status()
        .await?;
    let mut text = String::new();
    perf.stderr
        .take()
        .context("perf's stderr")?
        .read_to_string(&mut text)
        .await?;
    perf.wait().await?;
    let counted = |event: &str| -> Result<f64> {
        perf_count(&text, event).with_context(|| format!("perf stat counted no {event}: {text}"))
    };
    let per_call = |value: f64| value / calls as f64;
    let (mut allocations, mut reallocations) = (0.0, 0.0);
    for (event, fresh) in &probes.events {
        let n = counted(event)?;
        if *fresh {
            allocations += n;
        } else {
            reallocations += n;
        }
    }
    Ok(Counts {
        path,
        calls,
        syscalls: per_call(counted("raw_syscalls:sys_enter")?),
        switches,
        allocations: per_call(allocations),
        reallocations: per_call(reallocations),
    })
}

/// `event`'s count in `perf stat -x ,` output (`VALUE,UNIT,EVENT,…` a line); `None` where
/// it is missing or not counted.
fn perf_count(text: &str, event: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let mut fields = line.split(',');
        let value = fields.next()?;
        (fields.nth(1)? == event).then(|| value.parse().ok())?
    })
}

/// The counts' table and JSON; or the reason there are none.
pub(super) fn counts_report(md: &mut String, counts: &Result<Vec<Counts>, String>) -> Value {
    let counts = match counts {
        Ok(counts) => counts,
        Err(why) => {
            let _ = writeln!(
                md,
                "\nSystem calls and allocations per call: not counted ({why})."
            );
            return json!({"skipped": why});
        }
    };
    let _ = write!(
        md,
        "\nPer call at concurrency 16, counted by `perf stat` on the process under test (rows of their own: the probes slow it; context switches, voluntary and not, from /proc in a run without the probes):\n\n| path | calls | system calls | context switches | allocations | reallocations |\n|---|---|---|---|---|---|\n"
    );
    let mut rows = Vec::new();
    for c in counts {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} | {:.2} | {:.1} | {:.1} |",
            c.path, c.calls, c.syscalls, c.switches, c.allocations, c.reallocations
        );
        rows.push(
            json!({"path": c.path, "calls": c.calls, "syscalls_per_call": c.syscalls,
            "context_switches_per_call": c.switches, "allocations_per_call": c.allocations,
            "reallocations_per_call": c.reallocations}),
        );
    }
    Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::perf_count;

    #[test]
    fn reads_perf_stat_csv() {
        let text = "8644,,raw_syscalls:sys_enter,73924145,100.00,,\n<not counted>,,benchmi:mi_malloc,0,100.00,,\n191,,context-switches,73924145,100.00,,\n";
        assert_eq!(perf_count(text, "raw_syscalls:sys_enter"), Some(8644.0));
        assert_eq!(perf_count(text, "context-switches"), Some(191.0));
        assert_eq!(perf_count(text, "benchmi:mi_malloc"), None);
        assert_eq!(perf_count(text, "benchlibc:malloc"), None);
    }
}
