//! Shared by the `proxy_*` tests: a gate on port 0 in front of an origin
//! (`support::origin` with `echo_headers`).

use std::net::SocketAddr;
use std::sync::Arc;

use anteroom::proxy::Proxy;
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use http::{HeaderName, HeaderValue, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

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
                proxy.forward(req, &origin, &client, &extra).await
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
