use super::*;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

const SECRET: &[u8] = b"pow secret, at least thirty-two bytes long";
const NOW: i64 = 1_780_000_000_000;
const TTL: i64 = 120_000;

fn ring() -> Keyring {
    Keyring::new(&[SECRET]).unwrap()
}

fn challenge(difficulty: u8) -> String {
    issue(
        &ring(),
        "drop-2026",
        "session-a",
        difficulty,
        NOW,
        TTL,
        [3; 16],
    )
}

/// Answers `challenge` with `answer` as session-a at drop-2026 at `now`.
fn check(challenge: &str, answer: u64, now: i64, expected: Result<(), PowError>) {
    let got = verify(&ring(), challenge, answer, "drop-2026", "session-a", now).map(|_| ());
    assert_eq!(got, expected, "challenge {challenge:?} answer {answer}");
}

/// A nonce whose hash has fewer than `difficulty` leading zero bits.
fn wrong_answer(challenge: &str, difficulty: u8) -> u64 {
    (0..)
        .find(|&n| leading_zero_bits(&hash(challenge, n)) < u32::from(difficulty))
        .unwrap()
}

#[test]
fn hash_is_sha256_of_challenge_colon_decimal_nonce() {
    let expected: [u8; 32] = Sha256::digest(b"abc:1234567890").into();
    assert_eq!(hash("abc", 1_234_567_890), expected);
    let expected: [u8; 32] = Sha256::digest(b"abc:0").into();
    assert_eq!(hash("abc", 0), expected);
    let max = format!("é:{}", u64::MAX);
    let expected: [u8; 32] = Sha256::digest(max.as_bytes()).into();
    assert_eq!(hash("é", u64::MAX), expected);
}

#[test]
fn leading_zero_bits_table() {
    let mut h = [0u8; 32];
    assert_eq!(leading_zero_bits(&h), 256);
    for (bytes, expected) in [
        (&[0x80][..], 0),
        (&[0x40], 1),
        (&[0x01], 7),
        (&[0x00, 0xff], 8),
        (&[0x00, 0x00, 0x10], 19),
    ] {
        h = [0xff; 32];
        h[..bytes.len()].copy_from_slice(bytes);
        assert_eq!(leading_zero_bits(&h), expected, "{bytes:02x?}");
    }
}

#[test]
fn verify_and_reject() {
    let c = challenge(12);
    let answer = solve(&c, 12);
    assert!(leading_zero_bits(&hash(&c, answer)) >= 12);
    let token = |e| Err(PowError::Token(e));
    let cases = [
        (c.clone(), answer, NOW, Ok(())),
        (c.clone(), answer, NOW + TTL - 1, Ok(())),
        (c.clone(), answer, NOW + TTL, token(TokenError::Expired)),
        (
            c.clone(),
            wrong_answer(&c, 12),
            NOW,
            Err(PowError::InsufficientWork),
        ),
        (c[1..].to_owned(), answer, NOW, token(TokenError::Malformed)),
        (String::new(), 0, NOW, token(TokenError::Malformed)),
        // Difficulty 0: any answer is enough work.
        (challenge(0), 0, NOW, Ok(())),
        (challenge(0), u64::MAX, NOW, Ok(())),
    ];
    for (c, answer, now, expected) in cases {
        check(&c, answer, now, expected);
    }
}

#[test]
fn challenge_is_bound_to_session_event_and_kind() {
    let c = challenge(4);
    let answer = solve(&c, 4);
    let r = ring();
    let wrong_session = verify(&r, &c, answer, "drop-2026", "session-b", NOW);
    assert_eq!(
        wrong_session,
        Err(PowError::Token(TokenError::WrongSession))
    );
    let wrong_event = verify(&r, &c, answer, "drop-2027", "session-a", NOW);
    assert_eq!(wrong_event, Err(PowError::Token(TokenError::WrongEvent)));
    // An admission token is not a challenge, even with a valid "answer".
    let mut claims = verify(&r, &c, answer, "drop-2026", "session-a", NOW).unwrap();
    assert_eq!((claims.difficulty, claims.nonce), (4, [3; 16]));
    claims.kind = TokenKind::Admission;
    let admission = r.sign(&claims);
    check(
        &admission,
        0,
        NOW,
        Err(PowError::Token(TokenError::WrongKind)),
    );
}

#[test]
fn tampered_difficulty_is_rejected() {
    let c = challenge(20);
    let (payload, tag) = c.split_once('.').unwrap();
    let mut bytes = URL_SAFE_NO_PAD.decode(payload).unwrap();
    assert_eq!(bytes[54], 20);
    bytes[54] = 0;
    let easy = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(bytes));
    check(
        &easy,
        0,
        NOW,
        Err(PowError::Token(TokenError::BadSignature)),
    );
}

#[test]
fn codes() {
    assert_eq!(PowError::InsufficientWork.code(), "pow_insufficient_work");
    assert_eq!(PowError::Token(TokenError::Expired).code(), "token_expired");
    assert_eq!(
        PowError::from(TokenError::Malformed),
        PowError::Token(TokenError::Malformed)
    );
}
