//! A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` into a temporary
//! directory, `pg_ctl start` on a free loopback port with a private socket directory and
//! durability off, stopped and deleted when dropped (also when tests fail).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

/// A running cluster; stopped and removed on drop.
pub(crate) struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
    /// `pg_ctl -o` options the server was started with (to start it again).
    options: String,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The newest server bin directory that has `initdb` and `pg_ctl`.
fn find_server_bin() -> Option<PathBuf> {
    let mut candidates: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    candidates.sort();
    let from_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    candidates
        .into_iter()
        .rev()
        .map(|(_, bin)| bin)
        .chain(from_path)
        .find(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
}

/// Installs the server with apt when we are root on a Debian-like machine.
fn install_server() -> Result<()> {
    if !(is_root() && Path::new("/usr/bin/apt-get").exists()) {
        bail!(
            "PostgreSQL server binaries (initdb, pg_ctl) were not found. Install them, e.g. \
             `sudo apt-get install postgresql` on Debian/Ubuntu, then run `cargo xtask test` again."
        );
    }
    println!(
        "xtask: PostgreSQL server binaries not found; installing the `postgresql` package with apt-get"
    );
    let update = Command::new("apt-get").args(["update", "-qq"]).status()?;
    let install = Command::new("apt-get")
        .args([
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "postgresql",
        ])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()?;
    if !update.success() || !install.success() {
        bail!("`apt-get install postgresql` failed; install PostgreSQL's server binaries by hand");
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("find a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

impl Cluster {
    pub(crate) fn start() -> Result<Cluster> {
        Cluster::start_with("")
    }

    /// [`Cluster::start`] with `extra` server options (`-c name=value …`) besides the usual.
    pub(crate) fn start_with(extra: &str) -> Result<Cluster> {
        let bin = match find_server_bin() {
            Some(bin) => bin,
            None => {
                install_server()?;
                find_server_bin()
                    .context("PostgreSQL was installed but initdb/pg_ctl are still not found")?
            }
        };
        // The server refuses to run as root; run it as the `postgres` user then.
        let as_postgres = is_root();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("mcp-gateway-pg-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let mut cluster = Cluster {
            bin,
            dir,
            port: 0,
            as_postgres,
            options: String::new(),
        };
        if as_postgres {
            cluster.checked(
                Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(&cluster.dir),
                "chown the cluster directory to postgres",
            )?;
        }
        let data = cluster.dir.join("data");
        let initdb = cluster.server_command("initdb");
        cluster.run_server(initdb, |c| {
            c.arg("-D").arg(&data).args([
                "-U",
                "app",
                "--auth=trust",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
            ]);
        })?;
        // A port can be taken between finding it and binding it; try a few.
        for attempt in 0..3 {
            cluster.port = free_port()?;
            cluster.options = format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 {extra}",
                cluster.port,
                cluster.dir.display()
            );
            let log = cluster.dir.join("server.log");
            let pg_ctl = cluster.server_command("pg_ctl");
            let started = cluster.run_server(pg_ctl, |c| {
                c.arg("-D").arg(&data).arg("-l").arg(&log).args([
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    &cluster.options,
                    "start",
                ]);
            });
            match started {
                Ok(()) => return Ok(cluster),
                Err(err) if attempt < 2 => {
                    eprintln!("xtask: postgres did not start ({err:#}); retrying on another port")
                }
                Err(err) => {
                    let log = std::fs::read_to_string(&log).unwrap_or_default();
                    return Err(err.context(format!("postgres did not start; its log:\n{log}")));
                }
            }
        }
        unreachable!("the loop returns on its last attempt")
    }

    /// The superuser URL of the cluster's `postgres` database.
    pub(crate) fn url(&self) -> String {
        format!("postgres://app@127.0.0.1:{}/postgres", self.port)
    }

    /// Writes a script that stops, starts, freezes (`SIGSTOP` on the postmaster and every
    /// backend: connections stay open and nothing answers, as in a partition) and thaws
    /// this cluster, for the fault tests; returns its path.
    pub(crate) fn control_script(&self) -> Result<PathBuf> {
        let data = self.dir.join("data");
        let log = self.dir.join("server.log");
        let run_as = if self.as_postgres {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let pg_ctl = self.bin.join("pg_ctl");
        let script = format!(
            r#"#!/bin/sh
# Generated by `cargo xtask`: controls the fault-test PostgreSQL cluster.
set -e
cd "{dir}"
pid() {{ head -n 1 "{data}/postmaster.pid"; }}
case "$1" in
  stop) {run_as}"{pg_ctl}" -D "{data}" -m fast -w stop >/dev/null ;;
  start) {run_as}"{pg_ctl}" -D "{data}" -l "{log}" -w -t 60 -o "{options}" start >/dev/null ;;
  freeze) p=$(pid); kill -STOP "$p"; pkill -STOP -P "$p" || true ;;
  thaw) p=$(pid); pkill -CONT -P "$p" || true; kill -CONT "$p" ;;
  *) echo "usage: $0 stop|start|freeze|thaw" >&2; exit 2 ;;
esac
"#,
            dir = self.dir.display(),
            data = data.display(),
            log = log.display(),
            pg_ctl = pg_ctl.display(),
            options = self.options,
        );
        let path = self.dir.join("control.sh");
        std::fs::write(&path, script).with_context(|| format!("write {}", path.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(path)
    }

    fn server_command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        if self.as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(program);
            cmd
        } else {
            Command::new(program)
        }
    }

    fn run_server(&self, mut cmd: Command, args: impl FnOnce(&mut Command)) -> Result<()> {
        args(&mut cmd);
        // The postgres user may not be able to enter the caller's working directory.
        cmd.current_dir(&self.dir);
        self.checked(&mut cmd, "run a PostgreSQL server tool")
    }

    fn checked(&self, cmd: &mut Command, what: &str) -> Result<()> {
        let output = cmd
            .output()
            .with_context(|| format!("{what}: could not start {cmd:?}"))?;
        if !output.status.success() {
            bail!(
                "{what}: {cmd:?} failed with {}:\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.port != 0 {
            // A frozen cluster cannot stop; thawing one that is not frozen does nothing.
            if let Ok(pid) = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
                && let Some(pid) = pid.lines().next()
            {
                let _ = Command::new("pkill").args(["-CONT", "-P", pid]).status();
                let _ = Command::new("kill").args(["-CONT", pid]).status();
            }
            let data = self.dir.join("data");
            let mut stop = self.server_command("pg_ctl");
            stop.arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "stop"])
                .current_dir(&self.dir);
            if let Err(err) = self.checked(&mut stop, "stop postgres") {
                eprintln!("xtask: {err:#}");
            }
        }
        if let Err(err) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("xtask: could not remove {}: {err}", self.dir.display());
        }
    }
}
