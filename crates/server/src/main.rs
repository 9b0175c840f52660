//! The `anteroom` binary: `anteroom serve --config FILE` runs the waiting
//! room; `anteroom check --config FILE` validates a configuration beside a
//! live server; `anteroom demo` runs it in front of a built-in demo shop
//! with no setup.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anteroom::config::{Config, LogFormat, Overrides};
use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

/// mimalloc instead of glibc's malloc: a request allocates a few dozen small
/// blocks on one worker thread and frees some on another, and glibc's
/// malloc and free were one of the largest parts of a position poll's CPU,
/// with arena lock waits between the workers (profiles in docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "anteroom",
    version,
    about = "A virtual waiting room in front of your origin"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the waiting room from a config file (plus ANTEROOM_* environment).
    Serve {
        /// The TOML configuration file (see anteroom.example.toml); without
        /// it, every key comes from ANTEROOM_* environment variables.
        #[arg(long, short, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Public listener address (overrides server.listen).
        #[arg(long)]
        listen: Option<String>,
        /// Admin listener address (overrides server.admin_listen).
        #[arg(long)]
        admin_listen: Option<String>,
    },
    /// Validate a configuration (file plus ANTEROOM_* environment) and the
    /// files it names, without opening the store or binding a port, so it
    /// can run beside a live server. Exits 0 when valid.
    Check {
        /// The TOML configuration file to check.
        #[arg(long, short, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Run a demo: embedded store, built-in demo shop, one small event.
    Demo {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        #[arg(long, default_value = "127.0.0.1:9090")]
        admin_listen: SocketAddr,
        /// Where the demo keeps its queue.
        #[arg(long, default_value = "./anteroom-demo-data")]
        data: PathBuf,
        /// Virtual shoppers who join the queue beside you, so the line
        /// moves as it would on the night of a drop.
        #[arg(long, default_value_t = 0, value_name = "N")]
        crowd: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("anteroom: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Errors are printed once, as one chain ("what: why"), without a
    // backtrace: they are messages for an operator, naming the key or file.
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("anteroom: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            config,
            listen,
            admin_listen,
        } => {
            let config = Config::load(
                config.as_deref(),
                &Overrides {
                    listen,
                    admin_listen,
                },
            )?;
            init_logging(config.server.log_format);
            log_ignored_env();
            serve(config).await
        }
        Command::Check { config } => {
            let path = config.as_deref();
            let config = Config::load(path, &Overrides::default())?;
            anteroom::check(&config)?;
            println!(
                "{}: valid ({} event{})",
                path.map_or_else(|| "environment".to_owned(), |p| p.display().to_string()),
                config.events.len(),
                if config.events.len() == 1 { "" } else { "s" }
            );
            Ok(())
        }
        Command::Demo {
            listen,
            admin_listen,
            data,
            crowd,
        } => {
            init_logging(LogFormat::Text);
            demo(listen, admin_listen, data, crowd).await
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let public = anteroom::bind_listener(config.server.listen)
        .with_context(|| format!("server.listen: cannot bind {}", config.server.listen))?;
    let admin = anteroom::bind_listener(config.server.admin_listen).with_context(|| {
        format!(
            "server.admin_listen: cannot bind {}",
            config.server.admin_listen
        )
    })?;
    anteroom::run(public, admin, config, shutdown_signal()).await
}

async fn demo(
    listen: SocketAddr,
    admin_listen: SocketAddr,
    data: PathBuf,
    crowd: usize,
) -> anyhow::Result<()> {
    let shop = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo shop")?;
    let shop_addr = shop.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(shop, anteroom::demo::demo_shop()).await {
            tracing::error!(error = %e, "demo shop stopped");
        }
    });
    let demo = anteroom::demo::DemoSetup::new(listen, admin_listen, &data, shop_addr, crowd);
    let config = Config::from_toml(&demo.config_toml())?;
    let public = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot bind {listen}"))?;
    let admin = TcpListener::bind(admin_listen)
        .await
        .with_context(|| format!("cannot bind {admin_listen}"))?;
    println!("{}", demo.banner());
    if crowd > 0 {
        tokio::spawn(anteroom::demo::crowd::run(listen, crowd));
    }
    anteroom::run(public, admin, config, shutdown_signal()).await
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only for a person at a terminal: journald, Kubernetes
    // and log shippers store them as garbage.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

fn log_ignored_env() {
    for name in anteroom::config::env::ignored_vars() {
        tracing::debug!(variable = %name, "ignoring an ANTEROOM_* variable that names no configuration key");
    }
}

/// Completes on `SIGTERM` (what systemd, Docker and Kubernetes send) or
/// `SIGINT` (Ctrl-C); `run` then stops gracefully. The handlers are
/// installed here, before the server starts, so a signal that arrives while
/// it is starting stops it gracefully too instead of killing it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    // `SIGHUP` is an operator's "reload": with certificate files it makes
    // the TLS task read them again (it listens itself), and otherwise there
    // is nothing to reload. Without a handler it ended the process at once,
    // no graceful stop, every request in flight dropped.
    match signal(SignalKind::hangup()) {
        Ok(mut hangup) => {
            tokio::spawn(async move {
                while hangup.recv().await.is_some() {
                    tracing::info!(
                        "SIGHUP: certificate files of [server.tls], if any, are read again; nothing else reloads"
                    );
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot listen for SIGHUP"),
    }
    async move {
        let (mut term, mut int) = match (term, int) {
            (Ok(term), Ok(int)) => (term, int),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM/SIGINT; falling back to Ctrl-C");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT: shutting down gracefully"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down gracefully"),
        }
    }
}
