//! `anteroom-sim distant`, the binary, in front of a real `redis-server`:
//! commands pass through it and each round trip costs its delay.
use std::time::{Duration, Instant};

use anteroom_store::testing::RedisServer;

#[tokio::test]
async fn distant_passes_commands_a_delay_late() {
    let redis = RedisServer::start().expect("redis-server (apt-get install redis-server)");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_anteroom-sim"))
        .args(["distant", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--to", &redis.port().to_string(), "--delay-ms", "40"])
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "anteroom-sim distant did not listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let started = Instant::now();
    let answer: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    let took = started.elapsed();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(answer, "PONG");
    assert!(
        took >= Duration::from_millis(40),
        "a round trip took {took:?}"
    );
}
