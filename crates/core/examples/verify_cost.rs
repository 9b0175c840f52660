//! Measures the per-request cost of checking a token and a proof-of-work answer.
//!
//! `cargo run --release -p anteroom-core --example verify_cost [iterations]`
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A benchmark beside the crate, not part of it: it reads the clock to time
// the library, which itself never does (crates/core/clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Instant;

use anteroom_core::pow;
use anteroom_core::token::{Claims, Expect, Keyring, Recent, TokenKind, session_tag};

const NOW: i64 = 1_780_000_000_000;

fn main() {
    let iterations: u32 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("iterations is a number"))
        .unwrap_or(200_000);
    // Two keys, token signed by the older: the realistic worst case mid-rotation.
    let ring = Keyring::new(&[[1u8; 32], [2u8; 32]]).unwrap();
    let old = Keyring::new(&[[2u8; 32]]).unwrap();

    let token = old.sign(&Claims {
        kind: TokenKind::Pass,
        event: "drop-2026".into(),
        session_tag: session_tag("0123456789abcdef0123456789abcdef"),
        issued_at_ms: NOW,
        expires_at_ms: NOW + 600_000,
        nonce: [7; 16],
        difficulty: 0,
    });
    let expect = Expect {
        kind: TokenKind::Pass,
        event: "drop-2026",
        session: "0123456789abcdef0123456789abcdef",
    };
    let token_ns = time(iterations, || {
        ring.verify(black_box(&token), black_box(&expect), NOW)
            .unwrap();
    });
    // The gate's way: the same pass presented again is found in the memo.
    let mut recent = Recent::new(1024);
    let recent_ns = time(iterations, || {
        ring.verify_recent(&mut recent, black_box(&token), black_box(&expect), NOW)
            .unwrap();
    });

    let challenge = pow::issue(
        &ring,
        "drop-2026",
        "0123456789abcdef0123456789abcdef",
        18,
        NOW,
        120_000,
        [9; 16],
    );
    let solve_start = Instant::now();
    let answer = pow::solve(&challenge, 18);
    let solve_ms = solve_start.elapsed().as_secs_f64() * 1e3;
    let pow_ns = time(iterations, || {
        pow::verify(
            &ring,
            black_box(&challenge),
            black_box(answer),
            "drop-2026",
            "0123456789abcdef0123456789abcdef",
            NOW,
        )
        .unwrap();
    });

    println!(
        "token length:        {} bytes (challenge {} bytes)",
        token.len(),
        challenge.len()
    );
    println!("Keyring::verify:     {token_ns:.0} ns/op over {iterations} iterations");
    println!("verify_recent (seen): {recent_ns:.0} ns/op over {iterations} iterations");
    println!("pow::verify (d=18):  {pow_ns:.0} ns/op over {iterations} iterations");
    println!("pow::solve (d=18):   {solve_ms:.1} ms, answer {answer} (one native core)");
}

/// Mean nanoseconds per call of `f` over `iterations` calls, after a warm-up.
fn time(iterations: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iterations / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(iterations)
}
