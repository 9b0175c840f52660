//! The one fake origin behind the gate: an in-process server on port 0 that
//! records what reached it (the peak of requests in flight, each request's
//! URI with its `X-Anteroom-Event` / `X-Anteroom-Session`, the sessions,
//! the TCP connections it accepted) and answers in the way a test reads.
//!
//! `/echo` streams the request body back, `/headers` answers the request
//! headers as JSON, `/big?n=BYTES` streams `n` bytes, `/ws` is a WebSocket
//! echo and `/slow` never answers; every other path is recorded, held for a
//! moment (so overlapping holders of passes show up in the peak) and
//! answered as [`OriginOptions`] says.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http::Uri;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// One request as the origin saw it: the URI, `X-Anteroom-Event` and
/// `X-Anteroom-Session`.
pub type Seen = (String, Option<String>, Option<String>);

/// How the origin answers the paths it records.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// `origin saw {uri}`.
    Saw,
    /// `origin {uri} proto={X-Forwarded-Proto}`.
    Proto,
    /// The request headers as JSON (with `uri`), like `/headers`.
    Headers,
}

/// What the origin is like; [`Origin::start`] takes the defaults.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct OriginOptions {
    hold: Duration,
    answer: Answer,
}

impl Default for OriginOptions {
    /// Each request held 5 ms, answered `origin saw {uri}`.
    fn default() -> Self {
        Self {
            hold: Duration::from_millis(5),
            answer: Answer::Saw,
        }
    }
}

impl OriginOptions {
    /// How long each recorded request stays in flight.
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Answer `origin {uri} proto={X-Forwarded-Proto}` (what the TLS tests
    /// read), at once.
    pub fn echo_proto(mut self) -> Self {
        self.answer = Answer::Proto;
        self.hold = Duration::ZERO;
        self
    }

    /// Answer the request headers as JSON (what the proxy tests read), at
    /// once, so a test sees any request that got through.
    pub fn echo_headers(mut self) -> Self {
        self.answer = Answer::Headers;
        self.hold = Duration::ZERO;
        self
    }

    pub async fn start(self) -> Arc<Origin> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = Arc::new(Origin {
            addr: listener.local_addr().unwrap(),
            options: self,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            requests: Mutex::default(),
            sessions: Mutex::default(),
            connections: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route(
                "/echo",
                post(|req: Request| async move { Response::new(req.into_body()) }),
            )
            .route("/headers", any(headers))
            .route("/big", get(big))
            .route("/ws", get(ws))
            .route("/slow", get(std::future::pending::<()>))
            .fallback(record)
            .with_state(origin.clone());
        let log = origin.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                log.connections.fetch_add(1, Ordering::SeqCst);
                log.open.fetch_add(1, Ordering::SeqCst);
                let service = TowerToHyperService::new(app.clone());
                let log = log.clone();
                tokio::spawn(async move {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                    log.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        origin
    }
}

/// A running origin and what it saw.
pub struct Origin {
    pub addr: SocketAddr,
    options: OriginOptions,
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    pub requests: Mutex<Vec<Seen>>,
    /// Each `X-Anteroom-Session` that reached it.
    pub sessions: Mutex<HashSet<String>>,
    connections: AtomicUsize,
    open: AtomicUsize,
}

impl Origin {
    /// An origin with the default [`OriginOptions`].
    pub async fn start() -> Arc<Self> {
        OriginOptions::default().start().await
    }

    pub fn options() -> OriginOptions {
        OriginOptions::default()
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn uri(&self) -> Uri {
        self.url().parse().unwrap()
    }

    /// The most requests it had in flight at once.
    pub fn peak(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    /// TCP connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn record(State(log): State<Arc<Origin>>, req: Request) -> Response {
    let now = log.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    log.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let uri = req.uri().to_string();
    // Read before any await: a borrowed request (its body is not `Sync`)
    // must not live across one.
    let (event, session, proto) = {
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        (
            header("x-anteroom-event"),
            header("x-anteroom-session"),
            header("x-forwarded-proto").unwrap_or_else(|| "-".to_owned()),
        )
    };
    if let Some(s) = &session {
        log.sessions.lock().unwrap().insert(s.clone());
    }
    log.requests
        .lock()
        .unwrap()
        .push((uri.clone(), event, session));
    let answer = match log.options.answer {
        Answer::Saw => {
            drop(req);
            format!("origin saw {uri}").into_response()
        }
        Answer::Proto => {
            drop(req);
            format!("origin {uri} proto={proto}").into_response()
        }
        Answer::Headers => headers(req).await.into_response(),
    };
    if !log.options.hold.is_zero() {
        tokio::time::sleep(log.options.hold).await;
    }
    log.in_flight.fetch_sub(1, Ordering::SeqCst);
    answer
}

async fn headers(req: Request) -> impl IntoResponse {
    let mut map = serde_json::Map::new();
    for name in req.headers().keys() {
        let values: Vec<serde_json::Value> = req
            .headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().into())
            .collect();
        map.insert(name.as_str().to_owned(), values.into());
    }
    map.insert("uri".to_owned(), req.uri().to_string().into());
    axum::Json(map)
}

async fn big(req: Request) -> Response {
    let n: usize = req
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("n="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
    let chunks = (0..n.div_ceil(chunk.len())).map(move |i| {
        let len = chunk.len().min(n - i * chunk.len());
        Ok::<_, std::io::Error>(chunk.slice(..len))
    });
    Response::new(Body::from_stream(futures::stream::iter(chunks)))
}

async fn ws(upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(|mut socket: WebSocket| async move {
        while let Some(Ok(message)) = socket.recv().await {
            if matches!(message, Message::Text(_) | Message::Binary(_))
                && socket.send(message).await.is_err()
            {
                return;
            }
        }
    })
}
