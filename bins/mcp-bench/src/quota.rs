//! CPU quotas for the scale-out rows: each gateway instance in a cgroup of its own whose CPU
//! bandwidth is capped (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us`), so on a machine of
//! two cores the instance, not the machine, is the bottleneck, and a second instance adds
//! what a second machine would. The cgroup is removed when the quota is dropped.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The scheduler period the quotas are expressed in (the kernel's default).
const PERIOD_US: u64 = 100_000;

/// A process's CPU cap, for as long as this lives.
pub(crate) struct Quota {
    dir: PathBuf,
    /// Where a process leaves it (the parent group).
    parent: PathBuf,
}

/// Where CPU cgroups can be made here: v2's unified root (with the `cpu` controller
/// enabled for children) or v1's `cpu` hierarchy; why not, otherwise.
fn root() -> Result<(PathBuf, bool)> {
    let v2 = Path::new("/sys/fs/cgroup");
    if v2.join("cgroup.controllers").exists() {
        let controllers = std::fs::read_to_string(v2.join("cgroup.controllers"))?;
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            bail!("cgroup v2 without the cpu controller");
        }
        // Children get the cpu controller only when the parent enables it.
        let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+cpu");
        return Ok((v2.to_path_buf(), true));
    }
    let v1 = v2.join("cpu");
    if v1.join("cpu.cfs_quota_us").exists() {
        return Ok((v1, false));
    }
    bail!("no cgroup cpu controller under /sys/fs/cgroup")
}

impl Quota {
    /// Caps `pid` (all its threads) at `percent` % of one CPU, in a new cgroup `name`.
    pub(crate) fn cap(name: &str, pid: u32, percent: u64) -> Result<Quota> {
        let (root, v2) = root()?;
        let dir = root.join(name);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("create the cgroup {} (needs root)", dir.display()))?;
        let quota = PERIOD_US * percent / 100;
        if v2 {
            std::fs::write(dir.join("cpu.max"), format!("{quota} {PERIOD_US}"))?;
        } else {
            std::fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
            std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
        }
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("move process {pid} into {}", dir.display()))?;
        Ok(Quota { dir, parent: root })
    }

    /// The CPU time the cgroup's processes were throttled, in seconds (how much the cap
    /// held them back).
    pub(crate) fn throttled_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        stat.lines()
            .find_map(|line| {
                let (key, value) = line.split_once(' ')?;
                match key {
                    "throttled_usec" => value.trim().parse::<f64>().ok().map(|v| v / 1e6),
                    "throttled_time" => value.trim().parse::<f64>().ok().map(|v| v / 1e9),
                    _ => None,
                }
            })
            .unwrap_or(0.0)
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        // A cgroup with processes cannot be removed: move any left to the parent first.
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(self.parent.join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
