//! axe-core in real Chromium: the bundle (installed by scripts/test) and one
//! check that fails on any serious or critical violation. A missing bundle
//! fails the test with what to install; it never skips.

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use fantoccini::Client;
use serde_json::Value;

/// axe-core's browser bundle, installed by scripts/test with npm into a cache
/// directory (or named by `ANTEROOM_AXE_JS`).
pub fn axe_path() -> PathBuf {
    if let Some(p) = std::env::var_os("ANTEROOM_AXE_JS") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("anteroom/axe/node_modules/axe-core/axe.min.js")
}

pub fn axe_source() -> String {
    let path = axe_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core not found at {} ({e}): install it with \
             `npm install --prefix ~/.cache/anteroom/axe axe-core@4` (scripts/test does this), \
             or set ANTEROOM_AXE_JS to axe.min.js",
            path.display()
        )
    })
}

/// Runs axe-core on the page; fails on any serious or critical violation.
pub async fn axe_check(client: &Client, axe: &str, what: &str) -> Result<()> {
    axe_check_allowing(client, axe, what, &[]).await
}

/// [`axe_check`], except for the rules in `allowed` (each use says why).
pub async fn axe_check_allowing(
    client: &Client,
    axe: &str,
    what: &str,
    allowed: &[&str],
) -> Result<()> {
    // The bundle and the run in one script: with the page's own scripting
    // off (the no-JavaScript checks), a global defined by one injected
    // script is not seen by the next, so `axe` must be in scope here.
    let script = format!(
        "{axe}\n;const done = arguments[arguments.length - 1];
         axe.run(document, {{ resultTypes: ['violations'] }})
           .then(r => done(r.violations.map(v => ({{ id: v.id, impact: v.impact,
               help: v.help, nodes: v.nodes.map(n => n.target.join(' ')) }}))))
           .catch(e => done([{{ id: 'axe-error', impact: 'critical', help: String(e) }}]));"
    );
    let found = client.execute_async(&script, vec![]).await?;
    let bad: Vec<&Value> = found
        .as_array()
        .context("axe answer")?
        .iter()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .filter(|v| !allowed.contains(&v["id"].as_str().unwrap_or_default()))
        .collect();
    println!("{what}: axe violations {found}");
    ensure!(
        bad.is_empty(),
        "{what}: serious/critical axe violations: {bad:?}"
    );
    Ok(())
}
