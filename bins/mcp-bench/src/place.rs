//! Where the processes of a measurement run. The CPU a call costs a process is only
//! comparable between two processes when each ran alone on its core: on a small machine the
//! load generator and the upstream otherwise share the core with the process under test,
//! and its cost moves with theirs (cache, migrations, wake-ups) by more than a 10 % change.
//! So the per-call rows put the process under test (the null proxy, a gateway) on a core of
//! its own, started there so its runtime sizes itself to one core, and this process (the
//! load generator) and the upstream on the others: the method of the issue-52 measurements.

use std::path::Path;

use anyhow::{Context, Result};
use tokio::process::Command;

/// The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status: a
/// container's may not start at 0), in order.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Vec::new();
    };
    list.trim()
        .split(',')
        .filter_map(|part| match part.split_once('-') {
            Some((a, b)) => Some(a.parse::<usize>().ok()?..=b.parse().ok()?),
            None => part.parse::<usize>().ok().map(|a| a..=a),
        })
        .flatten()
        .collect()
}

/// `cpus` as `taskset -c` takes them.
fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `program`, to be started pinned to `cpus`.
pub(crate) fn on_cpus(cpus: &[usize], program: &Path) -> Command {
    let mut command = Command::new("taskset");
    command.args(["-c", &list(cpus)]).arg(program);
    command
}

/// `program`, to be started on the process-under-test's CPU where `place` says, else as it is.
pub(crate) fn command(place: Option<&Placement>, program: &Path) -> Command {
    place.map_or_else(|| Command::new(program), |p| p.command(program))
}

/// Moves `pids` (this process, the upstream) off the process-under-test's CPU where `place`
/// pins it; what was done, for the report.
pub(crate) async fn keep_apart(place: Option<&Placement>, pids: &[u32]) -> Result<String> {
    match place {
        Some(place) => {
            place.keep_apart(pids).await?;
            Ok(place.describe())
        }
        None => Ok("nothing pinned (one CPU, or no taskset)".to_owned()),
    }
}

/// The process under test on one CPU, everything else on the rest.
pub(crate) struct Placement {
    measured: usize,
    others: Vec<usize>,
}

impl Placement {
    /// This machine's placement, or `None` where it has one CPU or no `taskset` (then
    /// nothing is pinned, and the report says so).
    pub(crate) fn of_this_machine() -> Option<Placement> {
        let cpus = allowed_cpus();
        let (&measured, others) = cpus.split_first()?;
        if others.is_empty() {
            return None;
        }
        let usable = std::process::Command::new("taskset")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        usable.then(|| Placement {
            measured,
            others: others.to_vec(),
        })
    }

    /// `program`, to be started on the process-under-test's CPU.
    pub(crate) fn command(&self, program: &Path) -> Command {
        on_cpus(&[self.measured], program)
    }

    /// Moves every thread of each of `pids` (this process, the upstream) to the other CPUs.
    pub(crate) async fn keep_apart(&self, pids: &[u32]) -> Result<()> {
        pin(pids, &list(&self.others)).await
    }

    /// Lets every thread of each of `pids` run anywhere again.
    pub(crate) async fn release(&self, pids: &[u32]) -> Result<()> {
        let mut all = vec![self.measured];
        all.extend(&self.others);
        pin(pids, &list(&all)).await
    }

    /// For the report.
    pub(crate) fn describe(&self) -> String {
        format!(
            "the process under test pinned to CPU {}, the load generator and the upstream to CPU {}",
            self.measured,
            list(&self.others)
        )
    }
}

async fn pin(pids: &[u32], cpus: &str) -> Result<()> {
    for pid in pids {
        let status = Command::new("taskset")
            .args(["-a", "-p", "-c", cpus, &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .context("run taskset")?;
        anyhow::ensure!(
            status.success(),
            "taskset could not pin process {pid} to {cpus}"
        );
    }
    Ok(())
}
