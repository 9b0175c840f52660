//! `anteroom-sim`: flash-crowd simulator and benchmarks. Each benchmark is a
//! subcommand; add new ones as variants of [`Command`].

mod engine;

use clap::{Parser, Subcommand};

/// mimalloc, as the server has: the crowd and the origin allocate a few
/// small blocks per request on one worker thread and free them on another,
/// and on one box their glibc malloc and free took CPU from the server they
/// measure (profiles in docs/benchmarks.md). The engine benchmark's store
/// then allocates as it does inside the server.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "anteroom-sim",
    about = "Flash-crowd simulator and benchmarks for Anteroom"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Queue engine benchmark straight against a store: durable joins/s,
    /// rank latency, admits/s, memory per waiter, restart time.
    Engine(engine::EngineArgs),
    /// A flash crowd of virtual visitors against a running anteroom, judged:
    /// fairness, origin concurrency, ETA honesty, polls, latency, errors.
    Crowd(anteroom_sim::crowd::CrowdArgs),
    /// An instrumented origin that records its concurrency and can degrade.
    Origin(anteroom_sim::origin::OriginArgs),
    /// Hot-path throughput (position polls, joins, gated traffic) beside a baseline.
    Http(anteroom_sim::http::HttpArgs),
    /// Admitted visitors' session cookies and unredeemed tokens, one per
    /// line, for a redeem benchmark (`scripts/bench-http redeem`).
    Tokens(anteroom_sim::http::TokensArgs),
    /// A TCP proxy that puts a server (Redis) a fixed delay away: every
    /// request arrives `--delay-ms` late, as across a network.
    Distant(DistantArgs),
}

#[derive(Debug, clap::Args)]
struct DistantArgs {
    /// Address to listen on.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// The loopback port to forward to.
    #[arg(long)]
    to: u16,
    /// How long each request is held before it is passed on.
    #[arg(long)]
    delay_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Engine(args) => {
            let runs = engine::run_all(&args).await?;
            engine::print(&runs, &args)
        }
        Command::Crowd(args) => anteroom_sim::crowd::run(args).await,
        Command::Origin(args) => anteroom_sim::origin::run(args).await,
        Command::Http(args) => anteroom_sim::http::run(args).await,
        Command::Tokens(args) => anteroom_sim::http::tokens(args).await,
        Command::Distant(args) => {
            let listener = tokio::net::TcpListener::bind(args.listen).await?;
            let delay = std::time::Duration::from_millis(args.delay_ms);
            anteroom_store::testing::serve_distant(listener, args.to, delay).await;
            Ok(())
        }
    }
}
