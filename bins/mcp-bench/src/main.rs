//! The benchmark harness behind `cargo xtask bench`: a fast upstream MCP server, a null proxy,
//! and the orchestrator that measures the gateway against both. Not a test: it asserts
//! nothing about speed; it reports.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod idle;
mod jwt;
mod load;
mod peers;
mod place;
mod procstat;
mod proxy;
mod quota;
mod run;
mod soak;
mod upstream;

#[derive(Parser)]
#[command(name = "mcp-bench", about = "Benchmark harness of cargo xtask bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the fast upstream MCP server; prints `listening on ADDR`.
    Upstream {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// List this many more read-only tools (`t0` …), for a large catalog.
        #[arg(long, default_value_t = 0)]
        tools: usize,
    },
    /// Serve the null proxy to an upstream; prints `listening on ADDR`.
    NullProxy {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        #[arg(long)]
        upstream: std::net::SocketAddr,
    },
    /// Serve an OTLP/HTTP collector that takes every export and keeps nothing; prints
    /// `listening on ADDR`.
    OtlpSink {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
    },
    /// Drive a running gateway's read-only path (for profiling it with `perf`): the upstream
    /// is an HTTP module named `up` and the token has `tools:call`.
    Load {
        /// The gateway's address.
        #[arg(long)]
        target: std::net::SocketAddr,
        /// `modern` (2026-07-28), `legacy` (a 2025-11-25 session), or `destructive` (modern
        /// calls of `up__delete`, each with a confirmation approved beforehand).
        #[arg(long, default_value = "modern")]
        era: String,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, default_value_t = 200_000)]
        requests: usize,
        /// A bearer token with `tools:call`.
        #[arg(long)]
        token: String,
        /// A bearer token with `elicitations:respond` (for `destructive`).
        #[arg(long)]
        human_token: Option<String>,
    },
    /// Soak the gateway on PostgreSQL (needs DATABASE_URL) under a mixed load, sampling
    /// its resources; fails unless they stay flat and every approval ran exactly once.
    Soak {
        /// The gateway binary (a release build).
        #[arg(long)]
        gateway: PathBuf,
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
        /// Seconds between samples.
        #[arg(long, default_value_t = 30)]
        sample_secs: u64,
    },
    /// Only confirmed destructive calls on PostgreSQL (needs DATABASE_URL), three rounds:
    /// calls/s, gateway and PostgreSQL CPU per call, transactions per call.
    Confirmed {
        /// The gateway binary (a release build).
        #[arg(long)]
        gateway: PathBuf,
        /// Fewer requests per round.
        #[arg(long)]
        quick: bool,
    },
    /// Only the scale-out rows: instances under CPU quotas on one PostgreSQL (needs
    /// DATABASE_URL and a writable cgroup CPU controller, i.e. root).
    ScaleOut {
        /// The gateway binary (a release build).
        #[arg(long)]
        gateway: PathBuf,
        /// Fewer requests per run.
        #[arg(long)]
        quick: bool,
    },
    /// Only what scanning results costs: 4 KiB and 256 KiB results through a gateway with
    /// the default content policy and one with every kind off.
    Content {
        /// The gateway binary (a release build).
        #[arg(long)]
        gateway: PathBuf,
        /// Fewer requests per run.
        #[arg(long)]
        quick: bool,
    },
    /// Only the per-call counts (system calls, context switches, allocations; `perf` as
    /// root) and the core-scaling rows.
    PerCall {
        /// The gateway binary (a release build).
        #[arg(long)]
        gateway: PathBuf,
        /// Fewer requests per run.
        #[arg(long)]
        quick: bool,
    },
    /// One gateway build against another: CPU per read-only call in both eras and the null
    /// proxy's, the five taking turns round after round, each pinned to the same CPU.
    Compare {
        /// The build measured (a release build).
        #[arg(long)]
        gateway: PathBuf,
        /// The build it is compared with (a release build of another commit).
        #[arg(long)]
        baseline: PathBuf,
        #[arg(long, default_value_t = 8)]
        rounds: usize,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Calls in each measured run.
        #[arg(long, default_value_t = 40_000)]
        requests: usize,
        /// Two rounds of 4,000 calls (to see that it runs).
        #[arg(long)]
        quick: bool,
    },
    /// Measure every path (needs DATABASE_URL for the PostgreSQL paths).
    Run {
        /// The gateway binary (a release build).
        #[arg(long)]
        gateway: PathBuf,
        /// Fewer requests per run.
        #[arg(long)]
        quick: bool,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Upstream { listen, tools } => {
            upstream::set_extra_tools(tools);
            let listener = mcp_http::bind(listen)?;
            println!("listening on {}", listener.local_addr()?);
            upstream::serve(listener).await;
        }
        Command::NullProxy { listen, upstream } => {
            let listener = mcp_http::bind(listen)?;
            println!("listening on {}", listener.local_addr()?);
            proxy::serve(listener, upstream).await;
        }
        Command::OtlpSink { listen } => {
            let listener = mcp_http::bind(listen)?;
            println!("listening on {}", listener.local_addr()?);
            proxy::sink(listener).await;
        }
        Command::Load {
            target,
            era,
            concurrency,
            requests,
            token,
            human_token,
        } => run::drive(target, &era, concurrency, requests, token, human_token).await?,
        Command::Soak {
            gateway,
            minutes,
            sample_secs,
        } => {
            soak::run(soak::Options {
                gateway,
                minutes,
                sample_every: std::time::Duration::from_secs(sample_secs.max(1)),
            })
            .await?
        }
        Command::Confirmed { gateway, quick } => {
            run::confirmed_only(run::Options { gateway, quick }).await?
        }
        Command::ScaleOut { gateway, quick } => {
            run::scale_only(run::Options { gateway, quick }).await?
        }
        Command::Content { gateway, quick } => {
            run::content(run::Options { gateway, quick }).await?
        }
        Command::PerCall { gateway, quick } => {
            run::per_call(run::Options { gateway, quick }).await?
        }
        Command::Compare {
            gateway,
            baseline,
            rounds,
            concurrency,
            requests,
            quick,
        } => {
            let (rounds, requests) = if quick {
                (2, 4_000)
            } else {
                (rounds, requests)
            };
            run::compare(run::CompareOptions {
                gateway,
                baseline,
                rounds,
                concurrency,
                requests,
            })
            .await?
        }
        Command::Run { gateway, quick } => run::run(run::Options { gateway, quick }).await?,
    }
    Ok(())
}
