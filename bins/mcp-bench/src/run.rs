//! `mcp-bench run`: starts the upstream, the null proxy and the gateway (memory and
//! PostgreSQL) as separate processes on loopback, drives every path with the same load
//! generator, and reports throughput, latency, CPU per call and memory side by side.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use elicitation_store::test_support::TestDb;
use http::Request;
use http_body_util::Full;
use serde_json::{Value, json};
use tokio::process::Command;

use mcp_auth::token_sha256;

use crate::load::{self, Check, Load, MakeRequest};
use crate::peers::{
    AGENT, HUMAN, Proc, SCRAPER, SEAL_KEY, forwarded, legacy, legacy_as, modern, open_session,
    open_session_as, prompt, resource, start,
};
use crate::procstat;

async fn start_gateway(
    binary: &Path,
    dir: &Path,
    name: &str,
    store: &str,
    upstream: SocketAddr,
) -> Result<Proc> {
    let auth = format!(
        r#"[auth]
mode = "tokens"
[[auth.tokens]]
subject = "bench"
token_sha256 = "{agent}"
scopes = ["tools:call"]
[[auth.tokens]]
subject = "bench"
token_sha256 = "{human}"
scopes = ["elicitations:respond"]
[[auth.tokens]]
subject = "scraper"
token_sha256 = "{scraper}"
scopes = ["metrics:read"]"#,
        agent = token_sha256(AGENT),
        human = token_sha256(HUMAN),
        scraper = token_sha256(SCRAPER),
    );
    start_gateway_with(binary, dir, name, store, &auth, upstream).await
}

/// [`start_gateway`] with another `[auth]` section.
async fn start_gateway_with(
    binary: &Path,
    dir: &Path,
    name: &str,
    store: &str,
    auth: &str,
    upstream: SocketAddr,
) -> Result<Proc> {
    let config = format!(
        r#"listen = "127.0.0.1:0"
{store}
{auth}
[limits]
calls_per_minute = 0
confirmations_per_minute = 0
module_concurrency = 0
[[modules]]
name = "up"
transport = "http"
url = "http://{upstream}/mcp"
trust_annotations = true
"#
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config)?;
    let mut command = Command::new(binary);
    command.arg("--config").arg(&path).env("RUST_LOG", "warn");
    start(command, "mcp-gateway listening on ").await
}

/// The arguments of the `i`th confirmed call: each its own (an identical call would take up
/// the confirmation of the one before).
fn confirmed_args(i: usize) -> Value {
    json!({"path": "/bench", "n": i})
}

/// The `i`th confirmed call of the bench's agent: its own arguments and the `i`th
/// confirmation of `ids` (from [`ready_confirmations`]).
fn confirmed_calls(ids: Arc<Vec<String>>) -> MakeRequest {
    Arc::new(move |i| {
        modern(
            "up__delete",
            Some(AGENT),
            confirmed_args(i),
            json!({"confirmation_id": ids[i]}),
        )
    })
}

/// The `[store]` section of a gateway on `db` with the bench's seal key.
fn postgres_store(db: &TestDb) -> String {
    format!(
        "[store]\nkind = \"postgres\"\ndatabase_url = \"{}\"\nseal_keys = [\"{SEAL_KEY}\"]\nmax_pending_per_caller = 100000",
        TestDb::url(&db.writer)
    )
}

/// Holds `count` destructive calls (the `i`th with [`confirmed_args`]`(i)`) and approves
/// each through the REST API; returns the ids.
async fn ready_confirmations(gateway: SocketAddr, count: usize) -> Result<Vec<String>> {
    ready_confirmations_as(gateway, count, AGENT, HUMAN).await
}

async fn ready_confirmations_as(
    gateway: SocketAddr,
    count: usize,
    agent: &str,
    human: &str,
) -> Result<Vec<String>> {
    let mut ids = Vec::with_capacity(count);
    for i in 0..count {
        let (_, _, body) = load::once(
            gateway,
            modern("up__delete", Some(agent), confirmed_args(i), json!({})),
        )
        .await?;
        let reply: Value = serde_json::from_slice(&body)?;
        let id = reply["result"]["structuredContent"]["elicitation"]["id"]
            .as_str()
            .context("expected a held call")?
            .to_owned();
        let approve = Request::builder()
            .method("POST")
            .uri(format!("/v1/mcp/elicitations/{id}/respond"))
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {human}"))
            .body(Full::new(Bytes::from_static(b"{\"confirmed\": true}")))?;
        let (status, _, _) = load::once(gateway, approve).await?;
        if status != 200 {
            bail!("approving a confirmation answered {status}");
        }
        ids.push(id);
    }
    Ok(ids)
}

/// `mcp-bench load`: drives a running gateway's read-only path and prints the figures.
pub(crate) async fn drive(
    target: SocketAddr,
    era: &str,
    concurrency: usize,
    requests: usize,
    token: String,
    human: Option<String>,
) -> Result<()> {
    let make: MakeRequest = match era {
        "destructive" => {
            let human = human.context("--human-token is needed to approve confirmations")?;
            let ids = Arc::new(ready_confirmations_as(target, requests, &token, &human).await?);
            // A marker for whoever samples CPU around the measured calls only.
            println!(
                "ready: {} confirmations approved; measuring in 2 s",
                ids.len()
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
            Arc::new(move |i| {
                modern(
                    "up__delete",
                    Some(&token),
                    confirmed_args(i),
                    json!({"confirmation_id": ids[i]}),
                )
            })
        }
        "modern" => Arc::new(move |_| {
            modern(
                "up__read",
                Some(&token),
                json!({"path": "/bench"}),
                json!({}),
            )
        }),
        "legacy" => {
            let session = open_session_as(target, &token).await?;
            Arc::new(move |_| legacy_as("up__read", &session, &token))
        }
        other => bail!("unknown era {other:?} (modern or legacy)"),
    };
    let load = load::run(target, concurrency, requests, make, forwarded()).await?;
    println!(
        "{} requests, {} errors, {:.0} req/s, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms",
        load.requests,
        load.errors,
        load.per_second(),
        load.ms(0.5),
        load.ms(0.9),
        load.ms(0.99)
    );
    Ok(())
}

/// One measured row.
struct Row {
    path: &'static str,
    concurrency: usize,
    load: Load,
    cpu_per_10k: f64,
    peak_rss_mib: f64,
}

async fn measure(
    path: &'static str,
    target: SocketAddr,
    process: u32,
    concurrency: usize,
    total: usize,
    make: MakeRequest,
    check: Check,
) -> Result<Row> {
    let cpu_before = procstat::cpu_seconds(process);
    let load = load::run(target, concurrency, total, make, check).await?;
    let cpu = procstat::cpu_seconds(process) - cpu_before;
    if load.errors > 0 {
        bail!(
            "{path} at concurrency {concurrency}: {} of {} answers were not the expected ones",
            load.errors,
            load.requests
        );
    }
    let (_, peak) = procstat::rss_mib(process);
    eprintln!(
        "  {path:<28} c={concurrency:<3} {:>8.0} req/s  p50 {:.3} ms  p99 {:.3} ms",
        load.per_second(),
        load.ms(0.5),
        load.ms(0.99)
    );
    Ok(Row {
        path,
        concurrency,
        cpu_per_10k: cpu / load.requests as f64 * 10_000.0,
        peak_rss_mib: peak,
        load,
    })
}

/// [`measure`] with the connections spread over several instances (CPU summed over them).
async fn measure_spread(
    path: &'static str,
    targets: &[SocketAddr],
    processes: &[u32],
    concurrency: usize,
    total: usize,
    make: MakeRequest,
    check: Check,
) -> Result<Row> {
    let cpu = || {
        processes
            .iter()
            .map(|p| procstat::cpu_seconds(*p))
            .sum::<f64>()
    };
    let cpu_before = cpu();
    let load = load::run_spread(targets, concurrency, total, make, check).await?;
    let used = cpu() - cpu_before;
    if load.errors > 0 {
        bail!(
            "{path} at concurrency {concurrency}: {} of {} answers were not the expected ones",
            load.errors,
            load.requests
        );
    }
    let peak = processes
        .iter()
        .map(|p| procstat::rss_mib(*p).1)
        .fold(0.0, f64::max);
    eprintln!(
        "  {path:<28} c={concurrency:<3} {:>8.0} req/s  p50 {:.3} ms  p99 {:.3} ms",
        load.per_second(),
        load.ms(0.5),
        load.ms(0.99)
    );
    Ok(Row {
        path,
        concurrency,
        cpu_per_10k: used / load.requests as f64 * 10_000.0,
        peak_rss_mib: peak,
        load,
    })
}

/// Milliseconds from an answer recorded on one instance (its REST response) to the return
/// of a long poll on that confirmation waiting on the other instance, `samples` times:
/// (p50, p99, max).
async fn cross_instance_wake(
    first: SocketAddr,
    second: SocketAddr,
    samples: usize,
) -> Result<(f64, f64, f64)> {
    let mut waits = Vec::with_capacity(samples);
    for sample in 0..samples {
        let (_, _, body) = load::once(
            first,
            modern(
                "up__delete",
                Some(AGENT),
                json!({"path": "/wake", "n": sample}),
                json!({}),
            ),
        )
        .await?;
        let reply: Value = serde_json::from_slice(&body)?;
        let id = reply["result"]["structuredContent"]["elicitation"]["id"]
            .as_str()
            .context("expected a held call")?
            .to_owned();
        let poll = Request::builder()
            .method("GET")
            .uri(format!("/v1/mcp/elicitations/{id}?wait=30"))
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {HUMAN}"))
            .body(Full::new(Bytes::new()))?;
        let waiting = tokio::spawn(async move {
            let answer = load::once(second, poll).await;
            (answer, std::time::Instant::now())
        });
        // Let the poll reach its wait on the other instance.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let approve = Request::builder()
            .method("POST")
            .uri(format!("/v1/mcp/elicitations/{id}/respond"))
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {HUMAN}"))
            .body(Full::new(Bytes::from_static(b"{\"confirmed\": true}")))?;
        let (status, _, _) = load::once(first, approve).await?;
        let recorded = std::time::Instant::now();
        if status != 200 {
            bail!("approving a confirmation answered {status}");
        }
        let (answer, woke) = waiting.await?;
        let (status, _, body) = answer?;
        let seen: Value = serde_json::from_slice(&body)?;
        if status != 200 || seen["status"] != "responded" {
            bail!("the long poll on the other instance answered {status}: {seen}");
        }
        waits.push(woke.saturating_duration_since(recorded).as_secs_f64() * 1000.0);
    }
    waits.sort_by(f64::total_cmp);
    let at = |q: f64| waits[((waits.len() as f64 * q).ceil() as usize).clamp(1, waits.len()) - 1];
    Ok((at(0.5), at(0.99), waits[waits.len() - 1]))
}

/// `/metrics` of a gateway whose catalog holds 1,000 tools, each called once (so each has
/// its series): (p50 ms, p99 ms, bytes), over 200 scrapes on one connection.
async fn metrics_with_a_large_catalog(
    me: &Path,
    gateway: &Path,
    dir: &Path,
) -> Result<(f64, f64, usize)> {
    const TOOLS: usize = 1_000;
    let mut upstream_cmd = Command::new(me);
    upstream_cmd.args(["upstream", "--tools", &TOOLS.to_string()]);
    let upstream = start(upstream_cmd, "listening on ").await?;
    let big = start_gateway(
        gateway,
        dir,
        "catalog",
        "[store]\nkind = \"memory\"",
        upstream.addr,
    )
    .await?;
    for i in 0..TOOLS {
        let (status, _, _) = load::once(
            big.addr,
            modern(&format!("up__t{i}"), Some(AGENT), json!({}), json!({})),
        )
        .await?;
        if status != 200 {
            bail!("calling up__t{i} answered {status}");
        }
    }
    let scrape: MakeRequest = Arc::new(|_| {
        Request::builder()
            .method("GET")
            .uri("/metrics")
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {SCRAPER}"))
            .body(Full::new(Bytes::new()))
            .expect("a valid request")
    });
    let ok: Check = Arc::new(|status, body| status == 200 && !body.is_empty());
    let (_, _, text) = load::once(big.addr, scrape(0)).await?;
    let load = load::run(big.addr, 1, 200, scrape, ok).await?;
    if load.errors > 0 {
        bail!("/metrics failed {} times", load.errors);
    }
    eprintln!(
        "  /metrics, {TOOLS} tools         p50 {:.3} ms  p99 {:.3} ms  {} bytes",
        load.ms(0.5),
        load.ms(0.99),
        text.len()
    );
    drop((big, upstream));
    Ok((load.ms(0.5), load.ms(0.99), text.len()))
}

async fn transactions(admin: &tokio_postgres::Client) -> Result<i64> {
    let row = admin
        .query_one("SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = current_database()", &[])
        .await?;
    Ok(row.get(0))
}

/// CPU seconds used so far by each of the cluster's server processes (backends and
/// background workers, by `pg_stat_activity`).
async fn backend_cpu(
    admin: &tokio_postgres::Client,
) -> Result<std::collections::HashMap<i32, f64>> {
    let rows = admin.query("SELECT pid FROM pg_stat_activity", &[]).await?;
    Ok(rows
        .iter()
        .map(|row| {
            let pid: i32 = row.get(0);
            (pid, procstat::cpu_seconds(pid.unsigned_abs()))
        })
        .collect())
}

/// The CPU the cluster's processes used between two [`backend_cpu`] readings (a process
/// that started in between counts whole).
fn backend_cpu_used(
    before: &std::collections::HashMap<i32, f64>,
    after: &std::collections::HashMap<i32, f64>,
) -> f64 {
    after
        .iter()
        .map(|(pid, cpu)| cpu - before.get(pid).copied().unwrap_or(0.0))
        .sum()
}

pub(crate) struct Options {
    pub(crate) gateway: PathBuf,
    pub(crate) quick: bool,
}

/// Interleaved rounds of the null proxy and the gateway's read-only paths per level.
const ROUNDS: usize = 3;

pub(crate) async fn run(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let levels = [1usize, 16, 64];
    let total = |c: usize| {
        if options.quick {
            if c == 1 { 300 } else { 1_500 }
        } else if c == 1 {
            5_000
        } else {
            20_000
        }
    };
    let destructive_total = |c: usize| {
        if options.quick {
            if c == 1 { 200 } else { 500 }
        } else if c == 1 {
            1_000
        } else {
            3_000
        }
    };

    let mut upstream_cmd = Command::new(&me);
    upstream_cmd.args(["upstream"]);
    let upstream = start(upstream_cmd, "listening on ").await?;
    let mut proxy_cmd = Command::new(&me);
    proxy_cmd.args(["null-proxy", "--upstream", &upstream.addr.to_string()]);
    let proxy = start(proxy_cmd, "listening on ").await?;
    let gateway = start_gateway(
        &options.gateway,
        &dir,
        "memory",
        "[store]\nkind = \"memory\"\nmax_pending_per_caller = 100000\nmax_records = 1000000",
        upstream.addr,
    )
    .await?;
    let idle_rss = procstat::rss_mib(gateway.pid()).0;
    // The same gateway exporting traces (sample_ratio 0.1) to a collector that takes them.
    let mut sink_cmd = Command::new(&me);
    sink_cmd.args(["otlp-sink"]);
    let sink = start(sink_cmd, "listening on ").await?;
    let traced = start_gateway(
        &options.gateway,
        &dir,
        "traced",
        &format!(
            "[store]\nkind = \"memory\"\n[tracing]\notlp_endpoint = \"http://{}/v1/traces\"\nsample_ratio = 0.1",
            sink.addr
        ),
        upstream.addr,
    )
    .await?;

    // The same gateway with mode `jwt` (an ES256 issuer of the bench's own, its keys in a
    // file): one token for every call (remembered after its first check), and a new token
    // for every call (a signature check per call).
    let issuer = crate::jwt::Issuer::new()?;
    let jwks = dir.join("jwks.json");
    issuer.write_jwks(&jwks)?;
    let jwt_gateway = start_gateway_with(
        &options.gateway,
        &dir,
        "jwt",
        "[store]\nkind = \"memory\"",
        &crate::jwt::Issuer::auth_section(&jwks),
        upstream.addr,
    )
    .await?;
    let remembered = issuer.token("bench", 0)?;
    let read_with_jwt: MakeRequest = Arc::new(move |_| {
        modern(
            "up__read",
            Some(&remembered),
            json!({"path": "/bench"}),
            json!({}),
        )
    });
    let mut first_sight_from = 1;

    let read: MakeRequest =
        Arc::new(|_| modern("read", None, json!({"path": "/bench"}), json!({})));
    let read_through_gateway: MakeRequest = Arc::new(|_| {
        modern(
            "up__read",
            Some(AGENT),
            json!({"path": "/bench"}),
            json!({}),
        )
    });
    let mut rows = Vec::new();
    eprintln!("measuring (release build, RUST_LOG=warn, all on 127.0.0.1):");
    for &c in &levels {
        rows.push(
            measure(
                "direct",
                upstream.addr,
                upstream.pid(),
                c,
                total(c),
                read.clone(),
                forwarded(),
            )
            .await?,
        );
        // The null proxy and the gateway's read-only paths in interleaved rounds: this
        // machine's noise moves from minute to minute, and a ratio is only as good as the
        // two runs it divides. Ratios are the median over the rounds.
        let session = open_session(gateway.addr).await?;
        let legacy_read: MakeRequest = Arc::new(move |_| legacy("up__read", &session));
        for _ in 0..ROUNDS {
            rows.push(
                measure(
                    "null proxy",
                    proxy.addr,
                    proxy.pid(),
                    c,
                    total(c),
                    read.clone(),
                    forwarded(),
                )
                .await?,
            );
            rows.push(
                measure(
                    "gateway read-only",
                    gateway.addr,
                    gateway.pid(),
                    c,
                    total(c),
                    read_through_gateway.clone(),
                    forwarded(),
                )
                .await?,
            );
            rows.push(
                measure(
                    "gateway read-only, jwt remembered",
                    jwt_gateway.addr,
                    jwt_gateway.pid(),
                    c,
                    total(c),
                    read_with_jwt.clone(),
                    forwarded(),
                )
                .await?,
            );
            let fresh = Arc::new(issuer.tokens("bench", first_sight_from, total(c))?);
            first_sight_from += total(c);
            let read_first_sight: MakeRequest = Arc::new(move |i| {
                modern(
                    "up__read",
                    Some(&fresh[i]),
                    json!({"path": "/bench"}),
                    json!({}),
                )
            });
            rows.push(
                measure(
                    "gateway read-only, jwt first sight",
                    jwt_gateway.addr,
                    jwt_gateway.pid(),
                    c,
                    total(c),
                    read_first_sight,
                    forwarded(),
                )
                .await?,
            );
            rows.push(
                measure(
                    "gateway read-only, traced 0.1",
                    traced.addr,
                    traced.pid(),
                    c,
                    total(c),
                    read_through_gateway.clone(),
                    forwarded(),
                )
                .await?,
            );
            rows.push(
                measure(
                    "gateway read-only, legacy",
                    gateway.addr,
                    gateway.pid(),
                    c,
                    total(c),
                    legacy_read.clone(),
                    forwarded(),
                )
                .await?,
            );
            // prompts/get and resources/read: the same measure against the null proxy.
            let routed: [(&str, &str, MakeRequest, MakeRequest); 2] = [
                (
                    "null proxy prompts/get",
                    "gateway prompts/get",
                    Arc::new(|_| prompt("greet")),
                    Arc::new(|_| prompt("up__greet")),
                ),
                (
                    "null proxy resources/read",
                    "gateway resources/read",
                    Arc::new(|_| resource()),
                    Arc::new(|_| resource()),
                ),
            ];
            for (proxied, through, direct_request, gateway_request) in routed {
                rows.push(
                    measure(
                        proxied,
                        proxy.addr,
                        proxy.pid(),
                        c,
                        total(c),
                        direct_request,
                        forwarded(),
                    )
                    .await?,
                );
                rows.push(
                    measure(
                        through,
                        gateway.addr,
                        gateway.pid(),
                        c,
                        total(c),
                        gateway_request,
                        forwarded(),
                    )
                    .await?,
                );
            }
        }
        let ids = Arc::new(ready_confirmations(gateway.addr, destructive_total(c)).await?);
        let confirmed = confirmed_calls(ids);
        rows.push(
            measure(
                "gateway destructive, memory",
                gateway.addr,
                gateway.pid(),
                c,
                destructive_total(c),
                confirmed,
                forwarded(),
            )
            .await?,
        );
    }

    // Leak check: the same run three times, RSS after each.
    let mut rss_after = Vec::new();
    for _ in 0..3 {
        load::run(
            gateway.addr,
            16,
            total(16),
            read_through_gateway.clone(),
            forwarded(),
        )
        .await?;
        rss_after.push(procstat::rss_mib(gateway.pid()).0);
    }

    // Idle sessions with their GET streams open.
    let idle = crate::idle::measure(
        &options.gateway,
        &dir,
        upstream.addr,
        1_000,
        200,
        if options.quick { 2_000 } else { 10_000 },
        Duration::from_secs(if options.quick { 5 } else { 35 }),
    )
    .await?;

    // PostgreSQL.
    let db = TestDb::new().await;
    let store = postgres_store(&db);
    let pg_gateway =
        start_gateway(&options.gateway, &dir, "postgres", &store, upstream.addr).await?;
    // A second instance on the same database and keys (the scale-out rows).
    let pg_second =
        start_gateway(&options.gateway, &dir, "postgres2", &store, upstream.addr).await?;
    let admin = db.admin().await;
    let mut round_trips = None;
    for &c in &levels {
        let ids = Arc::new(ready_confirmations(pg_gateway.addr, destructive_total(c)).await?);
        let count = ids.len();
        let confirmed = confirmed_calls(ids);
        // Statistics reach pg_stat_database when backends go idle (at most ~10 s later).
        let before = if c == 16 {
            tokio::time::sleep(Duration::from_secs(11)).await;
            Some((transactions(&admin).await?, backend_cpu(&admin).await?))
        } else {
            None
        };
        rows.push(
            measure(
                "gateway destructive, postgres",
                pg_gateway.addr,
                pg_gateway.pid(),
                c,
                count,
                confirmed,
                forwarded(),
            )
            .await?,
        );
        if let Some((before, cpu_before)) = before {
            tokio::time::sleep(Duration::from_secs(11)).await;
            let after = transactions(&admin).await?;
            let cpu = backend_cpu_used(&cpu_before, &backend_cpu(&admin).await?);
            round_trips = Some((
                (after - before) as f64 / count as f64,
                cpu / count as f64 * 1e6,
            ));
        }
        if c > 1 {
            // The same load spread over two instances on the one database.
            let ids = Arc::new(ready_confirmations(pg_gateway.addr, destructive_total(c)).await?);
            let count = ids.len();
            let confirmed = confirmed_calls(ids);
            rows.push(
                measure_spread(
                    "gateway destructive, postgres, 2 instances",
                    &[pg_gateway.addr, pg_second.addr],
                    &[pg_gateway.pid(), pg_second.pid()],
                    c,
                    count,
                    confirmed,
                    forwarded(),
                )
                .await?,
            );
        }
    }
    let scale = scale_out(&options, &dir, &store, upstream.addr, pg_gateway.addr).await?;
    rows.extend(scale);
    let wake = cross_instance_wake(
        pg_gateway.addr,
        pg_second.addr,
        if options.quick { 50 } else { 200 },
    )
    .await?;
    let scrape = metrics_with_a_large_catalog(&me, &options.gateway, &dir).await?;

    let report = report(
        &rows,
        idle_rss,
        &rss_after,
        round_trips,
        &idle,
        &wake,
        &scrape,
    );
    println!("{}", report.0);
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("gateway.md"), &report.0)?;
    std::fs::write(
        out.join("gateway.json"),
        serde_json::to_string_pretty(&report.1)?,
    )?;
    println!("written to target/bench/gateway.md and target/bench/gateway.json");
    let _ = std::fs::remove_dir_all(&dir);
    drop((upstream, proxy, gateway, jwt_gateway, pg_gateway, pg_second));
    Ok(())
}

/// Each scale-out instance's CPU cap, in % of one CPU: low enough that on this machine's two
/// cores the instances, not the machine, are the bottleneck (three instances, the load
/// generator, the upstream and PostgreSQL's backends must all fit).
const SCALE_CPU_PERCENT: u64 = 10;
/// Connections per instance in the scale-out rows.
const SCALE_CONNECTIONS: usize = 8;
const SCALE_READ: [&str; 3] = [
    "scale-out read-only, 1 instance",
    "scale-out read-only, 2 instances",
    "scale-out read-only, 3 instances",
];
const SCALE_CONFIRMED: [&str; 3] = [
    "scale-out confirmed, 1 instance",
    "scale-out confirmed, 2 instances",
    "scale-out confirmed, 3 instances",
];

/// Scale-out on one machine: three gateway instances on the one PostgreSQL, each capped at
/// [`SCALE_CPU_PERCENT`] % of a CPU in a cgroup of its own; read-only and confirmed calls
/// spread over 1, 2 and 3 of them ([`SCALE_CONNECTIONS`] connections each). Confirmations
/// are held and approved beforehand through `prepare` (uncapped). Without a writable cgroup
/// CPU controller the rows are left out, saying why.
async fn scale_out(
    options: &Options,
    dir: &Path,
    store: &str,
    upstream: SocketAddr,
    prepare: SocketAddr,
) -> Result<Vec<Row>> {
    let mut instances = Vec::new();
    let mut quotas = Vec::new();
    for i in 0..3 {
        let instance =
            start_gateway(&options.gateway, dir, &format!("scale{i}"), store, upstream).await?;
        let name = format!("mcp-bench-{}-{i}", std::process::id());
        match crate::quota::Quota::cap(&name, instance.pid(), SCALE_CPU_PERCENT) {
            Ok(quota) => quotas.push(quota),
            Err(e) => {
                eprintln!("  scale-out rows left out: no CPU quota can be set here ({e:#})");
                return Ok(Vec::new());
            }
        }
        instances.push(instance);
    }
    let read: MakeRequest = Arc::new(|_| {
        modern(
            "up__read",
            Some(AGENT),
            json!({"path": "/bench"}),
            json!({}),
        )
    });
    // Each instance's upstream session and connections exist before anything is measured.
    for instance in &instances {
        load::run(instance.addr, 4, 100, read.clone(), forwarded()).await?;
    }
    // Enough calls that each row spans many of the quota's 100 ms periods (a row of a
    // few periods measures where the throttling fell, not the instances).
    let (read_per, confirmed_per) = if options.quick {
        (3_000, 600)
    } else {
        (10_000, 2_000)
    };
    let mut rows = Vec::new();
    for n in 1..=3 {
        let targets: Vec<SocketAddr> = instances[..n].iter().map(|p| p.addr).collect();
        let pids: Vec<u32> = instances[..n].iter().map(Proc::pid).collect();
        let throttled = |q: &[crate::quota::Quota]| {
            q[..n]
                .iter()
                .map(crate::quota::Quota::throttled_seconds)
                .sum::<f64>()
        };
        let before = throttled(&quotas);
        rows.push(
            measure_spread(
                SCALE_READ[n - 1],
                &targets,
                &pids,
                SCALE_CONNECTIONS * n,
                read_per * n,
                read.clone(),
                forwarded(),
            )
            .await?,
        );
        eprintln!(
            "    throttled {:.2} s (the cap held the instances back)",
            throttled(&quotas) - before
        );
        let ids = Arc::new(ready_confirmations(prepare, confirmed_per * n).await?);
        let count = ids.len();
        let confirmed = confirmed_calls(ids);
        rows.push(
            measure_spread(
                SCALE_CONFIRMED[n - 1],
                &targets,
                &pids,
                SCALE_CONNECTIONS * n,
                count,
                confirmed,
                forwarded(),
            )
            .await?,
        );
    }
    // The processes end before their cgroups are removed.
    drop(instances);
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(quotas);
    Ok(rows)
}

/// `mcp-bench confirmed`: only confirmed destructive calls on PostgreSQL at concurrency 16
/// (needs DATABASE_URL): calls/s, the gateway's CPU and the cluster's CPU per call, and
/// transactions per call — what a change to the store's statements is judged by.
pub(crate) async fn confirmed_only(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut upstream_cmd = Command::new(&me);
    upstream_cmd.args(["upstream"]);
    let upstream = start(upstream_cmd, "listening on ").await?;
    let db = TestDb::new().await;
    let store = postgres_store(&db);
    let gateway = start_gateway(&options.gateway, &dir, "postgres", &store, upstream.addr).await?;
    let admin = db.admin().await;
    let count = if options.quick { 1_000 } else { 5_000 };
    for round in 0..3 {
        let ids = Arc::new(ready_confirmations(gateway.addr, count).await?);
        let confirmed = confirmed_calls(ids);
        tokio::time::sleep(Duration::from_secs(11)).await;
        let (tx_before, cpu_before) = (transactions(&admin).await?, backend_cpu(&admin).await?);
        let row = measure(
            "gateway destructive, postgres",
            gateway.addr,
            gateway.pid(),
            16,
            count,
            confirmed,
            forwarded(),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(11)).await;
        let trips = (transactions(&admin).await? - tx_before) as f64 / count as f64;
        let backend = backend_cpu_used(&cpu_before, &backend_cpu(&admin).await?);
        println!(
            "round {round}: {:.0} confirmed calls/s, gateway {:.0} µs CPU/call, PostgreSQL {:.0} µs CPU/call, {trips:.2} transactions/call",
            row.load.per_second(),
            row.cpu_per_10k * 100.0,
            backend / count as f64 * 1e6
        );
    }
    drop((gateway, upstream));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `mcp-bench scale-out`: only the scale-out rows (needs DATABASE_URL), printed.
pub(crate) async fn scale_only(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("mcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut upstream_cmd = Command::new(&me);
    upstream_cmd.args(["upstream"]);
    let upstream = start(upstream_cmd, "listening on ").await?;
    let db = TestDb::new().await;
    let store = postgres_store(&db);
    let prepare = start_gateway(&options.gateway, &dir, "postgres", &store, upstream.addr).await?;
    eprintln!("measuring scale-out (release build, RUST_LOG=warn, all on 127.0.0.1):");
    let rows = scale_out(&options, &dir, &store, upstream.addr, prepare.addr).await?;
    let mut md = String::new();
    scale_report(&mut md, &rows);
    println!("{md}");
    drop((prepare, upstream));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The scale-out lines of the report: calls/s of n instances ÷ one.
fn scale_report(md: &mut String, rows: &[Row]) -> Value {
    let rate = |path: &str| {
        rows.iter()
            .find(|r| r.path == path)
            .map(|r| r.load.per_second())
    };
    let mut json_lines = serde_json::Map::new();
    for (what, paths) in [("read-only", SCALE_READ), ("confirmed", SCALE_CONFIRMED)] {
        let (Some(one), Some(two), Some(three)) = (rate(paths[0]), rate(paths[1]), rate(paths[2]))
        else {
            continue;
        };
        let _ = writeln!(
            md,
            "Scale-out, {what} (each instance capped at {SCALE_CPU_PERCENT} % of a CPU, {SCALE_CONNECTIONS} connections each, one PostgreSQL): {one:.0} / {two:.0} / {three:.0} calls/s with 1 / 2 / 3 instances; 2 ÷ 1 = {:.2}, 3 ÷ 1 = {:.2}.",
            two / one,
            three / one
        );
        json_lines.insert(
            what.into(),
            json!({"calls_per_second": [one, two, three], "two_over_one": two / one, "three_over_one": three / one}),
        );
    }
    Value::Object(json_lines)
}

fn report(
    rows: &[Row],
    idle_rss: f64,
    rss_after: &[f64],
    round_trips: Option<(f64, f64)>,
    idle: &crate::idle::IdleMemory,
    wake: &(f64, f64, f64),
    scrape: &(f64, f64, usize),
) -> (String, Value) {
    let mut md = String::from(
        "| path | conc. | req/s | p50 ms | p90 ms | p99 ms | CPU s / 10k calls | peak RSS MiB |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut json_rows = Vec::new();
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} |",
            r.path,
            r.concurrency,
            r.load.per_second(),
            r.load.ms(0.5),
            r.load.ms(0.9),
            r.load.ms(0.99),
            r.cpu_per_10k,
            r.peak_rss_mib
        );
        json_rows.push(json!({
            "path": r.path, "concurrency": r.concurrency, "requests": r.load.requests,
            "requests_per_second": r.load.per_second(), "p50_ms": r.load.ms(0.5), "p90_ms": r.load.ms(0.9), "p99_ms": r.load.ms(0.99),
            "cpu_seconds_per_10k": r.cpu_per_10k, "peak_rss_mib": r.peak_rss_mib,
        }));
    }
    let _ = write!(
        md,
        "\nRatios: median over the {ROUNDS} interleaved rounds (min–max in brackets).\n\n| ratio | conc. 1 | conc. 16 | conc. 64 |\n|---|---|---|---|\n"
    );
    let mut ratios = serde_json::Map::new();
    type Ratio = (
        &'static str,
        &'static str,
        &'static str,
        fn(&Row, &Row) -> f64,
    );
    let lines: [Ratio; 15] = [
        (
            "gateway read-only CPU/call ÷ null proxy",
            "gateway read-only",
            "null proxy",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "traced (sample 0.1) ÷ untraced read-only CPU/call",
            "gateway read-only, traced 0.1",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "jwt remembered ÷ tokens read-only CPU/call",
            "gateway read-only, jwt remembered",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "jwt first sight ÷ tokens read-only CPU/call",
            "gateway read-only, jwt first sight",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "gateway prompts/get CPU/call ÷ null proxy",
            "gateway prompts/get",
            "null proxy prompts/get",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "gateway resources/read CPU/call ÷ null proxy",
            "gateway resources/read",
            "null proxy resources/read",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "gateway read-only, legacy CPU/call ÷ null proxy",
            "gateway read-only, legacy",
            "null proxy",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
        (
            "gateway read-only p99 ÷ null proxy",
            "gateway read-only",
            "null proxy",
            |a, b| a.load.ms(0.99) / b.load.ms(0.99),
        ),
        (
            "gateway read-only, legacy p99 ÷ null proxy",
            "gateway read-only, legacy",
            "null proxy",
            |a, b| a.load.ms(0.99) / b.load.ms(0.99),
        ),
        (
            "gateway read-only p50 ÷ null proxy",
            "gateway read-only",
            "null proxy",
            |a, b| a.load.ms(0.5) / b.load.ms(0.5),
        ),
        (
            "gateway read-only p50 ÷ direct",
            "gateway read-only",
            "direct",
            |a, b| a.load.ms(0.5) / b.load.ms(0.5),
        ),
        (
            "gateway read-only p99 ÷ direct",
            "gateway read-only",
            "direct",
            |a, b| a.load.ms(0.99) / b.load.ms(0.99),
        ),
        (
            "gateway read-only p99 − direct p99 (ms)",
            "gateway read-only",
            "direct",
            |a, b| a.load.ms(0.99) - b.load.ms(0.99),
        ),
        (
            "postgres confirmed calls/s, 2 instances ÷ 1",
            "gateway destructive, postgres, 2 instances",
            "gateway destructive, postgres",
            |a, b| a.load.per_second() / b.load.per_second(),
        ),
        (
            "destructive (memory) CPU/call ÷ read-only",
            "gateway destructive, memory",
            "gateway read-only",
            |a, b| a.cpu_per_10k / b.cpu_per_10k,
        ),
    ];
    for (label, a, b, f) in lines {
        let mut cells = Vec::new();
        let mut values = Vec::new();
        for c in [1, 16, 64] {
            let pairs: Vec<f64> = find_all(rows, a, c)
                .into_iter()
                .zip(find_all(rows, b, c))
                .map(|(x, y)| f(x, y))
                .collect();
            match median(&pairs) {
                Some((median, low, high)) if pairs.len() > 1 => {
                    cells.push(format!("{median:.2} ({low:.2}–{high:.2})"));
                    values.push(json!(median));
                }
                Some((median, _, _)) => {
                    cells.push(format!("{median:.2}"));
                    values.push(json!(median));
                }
                None => cells.push("—".into()),
            }
        }
        let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
        ratios.insert(label.into(), Value::Array(values));
    }
    let _ = writeln!(
        md,
        "\nGateway RSS idle: {idle_rss:.1} MiB; after three identical read-only runs (conc. 16): {} MiB.",
        rss_after
            .iter()
            .map(|r| format!("{r:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let per_session_kib = (idle.open - idle.before) * 1024.0 / idle.sessions as f64;
    let _ = writeln!(
        md,
        "{} idle sessions, each with its GET stream open: RSS {:.1} MiB before, {:.1} MiB open ({per_session_kib:.1} KiB per session), {:.1} MiB after {} s idle.",
        idle.sessions,
        idle.before,
        idle.open,
        idle.later,
        idle.idle.as_secs()
    );
    let p99 = |runs: &[(f64, f64); 2]| (runs[0].1 + runs[1].1) / 2.0;
    let _ = writeln!(
        md,
        "Read-only p50 / p99 at conc. 16 with those {} sessions and {} more each waiting on an open confirmation stream: {:.2} / {:.2} ms and {:.2} / {:.2} ms (two runs), against the same gateway idle: {:.2} / {:.2} ms before and {:.2} / {:.2} ms after; p99 loaded ÷ idle (means of the two runs): {:.2}.",
        idle.sessions,
        idle.confirmations,
        idle.loaded_read_ms[0].0,
        idle.loaded_read_ms[0].1,
        idle.loaded_read_ms[1].0,
        idle.loaded_read_ms[1].1,
        idle.idle_read_ms[0].0,
        idle.idle_read_ms[0].1,
        idle.idle_read_ms[1].0,
        idle.idle_read_ms[1].1,
        p99(&idle.loaded_read_ms) / p99(&idle.idle_read_ms),
    );
    if let Some((trips, backend_us)) = round_trips {
        let _ = writeln!(
            md,
            "PostgreSQL transactions (= network round trips) per confirmed destructive call, conc. 16: {trips:.2}; the cluster's processes' CPU per confirmed call: {backend_us:.0} µs."
        );
    }
    let _ = writeln!(
        md,
        "An answer recorded on one instance wakes a long poll waiting on the other (PostgreSQL NOTIFY): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms.",
        wake.0, wake.1, wake.2
    );
    let _ = writeln!(
        md,
        "`/metrics` with 1,000 tools in the catalog, each called once: p50 {:.2} ms, p99 {:.2} ms, {} bytes.",
        scrape.0, scrape.1, scrape.2
    );
    let scale = scale_report(&mut md, rows);
    let json = json!({"rows": json_rows, "ratios": ratios, "scale_out": scale, "idle_rss_mib": idle_rss, "rss_after_runs_mib": rss_after, "postgres_round_trips_per_call": round_trips.map(|r| r.0), "postgres_backend_cpu_us_per_call": round_trips.map(|r| r.1),
        "cross_instance_wake_ms": {"p50": wake.0, "p99": wake.1, "max": wake.2},
        "metrics_1000_tools": {"p50_ms": scrape.0, "p99_ms": scrape.1, "bytes": scrape.2},
        "idle_sessions": {"sessions": idle.sessions, "rss_before_mib": idle.before, "rss_open_mib": idle.open, "rss_later_mib": idle.later, "idle_seconds": idle.idle.as_secs(),
            "confirmation_streams": idle.confirmations, "read_ms_idle": idle.idle_read_ms, "read_ms_loaded": idle.loaded_read_ms}});
    (md, json)
}

/// Every row of `path` at concurrency `c`, in the order measured.
fn find_all<'a>(rows: &'a [Row], path: &str, c: usize) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.path == path && r.concurrency == c)
        .collect()
}

/// The median, least and greatest of `values`.
fn median(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let mid = *sorted.get(sorted.len() / 2)?;
    Some((mid, sorted[0], sorted[sorted.len() - 1]))
}
