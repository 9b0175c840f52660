//! Shared by the `proxy_*` tests: an in-process origin and a gate on port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anteroom::proxy::Proxy;
use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http::{HeaderName, HeaderValue, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// An origin on port 0 that counts the TCP connections it accepted.
pub struct Origin {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
}

impl Origin {
    pub fn uri(&self) -> Uri {
        format!("http://{}", self.addr).parse().unwrap()
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Starts the test origin: `/echo` streams the request body back,
/// `/headers` answers the request headers as JSON, `/big?n=BYTES` streams
/// `n` bytes, `/ws` is a WebSocket echo, `/slow` never answers; every other
/// path answers like `/headers`, so a test sees any request that got through.
pub async fn start_origin() -> Origin {
    let app = Router::new()
        .route(
            "/echo",
            post(|req: Request| async move { Response::new(req.into_body()) }),
        )
        .route("/headers", any(headers))
        .route("/big", get(big))
        .route("/ws", get(ws))
        .route("/slow", get(std::future::pending::<()>))
        .fallback(headers);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&connections);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let service = TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Origin { addr, connections }
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

/// Starts a gate that forwards every request to `origin` with `extra`.
pub async fn start_gate(
    proxy: Proxy,
    origin: Uri,
    extra: Vec<(HeaderName, HeaderValue)>,
) -> SocketAddr {
    let proxy = Arc::new(proxy);
    let app = Router::new().fallback(
        move |ConnectInfo(peer): ConnectInfo<SocketAddr>, req: Request| {
            let (proxy, origin, extra) = (Arc::clone(&proxy), origin.clone(), extra.clone());
            async move {
                let client = anteroom::proxy::ClientHop::read(&req, peer.ip(), &[]);
                proxy.forward(req, &origin, &client, extra).await
            }
        },
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await.unwrap() });
    addr
}

/// A plain HTTP client for talking to the gate.
pub fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}
