//! The routers and `run`: the top layer, which builds the store, the state
//! and the background tasks, and serves the public and admin listeners.

use std::future::Future;
use std::sync::Arc;

use anteroom_store::QueueStore;
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore};
use anteroom_store::redis::{RedisConfig, RedisStore};
use anyhow::Context as _;
use axum::Router;

use crate::config::Config;
use crate::state::AppState;
use crate::{
    access, admin, api, bots, config, drain, error, gate, identity, metrics, scheduler, serve, tls,
};

pub mod hot;

// Paths older than the split of the state from the routers, still used by
// the integration tests and the simulator.
pub use crate::clock::Clock;
pub use crate::locks::{lock, read};
pub use crate::state::EventRuntime;

/// Opens the configured queue store.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn QueueStore>> {
    Ok(match &config.store {
        config::StoreConfig::Embedded { path, timeout } => {
            std::fs::create_dir_all(path)
                .with_context(|| format!("store.path: cannot create {}", path.display()))?;
            let opts = EmbeddedOptions {
                timeout: *timeout,
                ..EmbeddedOptions::default()
            };
            let store = EmbeddedStore::open(path, opts).await.with_context(|| {
                format!(
                    "store.path: cannot open the embedded store in {}",
                    path.display()
                )
            })?;
            Arc::new(store)
        }
        config::StoreConfig::Redis {
            urls,
            cluster,
            timeout,
        } => {
            let cfg = RedisConfig {
                urls: urls.clone(),
                cluster: *cluster,
                timeout: *timeout,
            };
            Arc::new(
                RedisStore::connect(&cfg)
                    .await
                    .context("store.urls: cannot connect to Redis")?,
            )
        }
    })
}

/// Runs the server on the given listeners until `shutdown` completes.
pub async fn run(
    public: tokio::net::TcpListener,
    admin: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    run_with_store(public, admin, config, store, shutdown).await
}

/// The listeners a server runs on, bound by the caller (port 0 in tests).
pub struct Listeners {
    pub public: tokio::net::TcpListener,
    pub admin: tokio::net::TcpListener,
    /// The plain-HTTP redirect listener of `[server.tls]`; bound from
    /// `server.tls.redirect_listen` when `None` and that key is set.
    pub redirect: Option<tokio::net::TcpListener>,
}

/// [`run`] with every listener given, the redirect one included.
pub async fn run_listeners(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    serve_all(listeners, config, store, shutdown).await
}

/// [`run`] with a store the caller opened (tests share or break one).
pub async fn run_with_store(
    public: tokio::net::TcpListener,
    admin: tokio::net::TcpListener,
    config: Config,
    store: Arc<dyn QueueStore>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listeners = Listeners {
        public,
        admin,
        redirect: None,
    };
    serve_all(listeners, config, store, shutdown).await
}

async fn serve_all(
    listeners: Listeners,
    config: Config,
    store: Arc<dyn QueueStore>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Listeners {
        public,
        admin,
        redirect,
    } = listeners;
    metrics::install();
    // Certificates first: a bad pair stops the start before anything runs.
    let challenges = tls::Challenges::default();
    let (tls, tls_tasks) = match &config.server.tls {
        Some(t) => {
            let (tls, tasks) = tls::start(t, challenges.clone()).await?;
            (Some(tls), tasks)
        }
        None => (None, Vec::new()),
    };
    let redirect = match (
        redirect,
        config.server.tls.as_ref().and_then(|t| t.redirect_listen),
    ) {
        (Some(l), _) => Some(l),
        (None, Some(addr)) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("server.tls.redirect_listen: cannot bind {addr}"))?,
        ),
        (None, None) => None,
    };
    let events = config::stored::resolve(&config.events, store.as_ref())
        .await
        .context("loading event configuration")?;
    let state = Arc::new(AppState::new(
        &config,
        events,
        store,
        crate::clock::node_clock(config.server.drain.test_clock_offset_ms),
    )?);
    // Drain admissions a crash left unrecorded are taken back before any
    // event can admit again (see `journal`).
    let journal = crate::journal::JournalDir::open(&config.server.drain_journal)
        .map_err(|e| anyhow::anyhow!("server.drain_journal: {e}"))?;
    let _ = state.drain_journal.set(journal);
    for rt in state.events().iter() {
        let found =
            drain::restore(&state, rt).map_err(|e| anyhow::anyhow!("server.drain_journal: {e}"))?;
        if found > 0 {
            tracing::warn!(event = %rt.id(), admissions = found, "drain admissions from before a restart; recording them before admitting again");
        }
    }
    for rt in state.events().iter() {
        crate::refresh::refresh_once(&state, rt).await;
    }
    scheduler::spawn_all(&state);
    crate::api::stream::listen_to_other_nodes(&state);
    // Reputation files are re-read when they change; idle rate-limit keys
    // are forgotten on the same tick.
    let bots_reload = state.bots.spawn_reload(std::time::Duration::from_secs(10));
    // Visitors whose polls were rate-limited are marked seen in batches.
    let bots_seen = state
        .bots
        .spawn_seen_flush(state.store.clone(), std::time::Duration::from_secs(1));
    tracing::info!(public = %public.local_addr()?, admin = %admin.local_addr()?, store = state.store.name(), "anteroom listening");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let hsts = tls.as_ref().and_then(|t| t.hsts.clone());
    let public_app = tls::with_hsts(public_router(state.clone()), hsts.clone());
    let (public_limits, admin_limits, redirect_limits) =
        listener_limits(&config.server, redirect.is_some())?;
    let admin_tls = tls.clone().filter(|t| t.admin);
    // An admin listener over TLS is told to browsers as HTTPS-only too: the
    // dashboard is a page, and its token must never go out in clear.
    let admin_hsts = admin_tls.as_ref().and_then(|t| t.hsts.clone());
    let admin_app = tls::with_hsts(admin::router(state.clone()), admin_hsts);
    let https_port = public.local_addr()?.port();
    let redirect_task = redirect.map(|l| {
        let app = tls::redirect::router(challenges, https_port);
        tokio::spawn(serve::serve(l, app, redirect_limits, None, stop_rx.clone()))
    });
    let public_hot =
        hot::PublicHot::new(state.clone(), hsts).map(|h| Arc::new(h) as Arc<dyn serve::HotRoutes>);
    let public_app = serve::App {
        router: public_app,
        hot: public_hot,
    };
    let public_task = tokio::spawn(serve::serve(
        public,
        public_app,
        public_limits,
        tls,
        stop_rx.clone(),
    ));
    let admin_task = tokio::spawn(serve::serve(
        admin,
        admin_app,
        admin_limits,
        admin_tls,
        stop_rx,
    ));
    shutdown.await;
    // Graceful stop: listeners close, requests in flight finish (within
    // `server.shutdown_grace`), then the background tasks end. The store
    // closes when its last handle drops (the embedded store joins its
    // writer threads after their last commit); every join answered before
    // that was already durable.
    // Push streams never finish on their own: they end first, so the
    // graceful stop is not held for `shutdown_grace` by open streams.
    state.push.close();
    let _ = stop_tx.send(true);
    let _ = public_task.await;
    let _ = admin_task.await;
    if let Some(t) = redirect_task {
        let _ = t.await;
    }
    for t in tls_tasks {
        t.abort();
    }
    // Admin changes the listener took before it stopped run to their end
    // (their clients may be gone), and may start an event's tasks: before
    // those are stopped.
    state.admin_changes.close();
    state.admin_changes.wait().await;
    // Aborted and waited for: a tick in progress must not renew a hold
    // after it is given up.
    let mut tasks = std::mem::take(&mut *crate::locks::lock(&state.tasks));
    tasks.shutdown().await;
    // With the scheduler stopped nothing renews this node's drain holds:
    // give them up, so the nodes that stay may use that capacity.
    crate::drain::share::give_up(&state, std::time::Duration::from_secs(2)).await;
    bots_reload.abort();
    bots_seen.abort();
    tracing::info!("stopped");
    Ok(())
}

/// What `anteroom check` verifies beyond the configuration's own shape:
/// everything `run` builds before it opens the store — the token keys, the
/// bot defence and its files, each event's JWT key.
/// Opens no store and binds no port, so it is safe beside a live server.
pub fn check(config: &Config) -> anyhow::Result<()> {
    let keyring = anteroom_core::token::Keyring::new(&config.secrets).context("keys.secrets")?;
    bots::BotDefence::new(
        &config.bots,
        bots::RateLimits::from(&config.limits),
        Arc::new(keyring),
    )
    .map_err(|e| anyhow::anyhow!("invalid configuration: bots: {e}"))?;
    for e in &config.events {
        if let config::Identity::Jwt(jwt) = &e.identity {
            identity::JwtVerifier::new(jwt)
                .with_context(|| format!("event {:?}: jwt key", e.id.as_str()))?;
        }
    }
    if let Some(t) = &config.server.tls {
        tls::check(t)?;
    }
    Ok(())
}

/// The public and admin listeners' limits: the configured timeouts, and
/// connection caps that fit the process's descriptor limit.
/// The public, admin and redirect listeners' limits (the redirect
/// listener's, when there is one, `redirect`).
fn listener_limits(
    server: &config::ServerConfig,
    redirect: bool,
) -> anyhow::Result<(serve::Limits, serve::Limits, serve::Limits)> {
    let c = &server.connections;
    let nofile = serve::connections::descriptor_limit();
    let caps = serve::connections::connection_caps(c.max_connections, nofile, redirect)
        .map_err(anyhow::Error::msg)?;
    let limits = |max_connections, event_loops, http1_only| serve::Limits {
        header_read_timeout: server.header_read_timeout,
        body_read_timeout: c.body_read_timeout,
        send_timeout: c.send_timeout,
        max_connections,
        http2_keep_alive_interval: c.http2_keep_alive_interval,
        http2_keep_alive_timeout: c.http2_keep_alive_timeout,
        http2_idle_timeout: c.http2_idle_timeout,
        shutdown_grace: server.shutdown_grace,
        event_loops,
        http1_only,
    };
    // Only the public listener carries the crowd; the admin and redirect
    // listeners stay on the shared runtime.
    Ok((
        limits(caps.public, c.event_loops, false),
        limits(caps.admin, 0, false),
        limits(caps.redirect, 0, true),
    ))
}

/// The public listener: queue API and page routes, the gate as fallback, and
/// the header-size guard around everything.
pub fn public_router(state: Arc<AppState>) -> Router {
    let access_log = state.server.access_log;
    let router = api::router()
        .fallback(gate::gate)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn(gate::limit_headers));
    let router = if access_log {
        router.layer(axum::middleware::from_fn(access::log))
    } else {
        router
    };
    router.with_state(state)
}
