//! `cargo xtask dist`: what an operator deploys without a Rust toolchain (docs/deployment.md).
//! A tarball (the binary, the migrations, the example configuration, the systemd unit, the
//! Kubernetes manifests, the Containerfile and the docs) and a container image built from
//! `deploy/Containerfile` over a root of only the binary, the C libraries it links, CA roots
//! and a non-root user (with buildah, where it is installed).
//!
//! `cargo xtask test` checks them ([`check`]) with the binary its tests built: the tarball
//! unpacks with everything in it and its binary runs; the systemd unit verifies in a root of
//! its own, is hardened, and its own command lines start the demo; the image builds, holds
//! exactly what it should, and serves `/healthz` where containers can run here; the
//! Kubernetes manifests pass a schema validator (and a broken one does not), and the
//! configuration they carry passes `check-config`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cmd::{cargo, status, target_dir, workspace_root};

/// The image's user and group (the Containerfile's `USER`, the manifests' `runAsUser`).
const IMAGE_UID: &str = "10001";
/// The Kubernetes version the manifests are validated against.
const KUBERNETES: &str = "1.30.0";

/// What `dist` made.
pub(crate) struct Dist {
    /// The gateway's version.
    version: String,
    /// `target/dist`.
    out: PathBuf,
    /// The tarball.
    tarball: PathBuf,
    /// The folder the tarball holds (its one top-level entry).
    name: String,
}

/// `cargo xtask dist [--profile release|dev]`, or `cargo xtask dist --check` (what `cargo
/// xtask test` checks, around the debug binary the tests built).
pub(crate) fn run(args: &[&str]) -> Result<()> {
    let profile = match args {
        [] => "release",
        ["--profile", profile @ ("release" | "dev")] => profile,
        ["--check"] => {
            let python = crate::node::install()?
                .into_iter()
                .find(|(k, _)| k == "MCP_INTEROP_PYTHON")
                .map(|(_, v)| PathBuf::from(v))
                .context("the peers' install named no Python")?;
            return check(&target_dir().join("debug/mcp-gateway"), &python);
        }
        _ => bail!("usage: cargo xtask dist [--profile release|dev | --check]"),
    };
    let mut cmd = cargo();
    cmd.args([
        "build",
        "--locked",
        "--package",
        "mcp-gateway",
        "--profile",
        profile,
    ]);
    status(cmd)?;
    let folder = if profile == "dev" { "debug" } else { profile };
    let dist = package(&target_dir().join(folder).join("mcp-gateway"))?;
    println!("xtask dist: {}", dist.tarball.display());
    match image(&dist)? {
        Some(archive) => println!("xtask dist: {} (OCI archive)", archive.display()),
        None => println!(
            "xtask dist: buildah was not found, so no image was built; its root is in {}: build it with `buildah bud -f deploy/Containerfile -t mcp-gateway:{} {}` (or podman/docker build with the same file and folder)",
            dist.out.join("image-root").display(),
            dist.version,
            dist.out.display()
        ),
    }
    Ok(())
}

/// The workspace's version (`[workspace.package] version`).
fn version() -> Result<String> {
    let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml"))?;
    let package = manifest
        .split("[workspace.package]")
        .nth(1)
        .context("Cargo.toml has no [workspace.package]")?;
    package
        .lines()
        .find_map(|l| l.trim().strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_owned)
        .context("[workspace.package] has no version")
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Copies every file of `dir` whose name ends in one of `ends` into `to`.
fn copy_files(dir: &Path, ends: &[&str], to: &Path) -> Result<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_file() && ends.iter().any(|e| name.ends_with(e)) {
            copy(&path, &to.join(name))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Lays out the tarball's folder and the image's root around `binary`, and packs the tarball.
pub(crate) fn package(binary: &Path) -> Result<Dist> {
    if !binary.is_file() {
        bail!("{} was not built", binary.display());
    }
    let version = version()?;
    let root = workspace_root();
    let out = target_dir().join("dist");
    let name = format!("mcp-gateway-{version}-{}-linux", std::env::consts::ARCH);
    let folder = out.join(&name);
    let _ = std::fs::remove_dir_all(&folder);
    copy(binary, &folder.join("bin/mcp-gateway"))?;
    copy_files(
        &root.join("crates/elicitation-store/migrations"),
        &[".sql"],
        &folder.join("migrations"),
    )?;
    copy(
        &root.join("mcp-gateway.example.toml"),
        &folder.join("etc/gateway.example.toml"),
    )?;
    copy(
        &root.join("deploy/systemd/mcp-gateway.service"),
        &folder.join("systemd/mcp-gateway.service"),
    )?;
    copy_files(
        &root.join("deploy/kubernetes"),
        &[".yaml"],
        &folder.join("kubernetes"),
    )?;
    copy(
        &root.join("deploy/Containerfile"),
        &folder.join("Containerfile"),
    )?;
    copy_files(&root.join("docs"), &[".md", ".png"], &folder.join("docs"))?;
    for file in ["README.md", "LICENSE", "CHANGELOG.md"] {
        copy(&root.join(file), &folder.join(file))?;
    }
    let tarball = out.join(format!("{name}.tar.gz"));
    let mut tar = Command::new("tar");
    tar.args([
        "--sort=name",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "--mtime=@0",
        "-czf",
    ])
    .arg(&tarball)
    .arg("-C")
    .arg(&out)
    .arg(&name);
    status(tar)?;
    image_root(binary, &out.join("image-root"))?;
    Ok(Dist {
        version,
        out,
        tarball,
        name,
    })
}

/// The shared objects `binary` loads (its ELF interpreter among them), as `ldd` names them.
fn linked(binary: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .context("run ldd (Debian: libc-bin)")?;
    if !output.status.success() {
        bail!("ldd {} failed", binary.display());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut libraries = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.trim().split(' ').next().unwrap_or(""),
            None => line.trim().split(' ').next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libraries.push(PathBuf::from(path));
        }
    }
    if libraries.is_empty() {
        bail!("ldd named no library of {}:\n{text}", binary.display());
    }
    Ok(libraries)
}

/// The image's root: the binary, what it links, CA roots, and the user it runs as.
fn image_root(binary: &Path, root: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(root);
    copy(binary, &root.join("usr/local/bin/mcp-gateway"))?;
    for library in linked(binary)? {
        let inside = root.join(library.strip_prefix("/").unwrap_or(&library));
        copy(&library, &inside)?;
    }
    let roots = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if !roots.is_file() {
        bail!(
            "{} is missing: the image carries the CA roots it verifies TLS servers against (Debian: apt-get install ca-certificates)",
            roots.display()
        );
    }
    copy(roots, &root.join("etc/ssl/certs/ca-certificates.crt"))?;
    std::fs::write(
        root.join("etc/passwd"),
        format!(
            "mcp-gateway:x:{IMAGE_UID}:{IMAGE_UID}:mcp-gateway:/var/lib/mcp-gateway:/nonexistent\n"
        ),
    )?;
    std::fs::write(
        root.join("etc/group"),
        format!("mcp-gateway:x:{IMAGE_UID}:\n"),
    )?;
    for dir in ["tmp", "var/lib/mcp-gateway"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
    Ok(())
}

/// buildah with the storage and isolation that work inside an unprivileged container too.
fn buildah(args: &[&str]) -> Command {
    let mut cmd = Command::new("buildah");
    cmd.args(["--storage-driver", "vfs"]).args(args);
    cmd
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Builds the image from the Containerfile and writes it as an OCI archive; `None` without
/// buildah.
fn image(dist: &Dist) -> Result<Option<PathBuf>> {
    if !have("buildah") {
        return Ok(None);
    }
    let tag = format!("localhost/mcp-gateway:{}", dist.version);
    let mut bud = buildah(&["bud", "--isolation", "chroot", "--quiet", "-t", &tag, "-f"]);
    bud.arg(workspace_root().join("deploy/Containerfile"))
        .arg(&dist.out)
        .stdout(Stdio::null());
    status(bud)?;
    let archive = dist
        .out
        .join(format!("mcp-gateway-{}-image.tar", dist.version));
    let _ = std::fs::remove_file(&archive);
    let mut push = buildah(&["push", "--quiet", &tag]);
    push.arg(format!(
        "oci-archive:{}:mcp-gateway:{}",
        archive.display(),
        dist.version
    ));
    push.stdout(Stdio::null());
    status(push)?;
    Ok(Some(archive))
}

/// What `cargo xtask test` checks of the release artefacts, made around `binary` (the one
/// its tests built: a release build would double CI's time for nothing the tests do not
/// already cover).
pub(crate) fn check(binary: &Path, python: &Path) -> Result<()> {
    let dist = package(binary)?;
    let scratch = target_dir().join("dist-check");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let unpacked = check_tarball(&dist, &scratch)?;
    check_systemd(&unpacked, &scratch)?;
    check_image(&dist, &scratch)?;
    check_kubernetes(&unpacked, python, &scratch)?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// The tarball unpacks to one folder with everything in it, and its binary runs.
fn check_tarball(dist: &Dist, scratch: &Path) -> Result<PathBuf> {
    let mut tar = Command::new("tar");
    tar.arg("-xzf").arg(&dist.tarball).arg("-C").arg(scratch);
    status(tar)?;
    let unpacked = scratch.join(&dist.name);
    for file in [
        "bin/mcp-gateway",
        "etc/gateway.example.toml",
        "systemd/mcp-gateway.service",
        "kubernetes/deployment.yaml",
        "kubernetes/migrate-job.yaml",
        "kubernetes/poddisruptionbudget.yaml",
        "Containerfile",
        "docs/deployment.md",
        "docs/configuration.md",
        "README.md",
        "LICENSE",
    ] {
        if !unpacked.join(file).is_file() {
            bail!("the tarball has no {file}");
        }
    }
    let migrations = |dir: &Path| -> Result<usize> {
        Ok(std::fs::read_dir(dir)?
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
            })
            .count())
    };
    let (packed, source) = (
        migrations(&unpacked.join("migrations"))?,
        migrations(&workspace_root().join("crates/elicitation-store/migrations"))?,
    );
    if packed != source || packed == 0 {
        bail!("the tarball has {packed} migrations, the store {source}");
    }
    let gateway = unpacked.join("bin/mcp-gateway");
    let output = Command::new(&gateway).arg("--version").output()?;
    let printed = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !printed.contains(&dist.version) {
        bail!(
            "the tarball's binary says {printed:?}, not version {}",
            dist.version
        );
    }
    let mut check = Command::new(&gateway);
    check
        .arg("check-config")
        .arg(unpacked.join("etc/gateway.example.toml"))
        .stdout(Stdio::null());
    status(check).context("the tarball's example configuration")?;
    println!(
        "xtask test: the tarball {} unpacks whole and its binary runs",
        dist.tarball.display()
    );
    Ok(unpacked)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A demo configuration on a free loopback port.
fn demo_config(scratch: &Path) -> Result<(PathBuf, u16)> {
    let port = free_port()?;
    let config = scratch.join(format!("demo-{port}.toml"));
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\n[auth]\nmode = \"none\"\n[[modules]]\nname = \"demo\"\ntransport = \"demo\"\n"
        ),
    )?;
    Ok((config, port))
}

/// Whether `GET /healthz` on `port` answers 200 within `within`, while `child` runs.
fn serves_health(port: u16, child: &mut Child, within: Duration) -> Result<bool> {
    use std::io::{Read, Write};
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(exit) = child.try_wait()? {
            bail!("it exited with {exit} before serving /healthz");
        }
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            let _ = stream.write_all(
                b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            );
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return Ok(true);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(false)
}

/// Ends `child` with SIGTERM (as systemd and Kubernetes stop it), and waits.
fn stop(mut child: Child) -> Result<()> {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(40);
    while Instant::now() < deadline {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    bail!("it did not stop within 40 s of SIGTERM")
}

/// A unit's `KEY=` lines' values.
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .collect()
}

/// The unit verifies in a root of its own (systemd's units, the binary where it says), is
/// hardened (`systemd-analyze security`), and its own command lines, pointed at the
/// unpacked binary and a demo configuration, check it and start the demo.
fn check_systemd(unpacked: &Path, scratch: &Path) -> Result<()> {
    ensure(
        "systemd-analyze",
        "systemd",
        "the systemd unit is verified with it",
    )?;
    let root = scratch.join("systemd-root");
    let unit_path = unpacked.join("systemd/mcp-gateway.service");
    copy(
        &unit_path,
        &root.join("etc/systemd/system/mcp-gateway.service"),
    )?;
    copy(
        &unpacked.join("bin/mcp-gateway"),
        &root.join("usr/local/bin/mcp-gateway"),
    )?;
    copy(Path::new("/bin/kill"), &root.join("bin/kill"))?;
    let mut units = Command::new("cp");
    units
        .args(["-r", "/usr/lib/systemd/system"])
        .arg(root.join("usr/lib/systemd"));
    std::fs::create_dir_all(root.join("usr/lib/systemd"))?;
    status(units)?;
    let mut verify = Command::new("systemd-analyze");
    verify
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg(root.join("etc/systemd/system/mcp-gateway.service"));
    status(verify).context("systemd-analyze verify of the unit")?;
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(format!("--root={}", root.display()))
        .arg("mcp-gateway.service")
        .output()?;
    let text = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for mcp-gateway.service:")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("systemd-analyze security said no exposure level:\n{text}"))?;
    if exposure > 2.0 {
        bail!(
            "the unit's exposure level is {exposure} (more than 2.0): a hardening option was lost"
        );
    }
    // Its own command lines, pointed at the unpacked binary and a demo configuration.
    let unit = std::fs::read_to_string(&unit_path)?;
    let (config, port) = demo_config(scratch)?;
    let command = |line: &str| -> Result<Command> {
        let line = line
            .replace(
                "/usr/local/bin/mcp-gateway",
                &unpacked.join("bin/mcp-gateway").display().to_string(),
            )
            .replace(
                "/etc/mcp-gateway/gateway.toml",
                &config.display().to_string(),
            );
        let mut words = line.split_whitespace();
        let mut cmd = Command::new(words.next().context("an empty command line")?);
        cmd.args(words);
        Ok(cmd)
    };
    for pre in unit_values(&unit, "ExecStartPre") {
        let mut pre = command(pre)?;
        pre.stdout(Stdio::null());
        status(pre).context("the unit's ExecStartPre")?;
    }
    let [start] = unit_values(&unit, "ExecStart")[..] else {
        bail!("the unit has not exactly one ExecStart");
    };
    let mut child = command(start)?
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let served = serves_health(port, &mut child, Duration::from_secs(30));
    stop(child)?;
    if !served? {
        bail!("the unit's ExecStart did not serve /healthz within 30 s");
    }
    println!(
        "xtask test: the systemd unit verifies (exposure {exposure}) and its ExecStart serves the demo"
    );
    Ok(())
}

/// Installs `package` with apt when `program` is missing and this runs as root (as CI
/// does); otherwise says how. `why` says what it is for.
fn ensure(program: &str, package: &str, why: &str) -> Result<()> {
    if have(program) {
        return Ok(());
    }
    if !crate::cmd::running_as_root() || !have("apt-get") {
        bail!("{program} was not found: {why} (Debian: apt-get install {package})");
    }
    println!("xtask test: installing {package} (apt-get): {why}");
    let install = || {
        let mut install = Command::new("apt-get");
        install
            .args(["install", "-y", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null());
        status(install)
    };
    if install().is_err() {
        let mut update = Command::new("apt-get");
        update.arg("update").stdout(Stdio::null());
        status(update)?;
        install()?;
    }
    Ok(())
}

/// Every file and folder under `root`, relative, sorted.
fn listing(root: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let relative = path.strip_prefix(root)?.display().to_string();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
                out.push(format!("{relative}/"));
            } else {
                out.push(relative);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The image builds from the Containerfile and holds exactly its root (the binary, what it
/// links, CA roots, the user), running as that user; where containers can run here, it
/// serves `/healthz` (with a demo configuration copied into a container of it).
fn check_image(dist: &Dist, scratch: &Path) -> Result<()> {
    ensure("buildah", "buildah", "the container image is built with it")?;
    let archive = image(dist)?.context("buildah is installed but built no image")?;
    let tag = format!("localhost/mcp-gateway:{}", dist.version);
    let inspect = buildah(&[
        "inspect",
        "--type",
        "image",
        "--format",
        "{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}",
        &tag,
    ])
    .output()?;
    let config = String::from_utf8_lossy(&inspect.stdout).trim().to_owned();
    if config != format!("{IMAGE_UID}:{IMAGE_UID} [/usr/local/bin/mcp-gateway]") {
        bail!("the image runs {config:?}, not the gateway as user {IMAGE_UID}");
    }
    let container = String::from_utf8_lossy(&buildah(&["from", "--quiet", &tag]).output()?.stdout)
        .trim()
        .to_owned();
    if container.is_empty() {
        bail!("buildah could not make a container of {tag}");
    }
    let result = (|| -> Result<String> {
        let mounted = buildah(&["mount", &container]).output()?;
        let mountpoint = PathBuf::from(String::from_utf8_lossy(&mounted.stdout).trim());
        let (inside, wanted) = (
            listing(&mountpoint)?,
            listing(&dist.out.join("image-root"))?,
        );
        let _ = buildah(&["umount", &container])
            .stdout(Stdio::null())
            .status();
        if inside != wanted {
            bail!("the image holds {inside:?}, not only its root {wanted:?}");
        }
        let (config, port) = demo_config(scratch)?;
        let mut copy = buildah(&["copy", "--quiet", &container]);
        copy.arg(&config)
            .arg("/etc/mcp-gateway/gateway.toml")
            .stdout(Stdio::null());
        status(copy)?;
        let mut run = buildah(&[
            "run",
            "--isolation",
            "chroot",
            "--user",
            &format!("{IMAGE_UID}:{IMAGE_UID}"),
            &container,
            "--",
            "/usr/local/bin/mcp-gateway",
            "--config",
            "/etc/mcp-gateway/gateway.toml",
        ]);
        let mut child = run.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
        let served = serves_health(port, &mut child, Duration::from_secs(30));
        let stopped = stop(child);
        Ok(match (served, stopped) {
            (Ok(true), Ok(())) => "and a container of it serves /healthz".to_owned(),
            (Ok(true), Err(e)) => bail!("a container of the image served /healthz but {e}"),
            (Ok(false), _) => bail!("a container of the image did not serve /healthz within 30 s"),
            // The container could not run here (no chroot, no namespaces): the contents are
            // what was checked.
            (Err(e), _) => format!(
                "and its contents are exactly its root; a container of it could not be started here ({e:#})"
            ),
        })
    })();
    let _ = buildah(&["rm", &container]).stdout(Stdio::null()).status();
    let _ = buildah(&["rmi", "--force", &tag])
        .stdout(Stdio::null())
        .status();
    let said = result?;
    println!(
        "xtask test: the container image {} builds from deploy/Containerfile, runs as {IMAGE_UID}, {said}",
        archive.display()
    );
    let _ = std::fs::remove_file(&archive);
    Ok(())
}

/// The manifests pass a Kubernetes schema validator (strict: no unknown field), a manifest
/// with a wrong field does not, `kubectl kustomize` renders the kustomization into objects
/// that pass too (where kubectl is installed), and the configuration in the ConfigMap passes
/// `check-config`.
fn check_kubernetes(unpacked: &Path, python: &Path, scratch: &Path) -> Result<()> {
    let validator = python.with_file_name("kubernetes-validate");
    let validate = |files: &[PathBuf], quiet: bool| -> Result<bool> {
        let mut cmd = Command::new(&validator);
        if quiet {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
        Ok(cmd
            .args(["--strict", "--quiet", "-k", KUBERNETES])
            .args(files)
            .status()
            .with_context(|| format!("run {}", validator.display()))?
            .success())
    };
    let dir = workspace_root().join("deploy/kubernetes");
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("kustomization.yaml")
        })
        .collect();
    manifests.sort();
    if manifests.len() < 6 || !validate(&manifests, false)? {
        bail!(
            "the Kubernetes manifests in {} do not pass the schema validator",
            dir.display()
        );
    }
    // The validator catches a wrong field (so it is validating at all).
    let broken = scratch.join("broken-deployment.yaml");
    std::fs::write(
        &broken,
        std::fs::read_to_string(dir.join("deployment.yaml"))?.replace("replicas: 3", "replica: 3"),
    )?;
    if validate(std::slice::from_ref(&broken), true)? {
        bail!("the schema validator passed a Deployment with a misspelled field");
    }
    if have("kubectl") {
        let rendered = Command::new("kubectl")
            .arg("kustomize")
            .arg(&dir)
            .output()?;
        if !rendered.status.success() {
            bail!(
                "kubectl kustomize {} failed: {}",
                dir.display(),
                String::from_utf8_lossy(&rendered.stderr)
            );
        }
        let file = scratch.join("rendered.yaml");
        std::fs::write(&file, &rendered.stdout)?;
        if !validate(std::slice::from_ref(&file), false)? {
            bail!("the rendered kustomization does not pass the schema validator");
        }
    }
    // The gateway configuration the ConfigMap carries is one the gateway takes.
    let extract = Command::new(python)
        .arg("-c")
        .arg("import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['data']['gateway.toml'])")
        .arg(dir.join("configmap.yaml"))
        .output()?;
    if !extract.status.success() {
        bail!(
            "could not read gateway.toml from the ConfigMap: {}",
            String::from_utf8_lossy(&extract.stderr)
        );
    }
    let config = scratch.join("configmap-gateway.toml");
    std::fs::write(&config, &extract.stdout)?;
    let mut check = Command::new(unpacked.join("bin/mcp-gateway"));
    check
        .arg("check-config")
        .arg(&config)
        .env("DATABASE_URL", "postgres://mcp_gateway@db.invalid/mcp")
        .env(
            "MCP_GATEWAY_SEAL_KEYS",
            "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=",
        )
        .stdout(Stdio::null());
    status(check).context("the ConfigMap's gateway.toml")?;
    println!(
        "xtask test: the Kubernetes manifests pass the schema validator (Kubernetes {KUBERNETES}, strict), and their configuration check-config"
    );
    Ok(())
}
