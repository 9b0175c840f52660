//! Checks `testdata/vectors.json`, the cases the browser's proof-of-work code
//! and any other implementation of the wire formats must agree on.
//!
//! The file is generated once and committed, so a change of format shows up as
//! a failing test here rather than as a silent break of the JavaScript side.
//! The generator below is deterministic and its output must equal the
//! committed file; regenerate it deliberately with
//! `ANTEROOM_BLESS=1 cargo test -p anteroom-core --test vectors`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anteroom_core::pow;
use anteroom_core::token::{Claims, Expect, Keyring, TokenKind, session_tag};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/vectors.json");

#[derive(Serialize, Deserialize)]
struct Vectors {
    pow: Vec<PowCase>,
    sha256: Vec<ShaCase>,
    tokens: Vec<TokenCase>,
}

#[derive(Serialize, Deserialize)]
struct PowCase {
    challenge: String,
    nonce: u64,
    difficulty: u8,
    hash_hex: String,
    leading_zero_bits: u32,
    valid: bool,
}

#[derive(Serialize, Deserialize)]
struct ShaCase {
    input: String,
    hex: String,
}

#[derive(Serialize, Deserialize)]
struct TokenCase {
    secrets: Vec<String>,
    token: String,
    expect: ExpectCase,
    now_ms: i64,
    result: String,
}

#[derive(Serialize, Deserialize)]
struct ExpectCase {
    kind: String,
    event: String,
    session: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn vectors_match_the_code() {
    let text = std::fs::read_to_string(PATH).expect("testdata/vectors.json is committed");
    let v: Vectors = serde_json::from_str(&text).unwrap();
    for c in &v.pow {
        assert!(
            c.nonce < 1 << 53,
            "nonce {} is not exact in JavaScript",
            c.nonce
        );
    }
    assert!(v.pow.len() >= 8 && v.sha256.len() >= 4 && v.tokens.len() >= 8);

    for c in &v.pow {
        let h = pow::hash(&c.challenge, c.nonce);
        assert_eq!(
            hex(&h),
            c.hash_hex,
            "pow hash of {:?}:{}",
            c.challenge,
            c.nonce
        );
        assert_eq!(
            pow::leading_zero_bits(&h),
            c.leading_zero_bits,
            "{:?}",
            c.challenge
        );
        assert_eq!(c.leading_zero_bits >= u32::from(c.difficulty), c.valid);
    }
    for c in &v.sha256 {
        assert_eq!(
            hex(&Sha256::digest(c.input.as_bytes())),
            c.hex,
            "{:?}",
            c.input
        );
    }
    for c in &v.tokens {
        let ring = Keyring::new(&c.secrets).unwrap();
        let expect = Expect {
            kind: TokenKind::from_name(&c.expect.kind).unwrap(),
            event: &c.expect.event,
            session: &c.expect.session,
        };
        let got = match ring.verify(&c.token, &expect, c.now_ms) {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        assert_eq!(got, c.result, "token {:?}", c.token);
    }
}

/// The committed `testdata/vectors.json` is exactly what the generator makes
/// (deterministic), so the file can't drift from the code; with
/// `ANTEROOM_BLESS=1` the file is rewritten instead.
#[test]
fn vectors_file_matches_generator() {
    let v = Vectors {
        pow: pow_cases(),
        sha256: ["", "abc", "drop-2026:0", "é中🎟️", &"a".repeat(200)]
            .into_iter()
            .map(|input| ShaCase {
                input: input.to_owned(),
                hex: hex(&Sha256::digest(input.as_bytes())),
            })
            .collect(),
        tokens: token_cases(),
    };
    let json = serde_json::to_string_pretty(&v).unwrap() + "\n";
    if std::env::var_os("ANTEROOM_BLESS").is_some() {
        std::fs::write(PATH, json).unwrap();
    } else {
        let committed = std::fs::read_to_string(PATH).unwrap();
        assert!(
            committed == json,
            "testdata/vectors.json is stale: rerun with ANTEROOM_BLESS=1"
        );
    }
}

const SECRET_OLD: &str = "vector secret one, at least 32 bytes long";
const SECRET_NEW: &str = "vector secret two, at least 32 bytes long";
const NOW: i64 = 1_780_000_000_000;

fn pow_cases() -> Vec<PowCase> {
    let ring = Keyring::new(&[SECRET_OLD]).unwrap();
    let real = pow::issue(&ring, "drop-2026", "session-a", 8, NOW, 120_000, [9; 16]);
    let mut cases = Vec::new();
    let mut push = |challenge: &str, nonce: u64, difficulty: u8| {
        let h = pow::hash(challenge, nonce);
        let lz = pow::leading_zero_bits(&h);
        cases.push(PowCase {
            challenge: challenge.to_owned(),
            nonce,
            difficulty,
            hash_hex: hex(&h),
            leading_zero_bits: lz,
            valid: lz >= u32::from(difficulty),
        });
    };
    let first_failing = |c: &str, d: u8| {
        (0..)
            .find(|&n| pow::leading_zero_bits(&pow::hash(c, n)) < u32::from(d))
            .unwrap()
    };
    for (challenge, difficulty) in [
        (real.as_str(), 8),
        (real.as_str(), 12),
        ("abc", 0),
        ("abc", 1),
        ("abc", 16),
        ("événement-🎟️", 10),
        ("", 4),
    ] {
        push(challenge, pow::solve(challenge, difficulty), difficulty);
        if difficulty > 0 {
            push(challenge, first_failing(challenge, difficulty), difficulty);
        }
    }
    // The largest nonce a JavaScript number holds exactly: the browser's JSON
    // parser must read every nonce here without rounding.
    push("abc", (1 << 53) - 1, 0);
    push("abc", 0, 1);
    cases
}

fn token_cases() -> Vec<TokenCase> {
    let old = Keyring::new(&[SECRET_OLD]).unwrap();
    let stranger = Keyring::new(&["a stranger's secret, thirty-two bytes"]).unwrap();
    let claims = |kind| Claims {
        kind,
        event: "drop-2026".into(),
        session_tag: session_tag("session-a"),
        issued_at_ms: NOW,
        expires_at_ms: NOW + 60_000,
        nonce: [0x5a; 16],
        difficulty: 0,
    };
    let admission = old.sign(&claims(TokenKind::Admission));
    let pass = old.sign(&claims(TokenKind::Pass));
    let (payload, tag) = admission.split_once('.').unwrap();
    let mut forged = URL_SAFE_NO_PAD.decode(payload).unwrap();
    forged[14..22].copy_from_slice(&(NOW + 3_600_000).to_be_bytes()); // extend expiry
    let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(forged));

    let case = |secrets: &[&str],
                token: &str,
                kind: &str,
                event: &str,
                session: &str,
                now_ms,
                result: &str| TokenCase {
        secrets: secrets.iter().map(|s| s.to_string()).collect(),
        token: token.to_owned(),
        expect: ExpectCase {
            kind: kind.into(),
            event: event.into(),
            session: session.into(),
        },
        now_ms,
        result: result.into(),
    };
    let one = &[SECRET_OLD][..];
    let rotated = &[SECRET_NEW, SECRET_OLD][..];
    let (e, s) = ("drop-2026", "session-a");
    vec![
        case(one, &admission, "admission", e, s, NOW, "ok"),
        case(one, &pass, "pass", e, s, NOW + 59_999, "ok"),
        case(rotated, &admission, "admission", e, s, NOW, "ok"),
        case(
            &[SECRET_NEW],
            &admission,
            "admission",
            e,
            s,
            NOW,
            "token_unknown_key",
        ),
        case(
            one,
            &stranger.sign(&claims(TokenKind::Admission)),
            "admission",
            e,
            s,
            NOW,
            "token_unknown_key",
        ),
        case(
            one,
            &admission,
            "admission",
            e,
            s,
            NOW + 60_000,
            "token_expired",
        ),
        case(
            one,
            &admission,
            "admission",
            "drop-2027",
            s,
            NOW,
            "token_wrong_event",
        ),
        case(
            one,
            &admission,
            "admission",
            e,
            "session-b",
            NOW,
            "token_wrong_session",
        ),
        case(one, &admission, "pass", e, s, NOW, "token_wrong_kind"),
        case(one, &forged, "admission", e, s, NOW, "token_bad_signature"),
        case(
            one,
            &admission[..admission.len() - 2],
            "admission",
            e,
            s,
            NOW,
            "token_malformed",
        ),
        case(one, payload, "admission", e, s, NOW, "token_malformed"),
        case(one, "", "admission", e, s, NOW, "token_malformed"),
    ]
}
