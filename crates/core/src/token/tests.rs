use super::*;
use proptest::prelude::*;

const OLD: &[u8] = b"old secret, at least thirty-two bytes long";
const NEW: &[u8] = b"new secret, at least thirty-two bytes long";
const OTHER: &[u8] = b"a stranger's secret, thirty-two bytes long";
const NOW: i64 = 1_780_000_000_000;

fn claims(kind: TokenKind) -> Claims {
    Claims {
        kind,
        event: "drop-2026".into(),
        session_tag: session_tag("session-a"),
        issued_at_ms: NOW,
        expires_at_ms: NOW + 60_000,
        nonce: [7; 16],
        difficulty: 0,
    }
}

fn ring(secrets: &[&[u8]]) -> Keyring {
    Keyring::new(secrets).unwrap()
}

const ADMISSION: Expect<'static> = Expect {
    kind: TokenKind::Admission,
    event: "drop-2026",
    session: "session-a",
};

/// Verifies `token` against `expect` with the `[NEW, OLD]` keyring at `now`.
fn check(token: &str, expect: Expect<'_>, now: i64, expected: Result<(), TokenError>) {
    let got = ring(&[NEW, OLD]).verify(token, &expect, now).map(|_| ());
    assert_eq!(got, expected, "token {token:?}");
}

/// Re-encodes a token's payload after `edit`, keeping the original signature.
fn tamper(token: &str, edit: impl FnOnce(&mut Vec<u8>)) -> String {
    let (p, t) = token.split_once('.').unwrap();
    let mut payload = URL_SAFE_NO_PAD.decode(p).unwrap();
    edit(&mut payload);
    format!("{}.{t}", URL_SAFE_NO_PAD.encode(payload))
}

#[test]
fn round_trip() {
    for kind in [TokenKind::Admission, TokenKind::Pass, TokenKind::Challenge] {
        let mut c = claims(kind);
        c.difficulty = if kind == TokenKind::Challenge { 18 } else { 0 };
        let token = ring(&[NEW]).sign(&c);
        assert!(token.len() < 150, "{}", token.len());
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        );
        let expect = Expect { kind, ..ADMISSION };
        assert_eq!(ring(&[NEW]).verify(&token, &expect, NOW), Ok(c));
    }
}

#[test]
fn every_rejection() {
    let signer = ring(&[NEW]);
    let good = signer.sign(&claims(TokenKind::Admission));
    let expires = NOW + 60_000;
    let a = ADMISSION;
    let cases: Vec<(String, Expect<'_>, i64, Result<(), TokenError>)> = vec![
        (good.clone(), a, NOW, Ok(())),
        (good.clone(), a, expires - 1, Ok(())),
        (good.clone(), a, expires, Err(TokenError::Expired)),
        (good.clone(), a, i64::MAX, Err(TokenError::Expired)),
        (
            good.clone(),
            Expect {
                event: "drop-2027",
                ..a
            },
            NOW,
            Err(TokenError::WrongEvent),
        ),
        (
            good.clone(),
            Expect { event: "", ..a },
            NOW,
            Err(TokenError::WrongEvent),
        ),
        (
            good.clone(),
            Expect {
                session: "session-b",
                ..a
            },
            NOW,
            Err(TokenError::WrongSession),
        ),
        (
            good.clone(),
            Expect {
                kind: TokenKind::Pass,
                ..a
            },
            NOW,
            Err(TokenError::WrongKind),
        ),
        // Truncated anywhere: in the signature, at the dot, in the payload.
        (
            good[..good.len() - 1].to_owned(),
            a,
            NOW,
            Err(TokenError::Malformed),
        ),
        (
            good[..good.len() - 4].to_owned(),
            a,
            NOW,
            Err(TokenError::Malformed),
        ),
        (
            good.split('.').next().unwrap().to_owned(),
            a,
            NOW,
            Err(TokenError::Malformed),
        ),
        (good[10..].to_owned(), a, NOW, Err(TokenError::Malformed)),
        (String::new(), a, NOW, Err(TokenError::Malformed)),
        (".".into(), a, NOW, Err(TokenError::Malformed)),
        (format!("{good}.x"), a, NOW, Err(TokenError::Malformed)),
        (format!("{good}="), a, NOW, Err(TokenError::Malformed)),
        (
            "x".repeat(MAX_TOKEN_LEN + 1),
            a,
            NOW,
            Err(TokenError::Malformed),
        ),
        // Forged: payload edited, signature kept.
        (
            tamper(&good, |p| p[20] ^= 1),
            a,
            NOW,
            Err(TokenError::BadSignature),
        ),
        (
            tamper(&good, |p| p[54] = 1),
            a,
            NOW,
            Err(TokenError::BadSignature),
        ),
        (
            tamper(&good, |p| p[0] = 2),
            a,
            NOW,
            Err(TokenError::Malformed),
        ),
        (
            tamper(&good, |p| p[1] = 9),
            a,
            NOW,
            Err(TokenError::Malformed),
        ),
        (
            tamper(&good, |p| p[55] += 1),
            a,
            NOW,
            Err(TokenError::Malformed),
        ),
        (
            tamper(&good, |p| p[2] ^= 0xff),
            a,
            NOW,
            Err(TokenError::UnknownKey),
        ),
        // Signed by a key nobody configured.
        (
            ring(&[OTHER]).sign(&claims(TokenKind::Admission)),
            a,
            NOW,
            Err(TokenError::UnknownKey),
        ),
    ];
    for (token, expect, now, expected) in cases {
        check(&token, expect, now, expected);
    }
}

#[test]
fn forged_signature_of_right_length_is_bad_signature() {
    let good = ring(&[NEW]).sign(&claims(TokenKind::Admission));
    let (p, _) = good.split_once('.').unwrap();
    let forged = format!("{p}.{}", URL_SAFE_NO_PAD.encode([0u8; 32]));
    check(&forged, ADMISSION, NOW, Err(TokenError::BadSignature));
}

#[test]
fn key_rotation() {
    let old_token = ring(&[OLD]).sign(&claims(TokenKind::Pass));
    let pass = Expect {
        kind: TokenKind::Pass,
        ..ADMISSION
    };
    // A new key prepended: old tokens still verify, new ones use the new key.
    check(&old_token, pass, NOW, Ok(()));
    let rotated = ring(&[NEW, OLD]);
    let new_token = rotated.sign(&claims(TokenKind::Pass));
    assert_eq!(
        ring(&[NEW]).verify(&new_token, &pass, NOW).map(|_| ()),
        Ok(())
    );
    // The old key retired: its tokens are now from an unknown key.
    assert_eq!(
        ring(&[NEW]).verify(&old_token, &pass, NOW),
        Err(TokenError::UnknownKey)
    );
    // The score key follows the oldest secret, so a rotation keeps pre-window order.
    let score = |r: &Keyring| {
        crate::score::JoinScoring::new(
            &r.score_key(),
            "e",
            "m",
            0,
            1_000_000,
            crate::score::Placement::ByArrival,
        )
    };
    assert_eq!(score(&rotated), score(&ring(&[OLD])));
    assert_ne!(score(&rotated), score(&ring(&[NEW])));
}

#[test]
fn keyring_construction() {
    let none: [&[u8]; 0] = [];
    assert_eq!(Keyring::new(&none).err(), Some(KeyError::NoKeys));
    assert_eq!(
        Keyring::new(&[NEW, &[0u8; 31]]).err(),
        Some(KeyError::TooShort { index: 1 })
    );
    assert!(Keyring::new(&[[0u8; 32]]).is_ok());
    let debug = format!("{:?}", ring(&[NEW, OLD]));
    assert!(!debug.contains("secret"), "{debug}");
}

#[test]
fn long_event_fails_closed() {
    let mut c = claims(TokenKind::Admission);
    c.event = "é".repeat(200); // 400 bytes
    let token = ring(&[NEW]).sign(&c);
    assert!(token.len() <= MAX_TOKEN_LEN);
    check(
        &token,
        Expect {
            event: &c.event,
            ..ADMISSION
        },
        NOW,
        Err(TokenError::WrongEvent),
    );
    c.event = "e".repeat(MAX_EVENT_LEN);
    let token = ring(&[NEW]).sign(&c);
    check(
        &token,
        Expect {
            event: &c.event,
            ..ADMISSION
        },
        NOW,
        Ok(()),
    );
}

#[test]
fn codes_are_distinct() {
    use TokenError::*;
    let all = [
        Malformed,
        UnknownKey,
        BadSignature,
        Expired,
        WrongKind,
        WrongEvent,
        WrongSession,
    ];
    let codes: std::collections::HashSet<_> = all.iter().map(|e| e.code()).collect();
    assert_eq!(codes.len(), all.len());
    assert!(codes.iter().all(|c| c.starts_with("token_")));
}

proptest! {
    #[test]
    fn verify_never_panics_on_strings(s in ".{0,600}") {
        let _ = ring(&[NEW, OLD]).verify(&s, &ADMISSION, NOW);
    }

    #[test]
    fn verify_never_panics_on_encoded_bytes(
        payload in proptest::collection::vec(any::<u8>(), 0..400),
        tag in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let token = format!("{}.{}", URL_SAFE_NO_PAD.encode(&payload), URL_SAFE_NO_PAD.encode(&tag));
        let got = ring(&[NEW, OLD]).verify(&token, &ADMISSION, NOW);
        prop_assert!(got.is_err());
    }

    #[test]
    fn any_single_edit_of_a_token_is_rejected(pos in 0usize..200, byte in any::<u8>()) {
        let good = ring(&[NEW]).sign(&claims(TokenKind::Admission));
        let mut bytes = good.clone().into_bytes();
        let pos = pos % bytes.len();
        prop_assume!(bytes[pos] != byte);
        bytes[pos] = byte;
        let edited = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert!(ring(&[NEW]).verify(&edited, &ADMISSION, NOW).is_err());
    }
}

proptest! {
    /// The base64 length a token is sized by is the encoder's own, so a
    /// token is made in one allocation, never grown.
    #[test]
    fn a_token_is_sized_once(event in "[a-z0-9-]{0,255}", n in 0usize..700) {
        prop_assert_eq!(b64_len(n), URL_SAFE_NO_PAD.encode(vec![7u8; n]).len());
        let mut c = claims(TokenKind::Pass);
        c.event = event;
        let token = ring(&[NEW]).sign(&c);
        prop_assert_eq!(token.capacity(), token.len());
    }
}

/// The tokens a gate may be shown again and again: good ones for two
/// sessions, one past its expiry, one of another kind, one altered, one
/// signed with a secret the ring does not hold, an oversized one, and one
/// for a session longer than the memo keeps.
fn presented() -> Vec<String> {
    let signer = ring(&[OLD]);
    let pass = claims(TokenKind::Pass);
    let long = Claims {
        session_tag: session_tag(LONG_SESSION),
        ..pass.clone()
    };
    let b = Claims {
        session_tag: session_tag("session-b"),
        ..pass.clone()
    };
    let expired = Claims {
        expires_at_ms: NOW - 1,
        ..pass.clone()
    };
    let good = signer.sign(&pass);
    let altered = tamper(&good, |p| p[20] ^= 1);
    vec![
        good,
        signer.sign(&b),
        signer.sign(&expired),
        signer.sign(&claims(TokenKind::Admission)),
        altered,
        ring(&[OTHER]).sign(&pass),
        "x".repeat(MAX_TOKEN_LEN + 1),
        signer.sign(&long),
    ]
}

/// A session longer than the memo keeps (a long JWT subject).
const LONG_SESSION: &str = "a-jwt-subject-much-longer-than-a-session-id-is-verified-every-time-\
                            rather-than-remembered-in-a-slot-of-the-memo-that-would-grow-with-it";

proptest! {
    /// A token answered from the memo gets the answer `verify` gives, for
    /// any order of tokens, sessions, events, kinds and times, with so few
    /// slots that tokens evict one another.
    #[test]
    fn a_remembered_token_is_judged_as_verify_judges_it(
        steps in proptest::collection::vec(
            (0usize..8, 0usize..4, 0usize..2, 0usize..2, -2i64..70_000),
            1..60,
        ),
        slots in 1usize..4,
    ) {
        let tokens = presented();
        let keyring = ring(&[NEW, OLD]);
        let mut recent = Recent::new(slots);
        for (t, session, event, kind, at) in steps {
            let expect = Expect {
                kind: [TokenKind::Pass, TokenKind::Admission][kind],
                event: ["drop-2026", "drop-2027"][event],
                session: ["session-a", "session-b", "session-a ", LONG_SESSION][session],
            };
            let now = NOW + at;
            prop_assert_eq!(
                keyring.verify_recent(&mut recent, &tokens[t], &expect, now),
                keyring.verify(&tokens[t], &expect, now),
                "token {} for {:?} at {}", t, expect, at
            );
        }
    }
}

/// A memo filled under one keyring answers nothing for another: a token
/// whose key was retired is refused at once.
#[test]
fn a_new_keyring_forgets_what_the_old_one_verified() {
    let token = ring(&[OLD]).sign(&claims(TokenKind::Pass));
    let expect = Expect {
        kind: TokenKind::Pass,
        ..ADMISSION
    };
    let mut recent = Recent::new(16);
    let both = ring(&[NEW, OLD]);
    assert!(
        both.verify_recent(&mut recent, &token, &expect, NOW)
            .is_ok()
    );
    assert!(
        both.verify_recent(&mut recent, &token, &expect, NOW)
            .is_ok()
    );
    // The old secret retired: a new keyring, for which the memo answers
    // nothing it did not verify itself.
    let retired = ring(&[NEW]);
    assert_eq!(
        retired.verify_recent(&mut recent, &token, &expect, NOW),
        Err(TokenError::UnknownKey)
    );
}

/// `token` judged through the memo at `NOW`, its claims left out.
fn judged(
    keyring: &Keyring,
    recent: &mut Recent,
    token: &str,
    expect: &Expect<'_>,
) -> Result<(), TokenError> {
    keyring
        .verify_recent(recent, token, expect, NOW)
        .map(|_| ())
}

/// A cookie carries one pass per event: a request for the second event
/// finds the first event's pass refused as "wrong event" and the second
/// accepted, both from the memo once seen, without a MAC computed again.
/// Another session showing a remembered pass is refused from the memo too.
#[test]
fn every_signed_token_is_remembered_whatever_it_was_judged_against() {
    let signer = ring(&[OLD]);
    let first = signer.sign(&claims(TokenKind::Pass));
    let second = signer.sign(&Claims {
        event: "drop-2027".into(),
        ..claims(TokenKind::Pass)
    });
    let keyring = ring(&[NEW, OLD]);
    let mut recent = Recent::new(64);
    let owner = Expect {
        kind: TokenKind::Pass,
        event: "drop-2027",
        session: "session-a",
    };
    for _ in 0..3 {
        let got = judged(&keyring, &mut recent, &first, &owner);
        assert_eq!(got, Err(TokenError::WrongEvent));
        assert_eq!(judged(&keyring, &mut recent, &second, &owner), Ok(()));
    }
    assert_eq!(recent.counts(), (4, 2), "(hits, misses)");
    let stranger = Expect {
        session: "session-b",
        ..owner
    };
    for _ in 0..2 {
        let got = judged(&keyring, &mut recent, &second, &stranger);
        assert_eq!(got, Err(TokenError::WrongSession));
    }
    // The owner is still recognised after the stranger's attempts.
    assert_eq!(judged(&keyring, &mut recent, &second, &owner), Ok(()));
    assert_eq!(recent.counts(), (7, 2), "(hits, misses)");
    // A forged token is opened (and refused) every time.
    let forged = tamper(&second, |p| p[20] ^= 1);
    for _ in 0..2 {
        let got = judged(&keyring, &mut recent, &forged, &owner);
        assert_eq!(got, Err(TokenError::BadSignature));
    }
    assert_eq!(recent.counts(), (7, 4), "(hits, misses)");
}

proptest! {
    /// The memo's comparison of texts is equality, whatever the lengths and
    /// wherever two texts first differ.
    #[test]
    fn the_memos_comparison_is_equality(
        a in proptest::collection::vec(any::<u8>(), 0..40),
        edit in proptest::option::of((0usize..40, any::<u8>())),
    ) {
        let mut b = a.clone();
        if let Some((at, byte)) = edit
            && at < b.len()
        {
            b[at] = byte;
        }
        prop_assert_eq!(recent::same(&a, &b), a == b);
        prop_assert_eq!(recent::same(&a, &a[..a.len() / 2]), a.is_empty());
    }
}
