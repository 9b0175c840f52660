//! The `anteroom` binary: `anteroom serve --config FILE` runs the waiting
//! room; `anteroom demo` runs it in front of a built-in demo shop with no setup.

use std::net::SocketAddr;
use std::path::PathBuf;

use anteroom::config::{Config, LogFormat, Overrides};
use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

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
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Public listener address (overrides server.listen).
        #[arg(long)]
        listen: Option<String>,
        /// Admin listener address (overrides server.admin_listen).
        #[arg(long)]
        admin_listen: Option<String>,
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
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
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
            serve(config).await
        }
        Command::Demo {
            listen,
            admin_listen,
            data,
        } => {
            init_logging(LogFormat::Text);
            demo(listen, admin_listen, data).await
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let public = TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("server.listen: cannot bind {}", config.server.listen))?;
    let admin = TcpListener::bind(config.server.admin_listen)
        .await
        .with_context(|| {
            format!(
                "server.admin_listen: cannot bind {}",
                config.server.admin_listen
            )
        })?;
    anteroom::run(public, admin, config, shutdown_signal()).await
}

async fn demo(listen: SocketAddr, admin_listen: SocketAddr, data: PathBuf) -> anyhow::Result<()> {
    let shop = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo shop")?;
    let shop_addr = shop.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(shop, anteroom::demo::demo_shop()).await {
            tracing::error!(error = %e, "demo shop stopped");
        }
    });
    let admin_token = anteroom::identity::new_session_id();
    let secret = format!(
        "{}{}",
        anteroom::identity::new_session_id(),
        anteroom::identity::new_session_id()
    );
    let toml = format!(
        r#"
[server]
listen = "{listen}"
admin_listen = "{admin_listen}"
admin_token = "{admin_token}"
insecure_cookies = true
[store]
kind = "embedded"
path = "{data}"
[keys]
secrets = ["{secret}"]
[[events]]
id = "drop"
origin = "http://{shop_addr}"
paths = ["/"]
max_active = 3
session_ttl = "2m"
token_ttl = "1m"
pass_ttl = "30s"
queue_idle_timeout = "2m"
admission = {{ mode = "batch", batch_size = 1, interval = "3s" }}
# Scripts (curl's user agent, no Accept-Language) score high risk and must
# solve a proof-of-work challenge; a browser scores low and joins at once.
# 16 bits is about a second of WebCrypto in a browser.
bots = {{ challenge = "high", difficulty = 16 }}
"#,
        data = data.display().to_string().replace('\\', "/"),
    );
    let config = Config::from_toml(&toml)?;
    let public = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot bind {listen}"))?;
    let admin = TcpListener::bind(admin_listen)
        .await
        .with_context(|| format!("cannot bind {admin_listen}"))?;
    println!(
        "Anteroom demo: open http://{listen}/ (3 shoppers at a time; one more admitted every 3 s)"
    );
    println!(
        "Admin API: http://{admin_listen}/admin/events  (Authorization: Bearer {admin_token})"
    );
    anteroom::run(public, admin, config, shutdown_signal()).await
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("shutting down");
}
