//! `crates/core` is sans-IO: no clock reads, no disk, no sockets, no runtime.
//! The crate's clippy.toml refuses the clock calls at lint time; this test
//! reads the sources so the rule also holds for a run without clippy and
//! names the file and line that broke it. A test binary of its own because
//! it checks the crate's source files, not its API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// What a sans-IO crate never calls, and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("SystemTime::now", "reads the wall clock"),
    ("Instant::now", "reads the monotonic clock (std or tokio)"),
    ("UNIX_EPOCH.elapsed", "reads the wall clock"),
    ("std::fs", "touches the disk"),
    ("File::open", "touches the disk"),
    ("TcpStream", "opens a socket"),
    ("TcpListener", "opens a socket"),
    ("UdpSocket", "opens a socket"),
    ("thread::sleep", "waits on the clock"),
    ("thread_rng", "draws its own randomness"),
    ("rand::rng()", "draws its own randomness"),
];

/// Dependencies that would bring a runtime, a clock or randomness of their own.
const FORBIDDEN_DEPS: &[&str] = &["tokio", "rand", "getrandom", "mio", "async-std"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn core_reads_no_clock_and_does_no_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    assert!(files.len() > 5, "no sources found under {}", root.display());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            // Comments may name what the crate does not do.
            let code = line.split("//").next().unwrap_or("");
            for (call, why) in FORBIDDEN {
                if code.contains(call) {
                    let at = file.strip_prefix(root).unwrap().display();
                    found.push(format!("{at}:{}: `{call}` {why}", n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "crates/core is sans-IO (the clock and randomness are parameters):\n{}",
        found.join("\n")
    );
}

#[test]
fn core_depends_on_no_runtime_clock_or_randomness() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    // Only [dependencies] ship: dev-dependencies (rand for seeded tests) are
    // test-only.
    let deps = manifest
        .split("\n[")
        .find(|s| s.starts_with("dependencies]"))
        .expect("a [dependencies] table");
    let bad: Vec<&&str> = FORBIDDEN_DEPS
        .iter()
        .filter(|d| {
            deps.lines()
                .any(|l| l.split(['.', ' ', '=']).next() == Some(**d))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "crates/core is sans-IO; these dependencies bring a runtime, a clock or randomness: {bad:?}"
    );
}
