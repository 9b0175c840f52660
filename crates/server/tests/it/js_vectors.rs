//! The waiting page's JavaScript against the shared vectors
//! (`crates/core/testdata/vectors.json`), under Node: the browser's SHA-256
//! (WebCrypto and the pure-JS fallback) and its proof-of-work check must agree
//! with the Rust core on every case, so page and server never disagree.

use std::path::Path;
use std::process::Command;

#[test]
fn page_javascript_matches_shared_vectors() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = manifest.join("tests/it/js/check_vectors.js");
    let vectors = manifest.join("../core/testdata/vectors.json");
    assert!(
        vectors.exists(),
        "missing shared vectors at {}",
        vectors.display()
    );
    let output = match Command::new("node")
        .arg(&script)
        .arg(manifest.join("static"))
        .arg(&vectors)
        .output()
    {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            panic!("node not found: install nodejs (scripts/test does this)")
        }
        Err(err) => panic!("cannot run node: {err}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!("node printed no report ({err}); stdout: {stdout}\nstderr: {stderr}")
    });
    let failures = report["failures"].as_array().unwrap();
    assert!(
        failures.is_empty() && output.status.success(),
        "JS disagrees with the vectors:\n{report:#}\n{stderr}"
    );
    assert!(
        report["checked"].as_u64().unwrap() > 20,
        "too few checks ran: {report}"
    );
}
