//! `mcp-gateway`: an MCP gateway that holds destructive tool calls until a person confirms
//! them. `serve` (the default) runs it; `migrate` applies the PostgreSQL migrations.
//! Without `--config` it runs the demo.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use elicitation_store::SystemClock;
use tracing_subscriber::EnvFilter;

mod accounts;
mod app;
mod config;
mod explain;
mod import;
mod notify;
mod users;

use config::Config;

/// mimalloc: the gateway allocates small, short-lived objects on every call, across worker
/// threads; glibc's allocator spent about an eighth of the gateway's instructions per call
/// on them (callgrind), mimalloc a fraction of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "mcp-gateway",
    version,
    about = "An MCP gateway that holds destructive tool calls until a person confirms them"
)]
struct Cli {
    /// Configuration file (TOML). Without one, the demo runs on 127.0.0.1:8080.
    #[arg(long, short, global = true, env = "MCP_GATEWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default).
    Serve,
    /// Apply the PostgreSQL migrations (run as the schema owner).
    Migrate {
        /// Database URL (default: store.database_url of the configuration, or DATABASE_URL).
        #[arg(long, env = "DATABASE_URL")]
        database_url: Option<String>,
    },
    /// Check a configuration file and print the effective configuration (every default
    /// filled in, secrets redacted); exits non-zero with the reason if it is invalid.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// The policy of the configuration (`--config`).
    Policy {
        #[command(subcommand)]
        action: PolicyCommand,
    },
    /// The audit trail on PostgreSQL.
    Audit {
        #[command(subcommand)]
        action: AuditCommand,
    },
    /// Print the `[[modules]]` (TOML) of the MCP servers in a client's configuration: a
    /// Claude Desktop, Claude Code or Cursor `mcpServers` file, or a VS Code
    /// `.vscode/mcp.json`. Secrets become references to the gateway's environment.
    Import {
        /// The client's configuration file (JSON, or VS Code's JSON with comments).
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Walk the tamper-evident chain of the audit table and report the first row that was
    /// changed, removed, reordered or inserted; exits non-zero if there is one. Run it as the
    /// schema owner (it reads every caller's rows), with the gateway's seal keys
    /// (`--config`'s, or MCP_GATEWAY_SEAL_KEYS).
    Verify {
        /// Database URL of the schema owner (default: DATABASE_URL).
        #[arg(long, env = "DATABASE_URL")]
        database_url: Option<String>,
    },
    /// Write the audit events recorded in a time range as JSON lines on stdout (every
    /// caller's: run it as the schema owner). Each line is one event: id, at, event,
    /// caller, tenant, elicitation_id, tool, detail, and whether it is sealed into the chain.
    Export {
        /// Database URL of the schema owner (default: DATABASE_URL).
        #[arg(long, env = "DATABASE_URL")]
        database_url: Option<String>,
        /// From this time on (RFC 3339, like 2026-12-01T00:00:00Z).
        #[arg(long)]
        since: String,
        /// Before this time (RFC 3339); default: now.
        #[arg(long)]
        until: Option<String>,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Print what the policy decides for one call, and the rule that decides it.
    Explain {
        /// The qualified tool name, as clients see it (`fs__write_file`).
        #[arg(long)]
        tool: String,
        /// The call's arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The caller's subject.
        #[arg(long, default_value = "local")]
        caller: String,
        /// The caller's groups, separated by commas.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
        /// The tool's annotations as its module lists them (JSON); they count only for a
        /// module with `trust_annotations = true`.
        #[arg(long)]
        annotations: Option<String>,
    },
}

/// The log on stderr, and (serving with `[tracing] otlp_endpoint`) the trace exporter on
/// `runtime`: its spans are the exporter's only, never the log's. `[tracing]` is read at
/// start-up (a reload keeps the running exporter).
fn init_tracing(
    format: LogFormat,
    traces: Option<&mcp_trace::TraceConfig>,
    runtime: &tokio::runtime::Handle,
) -> Option<mcp_trace::Installed> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tokio_postgres=warn,refinery_core=warn"));
    let filter = match format!("{}=off", mcp_trace::TARGET).parse() {
        Ok(off) => filter.add_directive(off),
        Err(_) => filter,
    };
    let (exporter, installed, failed) = match traces.map(|t| mcp_trace::install(t, runtime.clone()))
    {
        Some(Ok((layer, installed))) => (Some(layer), Some(installed), None),
        Some(Err(e)) => (None, None, Some(e)),
        None => (None, None, None),
    };
    // Without an exporter the trace spans have no layer at all: disabled at their
    // callsites, they cost a cached interest check.
    match exporter {
        Some(exporter) => tracing_subscriber::registry()
            .with(exporter.with_filter(mcp_trace::only_traces()))
            .with(log_layer(format).with_filter(filter))
            .init(),
        None => tracing_subscriber::registry()
            .with(log_layer(format).with_filter(filter))
            .init(),
    }
    if let Some(e) = failed {
        tracing::error!(error = %e, "traces are not exported");
    }
    if let Some(traces) = traces.filter(|_| installed.is_some()) {
        tracing::info!(endpoint = %traces.endpoint, sample_ratio = traces.sample_ratio, "exporting traces");
    }
    installed
}

/// The log on stderr, human or JSON lines.
fn log_layer<S>(format: LogFormat) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Human => log.boxed(),
        LogFormat::Json => log.json().boxed(),
    }
}

/// `[tracing]` of the configuration the gateway is about to serve (none for the other
/// commands, or when the file does not load: serving says why).
fn traces_of(cli: &Cli) -> Option<mcp_trace::TraceConfig> {
    if !matches!(cli.command, None | Some(Command::Serve)) {
        return None;
    }
    let config = Config::load(cli.config.as_ref()?).ok()?;
    config.tracing.resolve().ok().flatten()
}

/// What a module (a child process) could otherwise take from the gateway: descriptors the
/// gateway inherited without close-on-exec (the gateway's own are all close-on-exec) are
/// marked so, and the process becomes non-dumpable — its `/proc/<pid>/environ`, `mem` and the
/// like are unreadable to other processes of the same user, and it writes no core file that
/// could hold its keys.
fn protect_from_children() -> Option<String> {
    // Before any thread starts: nothing else opens descriptors meanwhile.
    close_fds::set_fds_cloexec(3, &[]);
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        return Some(e.to_string());
    }
    None
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let unprotected = protect_from_children();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mcp-gateway: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let traces = init_tracing(cli.log_format, traces_of(&cli).as_ref(), runtime.handle());
    if let Some(e) = unprotected {
        tracing::warn!(error = %e, "cannot make the process non-dumpable; modules running as the same user may read its environment");
    }
    let result = runtime.block_on(run(cli));
    if let Some(traces) = traces {
        // What waits is sent, within a few seconds.
        traces.shutdown();
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-gateway: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line each joined by `: `, every part once (a cause whose
/// text its context already carries is not repeated) and without the trailing newlines
/// some carry (which ran the next part into them).
fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        let part = part.trim_end();
        if part.is_empty() || text.contains(part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(part);
    }
    text
}

// Long: the process's start-up and shutdown in order.
async fn run(cli: Cli) -> Result<()> {
    if let Some(Command::Import { file }) = &cli.command {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        print!("{}", import::import(&text, &file.display().to_string())?);
        return Ok(());
    }
    if let Some(Command::CheckConfig { file }) = &cli.command {
        let config = Config::load(file)?;
        let effective = config.effective()?;
        println!(
            "# {} is valid. The effective configuration (secrets redacted):\n\n{effective}",
            file.display()
        );
        return Ok(());
    }
    let config = match &cli.config {
        Some(path) => Some(Config::load(path)?),
        None => None,
    };
    if let Some(Command::Policy { action }) = &cli.command {
        let PolicyCommand::Explain {
            tool,
            args,
            caller,
            groups,
            annotations,
        } = action;
        let config =
            config.context("policy explain needs the configuration: pass --config FILE")?;
        let call = explain::Call {
            tool: tool.clone(),
            args: args.clone(),
            caller: caller.clone(),
            groups: groups.clone(),
            annotations: annotations.clone(),
        };
        print!("{}", explain::explain(&config, &call)?);
        return Ok(());
    }
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(config, cli.config).await,
        Command::CheckConfig { .. } | Command::Policy { .. } | Command::Import { .. } => Ok(()),
        Command::Audit {
            action: AuditCommand::Verify { database_url },
        } => {
            let url = database_url.context(
                "no database: pass --database-url (the schema owner's URL) or set DATABASE_URL",
            )?;
            let keys = match &config {
                Some(config) => app::seal_keys(config),
                None => elicitation_store::KeyRing::from_env().map_err(anyhow::Error::from),
            }
            .context("the chain is keyed from the gateway's seal keys: pass --config, or set MCP_GATEWAY_SEAL_KEYS")?;
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .context("cannot connect to the database")?;
            tokio::spawn(connection);
            let report = elicitation_store::verify_audit(&client, &keys)
                .await
                .context("the audit table could not be read (run as the schema owner)")?;
            let head = report
                .head
                .as_ref()
                .map_or_else(|| "none".to_owned(), |(id, mac)| format!("row {id}, {mac}"));
            println!(
                "{} rows, {} verified, {} not verified (not sealed yet); chain head: {head}",
                report.rows, report.verified, report.unsealed_tail
            );
            let sweep = config
                .as_ref()
                .map_or(std::time::Duration::from_secs(30), |c| {
                    c.store.sweep_interval
                });
            let max_wait = elicitation_store::max_unsealed_wait(sweep);
            if let Some((row, why)) = report.broken {
                println!("BROKEN at row {row}: {why}");
                anyhow::bail!("the audit chain is broken at row {row}")
            }
            if let Some(why) = report.stalled(max_wait) {
                println!("NOT VERIFIED: {why}");
                anyhow::bail!("the audit chain is not verified past its head")
            }
            match (report.unsealed_tail, &report.head) {
                (0, _) => println!("the audit chain is whole"),
                (n, Some((row, _))) => println!(
                    "the audit chain is whole up to row {row}; the {n} newest rows are not verified yet (settling, sealed within {} s)",
                    max_wait.as_secs()
                ),
                (n, None) => println!(
                    "nothing is verified yet: the {n} rows are settling (sealed within {} s)",
                    max_wait.as_secs()
                ),
            }
            Ok(())
        }
        Command::Audit {
            action:
                AuditCommand::Export {
                    database_url,
                    since,
                    until,
                },
        } => {
            use std::io::Write as _;
            let url = database_url.context(
                "no database: pass --database-url (the schema owner's URL) or set DATABASE_URL",
            )?;
            let time = |what: &str, text: &str| {
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .with_context(|| {
                        format!("{what} must be an RFC 3339 time like 2026-12-01T00:00:00Z, not {text:?}")
                    })
            };
            let since = time("--since", &since)?;
            let until = until.map(|u| time("--until", &u)).transpose()?;
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .context("cannot connect to the database")?;
            tokio::spawn(connection);
            let mut out = std::io::stdout().lock();
            let mut after = i64::MIN;
            let mut written = 0u64;
            loop {
                let page = elicitation_store::audit_page(&client, since, until, after, 1000)
                    .await
                    .context("the audit table could not be read (run as the schema owner)")?;
                let Some(last) = page.last() else { break };
                after = last["id"].as_i64().unwrap_or(i64::MAX);
                for event in &page {
                    writeln!(out, "{event}").context("cannot write the export")?;
                    written += 1;
                }
            }
            out.flush().context("cannot write the export")?;
            eprintln!("{written} audit events");
            Ok(())
        }
        Command::Migrate { database_url } => {
            let url = database_url
                .map_or_else(
                    || config.as_ref().map_or(Ok(None), |c| c.store.database_url()),
                    |url| Ok(Some(url)),
                )?
                .context("no database: pass --database-url, set DATABASE_URL, or set store.database_url or store.database_url_file in the configuration")?;
            // Over TLS as the store connects, when the configuration says so.
            let tls = match &config {
                Some(config) => app::store_tls(&config.store)?,
                None => None,
            };
            let applied = elicitation_store::migrate_url(&url, tls)
                .await
                .context("migration failed")?;
            if applied.is_empty() {
                println!("the database is up to date");
            }
            for name in applied {
                println!("applied {name}");
            }
            Ok(())
        }
    }
}

/// The end of serving: `SIGTERM` or `SIGINT` (Ctrl-C). The handlers are installed now, when
/// this is called (before the gateway says it listens), so a signal sent right after that
/// line is never the default action that kills the process.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (terminate, interrupt) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let wait = async |signal: std::io::Result<tokio::signal::unix::Signal>| match signal {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            };
            tokio::select! {
                () = wait(terminate) => {}
                () = wait(interrupt) => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: no new connections; finishing calls in flight");
    }
}

/// Reloads the configuration from `path` on every `SIGHUP` (until the process ends): an
/// invalid file is refused with its reason and the running configuration stays.
fn reload_on_hangup(app: Arc<app::App>, path: Option<PathBuf>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let mut hangups = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::hangup(),
        ) {
            Ok(signal) => signal,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; configuration reload is off");
                return;
            }
        };
        while hangups.recv().await.is_some() {
            let Some(path) = &path else {
                tracing::warn!(
                    "SIGHUP: the demo runs without a configuration file; nothing to reload"
                );
                continue;
            };
            let config = match Config::load(path) {
                Ok(config) => config,
                Err(e) => {
                    tracing::error!(file = %path.display(), error = format!("{e:#}"), "SIGHUP: the configuration is invalid; keeping the running one");
                    app.service.gateway().metrics().reloaded(false);
                    continue;
                }
            };
            match app.reload(&config).await {
                Ok(done) => {
                    if done.needs_restart {
                        tracing::warn!(
                            "SIGHUP: listen, [store], [http], [uploads], [metrics], the auth mode, [auth.jwt] and [gate] native take a restart; their running values stay"
                        );
                    }
                    tracing::info!(file = %path.display(), added = ?done.added, removed = ?done.removed, changed = ?done.changed, tokens_reloaded = done.tokens_reloaded, "SIGHUP: configuration reloaded");
                    app.service.gateway().metrics().reloaded(true);
                }
                Err(e) => {
                    tracing::error!(file = %path.display(), error = format!("{e:#}"), "SIGHUP: the configuration could not be applied; keeping the running one");
                    app.service.gateway().metrics().reloaded(false);
                }
            }
        }
    });
    #[cfg(not(unix))]
    let _ = (app, path);
}

async fn serve(config: Option<Config>, path: Option<PathBuf>) -> Result<()> {
    let demo = config.is_none();
    let config = config.unwrap_or_else(Config::demo);
    let app = Arc::new(app::build(&config).await?);
    reload_on_hangup(app.clone(), path);
    let listener = mcp_http::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let address = listener.local_addr()?;
    let stopping = shutdown_signal();
    tracing::info!(%address, "mcp-gateway listening");
    // One line on stdout that scripts (and the end-to-end tests) can wait for.
    // One write, errors ignored: whoever started the gateway may read the first line and
    // close the pipe (a failed print must not stop the gateway).
    {
        use std::io::Write as _;
        let _ = std::io::stdout().write_all(
            format!(
                "mcp-gateway listening on http://{address}/mcp\napprovals page: http://{address}/approvals\n"
            )
            .as_bytes(),
        );
        let _ = std::io::stdout().flush();
    }
    if demo {
        print_demo_help(address);
    }
    let (stop_sweeper, sweeper_stopped) = tokio::sync::oneshot::channel::<()>();
    let sweeper = tokio::spawn(elicitation_store::sweep(
        app.store.clone(),
        Arc::new(SystemClock),
        elicitation_store::SweepOptions {
            every: config.store.sweep_interval,
            retention: config.store.retention,
        },
        {
            let service = app.service.clone();
            move |swept| service.swept(swept)
        },
        async {
            let _ = sweeper_stopped.await;
        },
    ));
    let (stop_notifier, notifier_stopped) = tokio::sync::oneshot::channel::<()>();
    let notifier = notifier(&config, &app, address)?;
    let notifier = tokio::spawn(notifier.run(async {
        let _ = notifier_stopped.await;
    }));
    let (stop_operations, operations_stopped) = tokio::sync::oneshot::channel::<()>();
    let operations = match config.metrics.listen {
        Some(at) => {
            let listener = mcp_http::bind(at)
                .with_context(|| format!("cannot listen on {at} ([metrics] listen)"))?;
            tracing::info!(address = %listener.local_addr()?, "operations endpoints (/metrics, /readyz, /healthz) listening");
            Some(tokio::spawn(mcp_http::serve_operations(
                listener,
                app.service.clone(),
                async {
                    let _ = operations_stopped.await;
                },
            )))
        }
        None => None,
    };
    let serve_config = mcp_http::ServeConfig {
        header_read_timeout: config.http.header_read_timeout,
        idle_timeout: config.http.idle_timeout,
        max_connections: connection_cap(config.http.max_connections),
    };
    mcp_http::serve(listener, app.service.clone(), serve_config, stopping).await;
    let _ = stop_sweeper.send(());
    let _ = sweeper.await;
    let _ = stop_notifier.send(());
    let _ = notifier.await;
    let _ = stop_operations.send(());
    if let Some(operations) = operations {
        let _ = operations.await;
    }
    app.registry().shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// Descriptors kept for everything but client connections: the listener, the database pool,
/// modules' pipes, files.
const RESERVED_DESCRIPTORS: usize = 128;

/// The connection cap, lowered (with a warning) to fit the process's descriptor limit, so the
/// cap — not `accept` failing with EMFILE — is what holds new clients back.
fn connection_cap(configured: usize) -> usize {
    #[cfg(target_os = "linux")]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        if let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()) {
            let fits = limit.saturating_sub(RESERVED_DESCRIPTORS).max(1);
            if configured > fits {
                tracing::warn!(
                    configured,
                    descriptor_limit = limit,
                    using = fits,
                    "[http] max_connections does not fit the open-files limit (ulimit -n); lowering it"
                );
                return fits;
            }
        }
    }
    configured
}

fn print_demo_help(address: std::net::SocketAddr) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stdout(),
        r#"
mcp-gateway demo: MCP endpoint http://{address}/mcp  (memory store, no auth, loopback only)
The `demo` module keeps a notebook: demo__list_notes (read-only), demo__add_note, demo__delete_note (destructive).
Held calls wait for you on the approvals page: http://{address}/approvals

Try it (the README walks through it):
  S=$(curl -si http://{address}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
       -d '{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"curl","version":"1"}}}}}}' \
       | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{{print $2}}')
  curl -s http://{address}/mcp -H "mcp-session-id: $S" -H 'content-type: application/json' \
       -d '{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"demo__delete_note","arguments":{{"number":1}}}}}}'
  curl -s http://{address}/v1/mcp/elicitations
"#
    );
}

/// The notifier of `app`'s sinks, with the approver rules' reminders and escalations; its
/// links go to the page as people reach it.
fn notifier(
    config: &Config,
    app: &app::App,
    address: std::net::SocketAddr,
) -> Result<mcp_notify::Notifier> {
    let page = config.http.public_url.clone().unwrap_or_else(|| {
        if !app.sinks.is_empty() {
            tracing::warn!(%address, "[[notify]] links point at the listen address; set [http] public_url to the address people reach the gateway at");
        }
        format!("http://{address}")
    });
    let routes = config
        .approvers
        .iter()
        .map(crate::config::ApproverConfig::route)
        .collect::<Result<_>>()?;
    Ok(mcp_notify::Notifier::new(
        app.store.clone(),
        app.sinks.clone(),
        page,
        Arc::new(SystemClock),
        app.metrics(),
    )
    .map_err(anyhow::Error::msg)?
    .with_routes(routes))
}

#[cfg(test)]
mod tests {
    use super::error_text;

    /// Every part of an error once, on one line: a cause its context already quotes is not
    /// repeated, and a cause's trailing newline does not run the next part into it.
    #[test]
    fn an_error_is_printed_once_on_one_line() {
        let cause = anyhow::anyhow!("unknown field `bogus`\n");
        let error = cause.context("invalid configuration in gw.toml");
        assert_eq!(
            error_text(&error),
            "invalid configuration in gw.toml: unknown field `bogus`"
        );
        let quoted =
            anyhow::anyhow!("the file is not there").context("cannot start: the file is not there");
        assert_eq!(error_text(&quoted), "cannot start: the file is not there");
    }
}
