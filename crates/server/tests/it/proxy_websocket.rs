//! A WebSocket through the proxy, spoken by hand: the upgrade handshake over
//! hyper's client connection, then one raw frame each way.

use std::time::Duration;

use crate::support::origin::Origin;
use crate::support::proxy::start_gate;
use anteroom::proxy::Proxy;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A masked client text frame (RFC 6455 5.2), payload under 126 bytes.
fn client_text_frame(payload: &[u8]) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut frame = vec![0x81, 0x80 | u8::try_from(payload.len()).unwrap()];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

#[tokio::test]
async fn websocket_echo_through_the_proxy() {
    let origin = Origin::options().echo_headers().start().await;
    let gate = start_gate(Proxy::new(), origin.uri(), vec![]).await;

    let stream = tokio::net::TcpStream::connect(gate).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn.with_upgrades());
    let req = Request::get("/ws")
        .header("host", gate.to_string())
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    // RFC 6455's own example key and answer: the handshake went end to end.
    assert_eq!(
        response.headers()["sec-websocket-accept"],
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
    assert_eq!(response.headers()["upgrade"], "websocket");

    let upgraded = hyper::upgrade::on(response).await.unwrap();
    let mut io = TokioIo::new(upgraded);
    for message in [&b"hello through the gate"[..], b"and again"] {
        io.write_all(&client_text_frame(message)).await.unwrap();
        let mut head = [0u8; 2];
        tokio::time::timeout(Duration::from_secs(10), io.read_exact(&mut head))
            .await
            .expect("echo frame")
            .unwrap();
        assert_eq!(head[0], 0x81, "final text frame");
        assert_eq!(
            usize::from(head[1]),
            message.len(),
            "unmasked, short length"
        );
        let mut payload = vec![0u8; message.len()];
        io.read_exact(&mut payload).await.unwrap();
        assert_eq!(payload, message);
    }
}
