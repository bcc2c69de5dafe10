//! The module's process: started as its user in a private home, supervised, restarted after
//! it exits, stopped.

use crate::ModuleError;
use crate::rpc::{self};
use mcp_wire::jsonrpc::{self};
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use super::home::PrivateHome;
use super::*;

pub(super) fn set_down(shared: &Shared, reason: String) {
    *shared.stdin.lock().unwrap_or_else(PoisonError::into_inner) = None;
    *shared
        .down_reason
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = reason;
}

pub(super) async fn supervise(
    config: StdioConfig,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        if *stop.borrow() {
            return;
        }
        let started = Instant::now();
        let reason = run_once(&config, &shared, &mut stop).await;
        set_down(&shared, reason.clone());
        shared.pending.fail_all(&ModuleError::Failed {
            module: shared.name.clone(),
            reason: reason.clone(),
        });
        if *stop.borrow() {
            return;
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_millis(100);
        }
        tracing::warn!(module = %shared.name, %reason, retry_in = ?backoff, "stdio module is down; restarting");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
        shared
            .restarts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One process life; returns why it ended.
// Long: one process life in order: spawn, handshake, serve, reap.
pub(super) async fn run_once(
    config: &StdioConfig,
    shared: &Arc<Shared>,
    stop: &mut watch::Receiver<bool>,
) -> String {
    let mut command = Command::new(&config.command);
    command
        .args(&config.args)
        .env_clear()
        .envs(child_environment(config, std::env::vars_os()))
        .current_dir(config.cwd.as_deref().unwrap_or(Path::new("/")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Dropped (and removed) when this process life ends.
    let mut _home = None;
    let mut as_user = String::new();
    if let Some(user) = &config.run_as {
        let home = match &user.home {
            Some(home) => home.clone(),
            None => match PrivateHome::create(&config.name, user.uid, user.gid) {
                Ok(home) => _home.insert(home).path().to_path_buf(),
                Err(e) => {
                    return format!("cannot create a home directory for user {}: {e}", user.name);
                }
            },
        };
        // No supplementary groups: the standard library drops them when it sets the user.
        command
            .uid(user.uid)
            .gid(user.gid)
            .env("HOME", home)
            .env("USER", &user.name)
            .env("LOGNAME", &user.name);
        as_user = format!(" as user {} (uid {})", user.name, user.uid);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && !as_user.is_empty() => {
            return format!(
                "cannot start `{}`{as_user}: {e} (the program, and every file it needs, must be readable by that user; see [[modules]] user)",
                config.command
            );
        }
        Err(e) => return format!("cannot start `{}`{as_user}: {e}", config.command),
    };
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return "the process has no stdio pipes".into();
    };
    tokio::spawn(log_stderr(shared.name.clone(), stderr));
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
    });
    let mut reader = tokio::spawn(read_messages(shared.clone(), tx.clone(), stdout));

    // The handshake, sent directly (calls are not accepted until it is done).
    let handshake = async {
        let (id, answer) = shared.pending.register();
        let mut line = jsonrpc::request_bytes(&id, "initialize", &rpc::initialize_params());
        line.push(b'\n');
        tx.send(line).await.map_err(|_| "stdin closed".to_owned())?;
        let result = tokio::time::timeout(Duration::from_secs(30), answer)
            .await
            .map_err(|_| "no answer to initialize within 30 s".to_owned())?
            .map_err(|_| "the process closed during initialize".to_owned())?
            .map_err(|e| e.to_string())?;
        let result = rpc::parse_result(&shared.name, &result).map_err(|e| e.to_string())?;
        let mut line = jsonrpc::notification_bytes::<Value>("notifications/initialized", None);
        line.push(b'\n');
        tx.send(line).await.map_err(|_| "stdin closed".to_owned())?;
        Ok::<Value, String>(result)
    };
    let reason = tokio::select! {
        handshake = handshake => match handshake {
            Ok(result) => {
                tracing::info!(module = %shared.name, server = %result.get("serverInfo").cloned().unwrap_or_default(), "stdio module is up");
                shared.offers.record(&result);
                *shared.stdin.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx.clone());
                let _ = shared.changed.send(());
                None
            }
            Err(reason) => Some(format!("handshake failed: {reason}")),
        },
        status = child.wait() => Some(exited(status)),
        _ = stop.changed() => Some("stopped".to_owned()),
    };
    let reason = match reason {
        Some(reason) => reason,
        None => tokio::select! {
            status = child.wait() => exited(status),
            // A process that closes stdout can no longer answer: treat it as down.
            _ = &mut reader => "the process closed its stdout".to_owned(),
            _ = stop.changed() => "stopped".to_owned(),
        },
    };
    drop(tx);
    set_down(shared, reason.clone());
    stop_child(&mut child).await;
    reader.abort();
    writer.abort();
    reason
}

pub(super) fn exited(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => format!("the process exited ({status})"),
        Err(e) => format!("waiting for the process failed: {e}"),
    }
}

/// Closes stdin's queue, gives the process a moment to exit, then kills it.
pub(super) async fn stop_child(child: &mut Child) {
    if tokio::time::timeout(Duration::from_secs(2), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}
