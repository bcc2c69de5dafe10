//! `mcp-bench soak`: the release gateway on PostgreSQL under a mixed load for N minutes,
//! sampled every 30 s (docs/reliability.md). The load: read-only calls; destructive calls
//! approved over REST and re-called; native 2026-07-28 confirmations (`input_required`,
//! answered in band); declines; confirmations left to expire and then re-called; 2025-era
//! sessions opened and ended; a stdio module killed mid-call and restarted by the gateway.
//!
//! It passes when, after warm-up, the gateway's RSS, open file descriptors, threads, open
//! connections and the database's connections each stay within 5 % (counts within 5 % or
//! 2, whichever is more), and the upstream's own count of executed `delete`s equals the
//! confirmations approved, with no `n` executed twice.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use elicitation_store::test_support::TestDb;
use http::Request;
use http_body_util::Full;
use mcp_auth::token_sha256;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::process::Command;

use crate::load;
use crate::peers::{AGENT, HUMAN, Proc, SCRAPER, SEAL_KEY, modern, open_session_as, start};
use crate::procstat;
use crate::upstream;

/// A token with both `tools:call` and `elicitations:respond`: a client that confirms in band.
const CLIENT: &str = "soak-client-token";

/// What the soak did, counted by the driver.
#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    read_failures: AtomicU64,
    approved_rest: AtomicU64,
    approved_native: AtomicU64,
    declined: AtomicU64,
    expired: AtomicU64,
    sessions: AtomicU64,
    module_kills: AtomicU64,
    /// Anything that did not answer as it must (each also printed).
    wrong: AtomicU64,
}

/// Held (shared) by every request in flight; the sampler takes it exclusively, so each
/// sample sees the gateway with no request of the load in flight, and the counts of
/// descriptors and connections measure what stays, not what happens to be open.
static QUIET: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// One request and its answer as JSON (`null` if it is not), not counted in flight: for a
/// caller that already holds [`QUIET`] (a second read lock could wait behind the sampler).
async fn exchange(gateway: SocketAddr, request: Request<Full<Bytes>>) -> Result<(u16, Value)> {
    let (status, _, body) = load::once(gateway, request).await?;
    Ok((
        status.as_u16(),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}

/// The next `n` for a destructive call: each is unique, so a double execution shows.
static NEXT: AtomicU64 = AtomicU64::new(1);

fn rest(method: &str, path: &str, token: &str, body: Value) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a valid request")
}

/// One request of the load, counted in flight.
async fn json_of(gateway: SocketAddr, request: Request<Full<Bytes>>) -> Result<(u16, Value)> {
    let _in_flight = QUIET.read().await;
    exchange(gateway, request).await
}

/// A new destructive call by the agent (a unique `n`): its arguments and, if it was held as
/// it must be, the confirmation's id (otherwise it is counted as wrong).
async fn hold(gateway: SocketAddr, counts: &Counts) -> Result<(Value, Option<String>)> {
    let args = json!({"n": NEXT.fetch_add(1, Ordering::Relaxed)});
    let (_, reply) = json_of(
        gateway,
        modern("up__delete", Some(AGENT), args.clone(), json!({})),
    )
    .await?;
    let id = held(&reply);
    if id.is_none() {
        wrong(counts, "a destructive call was not held", &reply);
    }
    Ok((args, id))
}

/// The agent's re-call of `args` with confirmation `id`.
async fn recall(gateway: SocketAddr, args: Value, id: &str) -> Result<Value> {
    let request = modern(
        "up__delete",
        Some(AGENT),
        args,
        json!({"confirmation_id": id}),
    );
    Ok(json_of(gateway, request).await?.1)
}

fn held(reply: &Value) -> Option<String> {
    reply["result"]["structuredContent"]["elicitation"]["id"]
        .as_str()
        .map(str::to_owned)
}

fn ran(reply: &Value) -> bool {
    reply["result"]["content"][0]["text"] == "ok"
}

fn wrong(counts: &Counts, what: &str, reply: &impl std::fmt::Display) {
    counts.wrong.fetch_add(1, Ordering::Relaxed);
    eprintln!("soak: {what}: {reply}");
}

/// Held → `answer` over REST → re-call with the confirmation.
async fn through_rest(gateway: SocketAddr, counts: &Counts, approve: bool) -> Result<()> {
    let (args, Some(id)) = hold(gateway, counts).await? else {
        return Ok(());
    };
    let (status, answer) = json_of(
        gateway,
        rest(
            "POST",
            &format!("/v1/mcp/elicitations/{id}/respond"),
            HUMAN,
            json!({"confirmed": approve}),
        ),
    )
    .await?;
    if status != 200 {
        wrong(counts, "an answer over REST was refused", &answer);
        return Ok(());
    }
    if approve {
        counts.approved_rest.fetch_add(1, Ordering::Relaxed);
    }
    let again = recall(gateway, args, &id).await?;
    match (approve, ran(&again)) {
        (true, true) => {}
        (false, false) if again["result"]["structuredContent"]["user_rejected"] == true => {
            counts.declined.fetch_add(1, Ordering::Relaxed);
        }
        _ => wrong(
            counts,
            "a re-call did not answer as its confirmation says",
            &again,
        ),
    }
    Ok(())
}

/// A 2026-07-28 `tools/call` by a client that confirms in band, with `retry`'s fields
/// (`requestState`, `inputResponses`) added to its params when it is a retry.
fn native_call(args: &Value, retry: Option<Value>) -> Request<Full<Bytes>> {
    let mut request = modern("up__delete", Some(CLIENT), args.clone(), json!({}));
    let mut params = json!({"name": "up__delete", "arguments": args, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}});
    if let (Some(Value::Object(retry)), Some(params)) = (retry, params.as_object_mut()) {
        params.extend(retry);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    *request.body_mut() = Full::new(Bytes::from(body.to_string()));
    request
}

/// A 2026-07-28 call confirmed in band: `input_required`, then the retry with the answer.
async fn native(gateway: SocketAddr, counts: &Counts) -> Result<()> {
    let args = json!({"n": NEXT.fetch_add(1, Ordering::Relaxed)});
    let (_, first) = json_of(gateway, native_call(&args, None)).await?;
    let Some(state) = first["result"]["requestState"].as_str() else {
        wrong(counts, "a native client was not asked", &first);
        return Ok(());
    };
    let retry = json!({"requestState": state, "inputResponses": {"confirm": {"action": "accept", "content": {"confirmed": true}}}});
    let (_, done) = json_of(gateway, native_call(&args, Some(retry))).await?;
    if ran(&done) {
        counts.approved_native.fetch_add(1, Ordering::Relaxed);
    } else {
        wrong(counts, "an accepted native confirmation did not run", &done);
    }
    Ok(())
}

/// Held and never answered; re-called after its TTL: refused, never run.
async fn expiring(gateway: SocketAddr, counts: &Counts, ttl: Duration) -> Result<()> {
    let (args, Some(id)) = hold(gateway, counts).await? else {
        return Ok(());
    };
    tokio::time::sleep(ttl + Duration::from_secs(2)).await;
    let again = recall(gateway, args, &id).await?;
    if again["result"]["structuredContent"]["confirmation_expired"] == true {
        counts.expired.fetch_add(1, Ordering::Relaxed);
    } else {
        wrong(
            counts,
            "a re-call after the expiry was not refused as expired",
            &again,
        );
    }
    Ok(())
}

/// A 2025-era session: initialize, list, end.
async fn session(gateway: SocketAddr, counts: &Counts) -> Result<()> {
    let id = {
        let _in_flight = QUIET.read().await;
        open_session_as(gateway, AGENT).await?
    };
    let list = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &id)
        .header("authorization", format!("Bearer {AGENT}"))
        .body(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        )))?;
    let (_, listed) = json_of(gateway, list).await?;
    if listed["result"]["tools"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        wrong(counts, "a session's tools/list", &listed);
    }
    let end = Request::builder()
        .method("DELETE")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("mcp-session-id", &id)
        .header("authorization", format!("Bearer {AGENT}"))
        .body(Full::new(Bytes::new()))?;
    let (status, _) = json_of(gateway, end).await?;
    if (200..300).contains(&status) {
        counts.sessions.fetch_add(1, Ordering::Relaxed);
    } else {
        wrong(counts, "ending a session", &status);
    }
    Ok(())
}

/// Kills the stdio module mid-call (its `crash` tool exits the process), then waits until
/// the gateway has restarted it.
async fn kill_module(gateway: SocketAddr, counts: &Counts) -> Result<()> {
    // In flight until the module is back, so no sample sees it down (its pipes closed).
    let _in_flight = QUIET.read().await;
    let json_of = exchange;
    let (_, crashed) = json_of(
        gateway,
        modern("crashy__crash", Some(AGENT), json!({}), json!({})),
    )
    .await?;
    if crashed["result"]["isError"] != true {
        wrong(counts, "a call whose module died did not fail", &crashed);
    }
    counts.module_kills.fetch_add(1, Ordering::Relaxed);
    for _ in 0..240 {
        let (_, echoed) = json_of(
            gateway,
            modern(
                "crashy__echo",
                Some(AGENT),
                json!({"text": "back"}),
                json!({}),
            ),
        )
        .await?;
        if echoed["result"]["content"][0]["text"] == "back" {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    wrong(
        counts,
        "the killed module did not come back within 60 s",
        &"",
    );
    Ok(())
}

/// One sample of the gateway's resources.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_mib: f64,
    fds: f64,
    threads: f64,
    connections: f64,
    db_connections: f64,
}

fn count_dir(path: &str) -> f64 {
    std::fs::read_dir(path).map_or(0.0, |d| d.count() as f64)
}

async fn metric(gateway: SocketAddr, name: &str) -> Result<f64> {
    let request = Request::builder()
        .uri("/metrics")
        .header("host", "127.0.0.1")
        .header("authorization", format!("Bearer {SCRAPER}"))
        .body(Full::new(Bytes::new()))?;
    let (_, _, body) = load::once(gateway, request).await?;
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        })
        .reduce(|a, b| a + b)
        .with_context(|| format!("{name} is not in /metrics"))
}

async fn sample(gateway: &Proc, admin: &tokio_postgres::Client, start: Instant) -> Result<Sample> {
    let pid = gateway.pid();
    let (rss_mib, _) = procstat::rss_mib(pid);
    let db: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await?
        .get(0);
    Ok(Sample {
        at: start.elapsed(),
        rss_mib,
        fds: count_dir(&format!("/proc/{pid}/fd")),
        threads: count_dir(&format!("/proc/{pid}/task")),
        // The sampling request itself is one connection.
        connections: metric(gateway.addr, "mcp_gateway_connections").await? - 1.0,
        db_connections: db as f64,
    })
}

/// Options of `mcp-bench soak`.
pub(crate) struct Options {
    pub(crate) gateway: PathBuf,
    pub(crate) minutes: f64,
    pub(crate) sample_every: Duration,
}

pub(crate) async fn run(options: Options) -> Result<()> {
    let db = TestDb::new().await;
    let admin = db.admin().await;
    let dir = std::env::temp_dir().join(format!("mcp-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let upstream_addr = listener.local_addr()?;
    tokio::spawn(upstream::serve(listener));
    let ttl = Duration::from_secs(10);
    // Copied next to the configuration: a root gateway runs the module as `nobody`, who may
    // not be able to enter the checkout.
    let crashy = dir.join("crashy_module.py");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../crates/mcp-http/tests/fixtures/crashy_module.py"
        ),
        &crashy,
    )?;
    let crashy = crashy.display();
    let config = format!(
        r#"listen = "127.0.0.1:0"
[store]
kind = "postgres"
database_url = "{url}"
seal_keys = ["{SEAL_KEY}"]
sweep_interval = "2s"
retention = "1m"
[gate]
default_ttl = "{ttl}s"
[http]
session_max_age = "2m"
[auth]
mode = "tokens"
[[auth.tokens]]
subject = "soak"
token_sha256 = "{agent}"
scopes = ["tools:call"]
[[auth.tokens]]
subject = "soak"
token_sha256 = "{human}"
scopes = ["elicitations:respond"]
[[auth.tokens]]
subject = "soak"
token_sha256 = "{client}"
scopes = ["tools:call", "elicitations:respond"]
[[auth.tokens]]
subject = "scraper"
token_sha256 = "{scraper}"
scopes = ["metrics:read"]
[limits]
calls_per_minute = 0
confirmations_per_minute = 0
[[modules]]
name = "up"
transport = "http"
url = "http://{upstream_addr}/mcp"
trust_annotations = true
[[modules]]
name = "crashy"
transport = "stdio"
command = "python3"
args = ["{crashy}"]
trust_annotations = true
"#,
        url = TestDb::url(&db.writer),
        ttl = ttl.as_secs(),
        agent = token_sha256(AGENT),
        human = token_sha256(HUMAN),
        client = token_sha256(CLIENT),
        scraper = token_sha256(SCRAPER),
    );
    let path = dir.join("soak.toml");
    std::fs::write(&path, config)?;
    // It holds a seal key: readable by the gateway's user only (a root gateway refuses to
    // start when its stdio module's user, `nobody`, could read it).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    let mut command = Command::new(&options.gateway);
    command.arg("--config").arg(&path).env("RUST_LOG", "error");
    let gateway = start(command, "mcp-gateway listening on ").await?;
    let addr = gateway.addr;
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(options.minutes * 60.0);
    println!(
        "soak: {} minutes against {addr} (PostgreSQL {}), sampling every {} s",
        options.minutes,
        db.name,
        options.sample_every.as_secs()
    );

    // The load: each worker loops until the deadline.
    let mut workers = Vec::new();
    let worker = |pause: Duration, job: fn(SocketAddr, Arc<Counts>) -> futures_job::Job| {
        let counts = counts.clone();
        tokio::spawn(async move {
            while Instant::now() < deadline {
                if let Err(e) = job(addr, counts.clone()).await {
                    wrong(&counts, "a request failed", &format!("{e:#}"));
                }
                tokio::time::sleep(pause).await;
            }
        })
    };
    for _ in 0..2 {
        workers.push(worker(Duration::from_millis(2), |addr, counts| {
            Box::pin(async move {
                let (_, reply) =
                    json_of(addr, modern("up__read", Some(AGENT), json!({}), json!({}))).await?;
                if ran(&reply) {
                    counts.reads.fetch_add(1, Ordering::Relaxed);
                } else {
                    counts.read_failures.fetch_add(1, Ordering::Relaxed);
                    wrong(&counts, "a read-only call", &reply);
                }
                Ok(())
            })
        }));
    }
    workers.push(worker(Duration::from_millis(20), |addr, counts| {
        Box::pin(async move { through_rest(addr, &counts, true).await })
    }));
    workers.push(worker(Duration::from_millis(20), |addr, counts| {
        Box::pin(async move { native(addr, &counts).await })
    }));
    workers.push(worker(Duration::from_millis(200), |addr, counts| {
        Box::pin(async move { through_rest(addr, &counts, false).await })
    }));
    workers.push(worker(Duration::from_millis(500), |addr, counts| {
        Box::pin(async move { expiring(addr, &counts, Duration::from_secs(10)).await })
    }));
    workers.push(worker(Duration::from_millis(100), |addr, counts| {
        Box::pin(async move { session(addr, &counts).await })
    }));
    // Every 75 s: a module up for more than a minute restarts at once (one that dies
    // sooner backs off, up to 30 s).
    workers.push(worker(Duration::from_secs(75), |addr, counts| {
        Box::pin(async move { kill_module(addr, &counts).await })
    }));

    let mut samples = Vec::new();
    let mut next = started;
    while Instant::now() < deadline {
        next += options.sample_every;
        tokio::time::sleep_until(next.into()).await;
        let s = {
            let _quiet = QUIET.write().await;
            // Closed connections take a moment to be closed on the gateway's side too.
            tokio::time::sleep(Duration::from_millis(300)).await;
            sample(&gateway, &admin, started).await?
        };
        println!(
            "soak: t={:>5.0}s rss={:.1} MiB fds={} threads={} connections={} db={} | reads={} rest={} native={} declined={} expired={} sessions={} kills={} executed={} wrong={}",
            s.at.as_secs_f64(),
            s.rss_mib,
            s.fds,
            s.threads,
            s.connections,
            s.db_connections,
            counts.reads.load(Ordering::Relaxed),
            counts.approved_rest.load(Ordering::Relaxed),
            counts.approved_native.load(Ordering::Relaxed),
            counts.declined.load(Ordering::Relaxed),
            counts.expired.load(Ordering::Relaxed),
            counts.sessions.load(Ordering::Relaxed),
            counts.module_kills.load(Ordering::Relaxed),
            upstream::deletes().0,
            counts.wrong.load(Ordering::Relaxed),
        );
        samples.push(s);
    }
    for w in workers {
        let _ = w.await;
    }
    // Let the last answers settle, then count.
    tokio::time::sleep(Duration::from_secs(1)).await;
    verdict(&samples, &counts)
}

/// A sampled measure: its name, how to read it, and whether it is a count.
type Measure = (&'static str, fn(&Sample) -> f64, bool);

fn verdict(samples: &[Sample], counts: &Counts) -> Result<()> {
    let approved = counts.approved_rest.load(Ordering::Relaxed)
        + counts.approved_native.load(Ordering::Relaxed);
    let (executed, twice) = upstream::deletes();
    let mut report = String::new();
    let mut failed = Vec::new();
    // Warm-up: the first quarter of the run or its first 3 minutes, whichever is longer
    // (ended sessions are remembered for `session_max_age`, 2 minutes here).
    let warm = samples
        .iter()
        .position(|s| s.at >= Duration::from_secs(180))
        .unwrap_or(samples.len())
        .max(samples.len() / 4);
    let steady = samples.get(warm..).unwrap_or_default();
    if steady.len() < 2 {
        bail!(
            "too few samples after warm-up ({}); soak longer",
            steady.len()
        );
    }
    let measures: [Measure; 5] = [
        ("RSS (MiB)", |s| s.rss_mib, false),
        ("open file descriptors", |s| s.fds, true),
        ("threads", |s| s.threads, true),
        ("open connections", |s| s.connections, true),
        ("database connections", |s| s.db_connections, true),
    ];
    let _ = writeln!(
        report,
        "| measure | after warm-up: median | min | max | furthest from the median | allowed |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|");
    for (name, value, count) in measures {
        let mut sorted: Vec<f64> = steady.iter().map(value).collect();
        sorted.sort_by(f64::total_cmp);
        let first = sorted[sorted.len() / 2];
        let min = steady.iter().map(value).fold(f64::INFINITY, f64::min);
        let max = steady.iter().map(value).fold(f64::NEG_INFINITY, f64::max);
        let allowed = if count {
            (first * 0.05).max(2.0)
        } else {
            first * 0.05
        };
        let spread = (max - first).max(first - min);
        let _ = writeln!(
            report,
            "| {name} | {first:.1} | {min:.1} | {max:.1} | {spread:.1} | {allowed:.1} |"
        );
        if spread > allowed {
            failed.push(format!(
                "{name} moved {spread:.1} from its median {first:.1} (allowed {allowed:.1})"
            ));
        }
    }
    let _ = writeln!(
        report,
        "\nconfirmations approved: {approved} (REST {}, native {}); executed by the upstream: {executed}; executed twice: {twice}; declined {}, expired {} (none ran); read-only calls {} ({} failed); sessions {}; module kills {}; wrong answers {}",
        counts.approved_rest.load(Ordering::Relaxed),
        counts.approved_native.load(Ordering::Relaxed),
        counts.declined.load(Ordering::Relaxed),
        counts.expired.load(Ordering::Relaxed),
        counts.reads.load(Ordering::Relaxed),
        counts.read_failures.load(Ordering::Relaxed),
        counts.sessions.load(Ordering::Relaxed),
        counts.module_kills.load(Ordering::Relaxed),
        counts.wrong.load(Ordering::Relaxed),
    );
    if executed != approved {
        failed.push(format!("{executed} executions for {approved} approvals"));
    }
    if twice > 0 {
        failed.push(format!("{twice} calls ran twice"));
    }
    if counts.wrong.load(Ordering::Relaxed) > 0 {
        failed.push(format!(
            "{} wrong answers (printed above)",
            counts.wrong.load(Ordering::Relaxed)
        ));
    }
    println!("\n{report}");
    let out = PathBuf::from("target/soak");
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(out.join("report.md"), &report);
    if failed.is_empty() {
        println!("soak: passed");
        Ok(())
    } else {
        bail!("soak failed: {}", failed.join("; "))
    }
}

mod futures_job {
    /// One iteration of a worker.
    pub(super) type Job =
        std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>;
}
