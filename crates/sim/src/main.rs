//! `anteroom-sim`: flash-crowd simulator and benchmarks. Each benchmark is a
//! subcommand; add new ones as variants of [`Command`].

mod engine;

use clap::{Parser, Subcommand};

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Engine(args) => {
            let report = engine::run(&args).await?;
            engine::print(&report, args.json)
        }
    }
}
