//! Shared helpers of the `bots_*` tests: a keyring, a defence, browser-like
//! header maps and an embedded store in a temporary directory.

use std::net::IpAddr;
use std::sync::Arc;

use anteroom::bots::{BotDefence, BotsConfig, EnterSignals, RateLimits};
use anteroom_core::token::Keyring;
use anteroom_store::EventId;
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore};
use http::{HeaderMap, HeaderName, HeaderValue};

pub const SECRET: &str = "a-test-secret-that-is-at-least-32-bytes-long";

pub fn keyring() -> Arc<Keyring> {
    Arc::new(Keyring::new(&[SECRET]).unwrap())
}

pub fn defence(cfg: &BotsConfig) -> BotDefence {
    BotDefence::new(cfg, RateLimits::default(), keyring()).unwrap()
}

pub fn event() -> EventId {
    EventId::new("drop").unwrap()
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A header map with fields in this order, as hyper would build it.
pub fn headers(fields: &[(&str, &[u8])]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in fields {
        h.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value).unwrap(),
        );
    }
    h
}

pub const CHROME_UA: &[u8] = b"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

/// What Chromium sends for a `fetch` from the waiting page.
pub fn chrome() -> HeaderMap {
    headers(&[
        ("host", b"shop.example"),
        ("connection", b"keep-alive"),
        ("sec-ch-ua", b"\"Chromium\";v=\"131\""),
        ("user-agent", CHROME_UA),
        ("accept", b"*/*"),
        ("sec-fetch-site", b"same-origin"),
        ("accept-encoding", b"gzip, deflate, br, zstd"),
        ("accept-language", b"en-GB,en;q=0.9"),
        ("cookie", b"anteroom_sid=abc"),
    ])
}

/// What `curl -X POST` sends.
pub fn curl() -> HeaderMap {
    headers(&[
        ("host", b"shop.example"),
        ("user-agent", b"curl/8.5.0"),
        ("accept", b"*/*"),
    ])
}

pub fn signals<'h>(d: &BotDefence, h: &'h HeaderMap, addr: &str) -> EnterSignals<'h> {
    d.signals(h, ip(addr))
}

pub async fn store() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
        .await
        .unwrap();
    (dir, store)
}
