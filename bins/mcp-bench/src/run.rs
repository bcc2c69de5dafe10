//! `mcp-bench run`: starts the upstream, the null proxy and the gateway (memory and
//! PostgreSQL) as separate processes on loopback, drives every path with the same load
//! generator, and reports throughput, latency, CPU per call and memory side by side.

mod compare;
mod content;
mod cores;
mod counts;
mod rows;
mod scale;
mod statements;
mod tables;

pub(crate) use compare::{CompareOptions, compare};
pub(crate) use content::content;
use cores::{CoreRow, cores_report};
use counts::{Counts, Probes, counts_report};
use rows::{
    Row, backend_cpu, backend_cpu_used, cross_instance_wake, measure, measure_spread,
    metrics_with_a_large_catalog, transactions,
};
pub(crate) use scale::scale_only;
use scale::scale_out;
use tables::report;

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

use crate::load::{self, MakeRequest};
use crate::peers::{
    AGENT, HUMAN, Proc, SCRAPER, SEAL_KEY, bench_dir, forwarded, legacy, legacy_as, modern,
    open_session, open_session_as, prompt, read_direct, read_through, resource, start,
    start_null_proxy, start_upstream,
};
use crate::place::{self, Placement};
use crate::procstat;

async fn start_gateway(
    binary: &Path,
    dir: &Path,
    name: &str,
    store: &str,
    upstream: SocketAddr,
) -> Result<Proc> {
    start_gateway_with(binary, dir, name, store, &tokens_auth(), upstream, None).await
}

/// The `[auth]` section of the bench's gateways: mode `tokens`, the agent, the human and
/// the scraper.
fn tokens_auth() -> String {
    format!(
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
    )
}

/// [`start_gateway`] with another `[auth]` section, on the process-under-test's CPU where
/// `place` says.
async fn start_gateway_with(
    binary: &Path,
    dir: &Path,
    name: &str,
    store: &str,
    auth: &str,
    upstream: SocketAddr,
    place: Option<&Placement>,
) -> Result<Proc> {
    let path = gateway_config(dir, name, store, auth, upstream)?;
    let mut command = place::command(place, binary);
    command.arg("--config").arg(&path).env("RUST_LOG", "warn");
    start(command, "mcp-gateway listening on ").await
}

/// Writes a bench gateway's configuration (`dir/name.toml`): `store` and `auth` sections,
/// no limits, the upstream as module `up`.
fn gateway_config(
    dir: &Path,
    name: &str,
    store: &str,
    auth: &str,
    upstream: SocketAddr,
) -> Result<PathBuf> {
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
    Ok(path)
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

pub(crate) struct Options {
    pub(crate) gateway: PathBuf,
    pub(crate) quick: bool,
}

/// Interleaved rounds of the null proxy and the gateway's read-only paths per level.
const ROUNDS: usize = 3;

pub(crate) async fn run(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = bench_dir("run")?;
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

    let upstream = start_upstream(&me).await?;
    // The per-call rows: each process under test on a core of its own (place.rs).
    let place = Placement::of_this_machine();
    let proxy = start_null_proxy(place::command(place.as_ref(), &me), upstream.addr).await?;
    let gateway = start_gateway_with(
        &options.gateway,
        &dir,
        "memory",
        "[store]\nkind = \"memory\"\nmax_pending_per_caller = 100000\nmax_records = 1000000",
        &tokens_auth(),
        upstream.addr,
        place.as_ref(),
    )
    .await?;
    let idle_rss = procstat::rss_mib(gateway.pid()).0;
    // The same gateway exporting traces (sample_ratio 0.1) to a collector that takes them.
    let mut sink_cmd = Command::new(&me);
    sink_cmd.args(["otlp-sink"]);
    let sink = start(sink_cmd, "listening on ").await?;
    let traced = start_gateway_with(
        &options.gateway,
        &dir,
        "traced",
        &format!(
            "[store]\nkind = \"memory\"\n[tracing]\notlp_endpoint = \"http://{}/v1/traces\"\nsample_ratio = 0.1",
            sink.addr
        ),
        &tokens_auth(),
        upstream.addr,
        place.as_ref(),
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
        place.as_ref(),
    )
    .await?;
    let remembered = issuer.token("bench", 0)?;
    let read_with_jwt = read_through(remembered);
    let mut first_sight_from = 1;

    let read = read_direct();
    let read_through_gateway = read_through(AGENT);
    let mut rows = Vec::new();
    let placed = place::keep_apart(place.as_ref(), &[std::process::id(), upstream.pid()]).await?;
    eprintln!("measuring (release build, RUST_LOG=warn, all on 127.0.0.1; {placed}):");
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

    if let Some(place) = &place {
        place.release(&[std::process::id(), upstream.pid()]).await?;
    }
    let counted = count_both_eras(&proxy, &gateway, options.quick).await;
    // Left out, not fatal, where the machine cannot pin (no taskset): the rest is measured.
    let core_rows = cores::cores(&me, &options.gateway, &dir, upstream.addr, options.quick)
        .await
        .unwrap_or_else(|e| {
            eprintln!("core scaling left out: {e:#}");
            Vec::new()
        });

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
        (idle_rss, &rss_after),
        round_trips,
        &idle,
        &wake,
        &scrape,
        (&counted, &core_rows, &placed),
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
    drop((upstream, proxy, gateway, jwt_gateway, pg_gateway, pg_second));
    Ok(())
}

/// The per-call counts of the null proxy and the gateway's read-only call in both eras;
/// why none, where `perf` cannot count.
async fn count_both_eras(proxy: &Proc, gateway: &Proc, quick: bool) -> Result<Vec<Counts>, String> {
    let calls = if quick { 2_000 } else { 10_000 };
    let probes = Probes::add(gateway.pid()).await?;
    let counted = async {
        let session = open_session(gateway.addr).await?;
        let legacy_read: MakeRequest = Arc::new(move |_| legacy("up__read", &session));
        Ok::<_, anyhow::Error>(vec![
            counts::count(
                &probes,
                "null proxy",
                proxy.addr,
                proxy.pid(),
                calls,
                read_direct(),
            )
            .await?,
            counts::count(
                &probes,
                "gateway read-only",
                gateway.addr,
                gateway.pid(),
                calls,
                read_through(AGENT),
            )
            .await?,
            counts::count(
                &probes,
                "gateway read-only, legacy",
                gateway.addr,
                gateway.pid(),
                calls,
                legacy_read,
            )
            .await?,
        ])
    }
    .await;
    probes.remove().await;
    counted.map_err(|e| format!("{e:#}"))
}

/// `mcp-bench per-call`: only the per-call counts (system calls, context switches,
/// allocations) and the core-scaling rows.
pub(crate) async fn per_call(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = bench_dir("per-call")?;
    let upstream = start_upstream(&me).await?;
    let proxy = start_null_proxy(Command::new(&me), upstream.addr).await?;
    let gateway = start_gateway(
        &options.gateway,
        &dir,
        "memory",
        "[store]\nkind = \"memory\"",
        upstream.addr,
    )
    .await?;
    let counted = count_both_eras(&proxy, &gateway, options.quick).await;
    let core_rows = cores::cores(&me, &options.gateway, &dir, upstream.addr, options.quick).await?;
    let mut md = String::new();
    counts_report(&mut md, &counted);
    cores_report(&mut md, &core_rows);
    println!("{md}");
    drop((upstream, proxy, gateway));
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

/// `mcp-bench confirmed`: only confirmed destructive calls on PostgreSQL at concurrency 16
/// (needs DATABASE_URL): calls/s, the gateway's CPU and the cluster's CPU per call, and
/// transactions per call — what a change to the store's statements is judged by.
pub(crate) async fn confirmed_only(options: Options) -> Result<()> {
    let me = std::env::current_exe()?;
    let dir = bench_dir("confirmed")?;
    let upstream = start_upstream(&me).await?;
    let db = TestDb::new().await;
    let store = postgres_store(&db);
    let gateway = start_gateway(&options.gateway, &dir, "postgres", &store, upstream.addr).await?;
    let admin = db.admin().await;
    let count = if options.quick { 1_000 } else { 5_000 };
    let mut timed = true;
    for round in 0..3 {
        let ids = Arc::new(ready_confirmations(gateway.addr, count).await?);
        let confirmed = confirmed_calls(ids);
        tokio::time::sleep(Duration::from_secs(11)).await;
        timed = timed && statements::reset(&admin).await;
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
        if timed {
            statements::print(&statements::top(&admin, 6).await?, count);
        }
    }
    drop((gateway, upstream));
    Ok(())
}
