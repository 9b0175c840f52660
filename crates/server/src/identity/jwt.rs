//! JWT identity: the `sub` claim of a `Bearer` token is the queue member.
//!
//! The algorithm is pinned by configuration: `alg: none` cannot even be
//! expressed, and a token whose header names any other algorithm (the
//! RS256 → HS256 swap) is rejected before its signature is looked at.

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

/// An event's JWT identity (`events[].identity = { jwt = .. }`), validated:
/// the pinned algorithm, its key, and the claims a token must carry.
#[derive(Clone, PartialEq, Eq)]
pub struct JwtConfig {
    pub algorithm: jsonwebtoken::Algorithm,
    /// HS256: the shared secret; RS256 / EdDSA: the public key PEM (read
    /// from its file or variable when the config names one).
    pub key: String,
    pub issuer: Option<String>,
    pub audience: Option<String>,
}

impl std::fmt::Debug for JwtConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtConfig")
            .field("algorithm", &self.algorithm)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

/// Why a JWT was refused; details go to debug logs only.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("jwt rejected: {0}")]
    Invalid(#[from] jsonwebtoken::errors::Error),
    #[error("jwt subject missing or longer than 256 bytes")]
    BadSubject,
    #[error("jwt header lists critical extensions (crit), and none is understood here")]
    Critical,
}

/// Whether the token's header has a `crit` member. RFC 7515 (4.1.11) has a
/// recipient refuse a token whose critical extensions it does not
/// implement, and none is implemented here; jsonwebtoken skips header
/// members it does not know, so it would read a token that says its
/// payload is not base64 (`"b64": false`, RFC 7797) as if it were. An
/// unreadable header is left to jsonwebtoken, which refuses it.
fn lists_critical(token: &str) -> bool {
    use base64::Engine as _;
    let Some(head) = token.split('.').next() else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head)
        .ok()
        .and_then(|json| {
            serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&json).ok()
        })
        .is_some_and(|header| header.contains_key("crit"))
}

#[derive(Deserialize)]
struct Subject {
    sub: String,
}

pub struct JwtVerifier {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JwtVerifier({:?})", self.validation.algorithms)
    }
}

/// The decoding key for `algorithm` from its configured text.
pub fn decoding_key(
    algorithm: Algorithm,
    key: &str,
) -> Result<DecodingKey, jsonwebtoken::errors::Error> {
    match algorithm {
        Algorithm::RS256 => DecodingKey::from_rsa_pem(key.as_bytes()),
        Algorithm::EdDSA => DecodingKey::from_ed_pem(key.as_bytes()),
        _ => Ok(DecodingKey::from_secret(key.as_bytes())),
    }
}

impl JwtVerifier {
    pub fn new(config: &JwtConfig) -> Result<Self, JwtError> {
        let key = decoding_key(config.algorithm, &config.key)?;
        let mut validation = Validation::new(config.algorithm);
        validation.algorithms = vec![config.algorithm];
        // jsonwebtoken checks `iss` and `aud` only when the token has them:
        // a configured issuer or audience must also be present, or any
        // token of the same key that lacks them (another app's, another
        // kind of token) would get a place in the queue.
        let mut required = vec!["exp", "sub"];
        match &config.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &config.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        // A token not valid yet (a presale's, handed out early) is refused
        // like an expired one; `nbf` is optional, checked when present.
        validation.validate_nbf = true;
        validation.leeway = 5;
        Ok(Self { key, validation })
    }

    /// The verified `sub` of `token`.
    pub fn subject(&self, token: &str) -> Result<String, JwtError> {
        if lists_critical(token) {
            return Err(JwtError::Critical);
        }
        let data = jsonwebtoken::decode::<Subject>(token, &self.key, &self.validation)?;
        let sub = data.claims.sub;
        if sub.is_empty() || sub.len() > anteroom_store::MAX_MEMBER_LEN {
            return Err(JwtError::BadSubject);
        }
        Ok(sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};

    const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!!";

    fn verifier() -> JwtVerifier {
        JwtVerifier::new(&JwtConfig {
            algorithm: Algorithm::HS256,
            key: SECRET.into(),
            issuer: None,
            audience: None,
        })
        .unwrap()
    }

    fn token(alg: Algorithm, secret: &str, sub: &str) -> String {
        let claims = serde_json::json!({"sub": sub, "exp": 4_000_000_000u64});
        encode(
            &Header::new(alg),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    #[test]
    fn accepts_the_pinned_algorithm_only() {
        let v = verifier();
        assert_eq!(
            v.subject(&token(Algorithm::HS256, SECRET, "user-1"))
                .unwrap(),
            "user-1"
        );
        assert!(
            v.subject(&token(Algorithm::HS384, SECRET, "user-1"))
                .is_err()
        );
        assert!(
            v.subject(&token(
                Algorithm::HS256,
                "another-secret-another-secret-xxxx",
                "u"
            ))
            .is_err()
        );
    }

    /// A token whose header lists critical extensions is refused though
    /// its signature is good: none is implemented here.
    #[test]
    fn a_header_with_critical_extensions_is_refused() {
        use base64::Engine as _;
        let b64 = |v: &serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let claims = serde_json::json!({"sub": "u", "exp": 4_000_000_000u64});
        let with_header = |header: serde_json::Value| {
            let input = format!("{}.{}", b64(&header), b64(&claims));
            let key = EncodingKey::from_secret(SECRET.as_bytes());
            let sig = jsonwebtoken::crypto::sign(input.as_bytes(), &key, Algorithm::HS256).unwrap();
            format!("{input}.{sig}")
        };
        let v = verifier();
        let plain = with_header(serde_json::json!({"alg": "HS256", "typ": "JWT"}));
        assert_eq!(
            v.subject(&plain).unwrap(),
            "u",
            "the same token without crit"
        );
        for crit in [
            serde_json::json!(["b64"]),
            serde_json::json!(["exp"]),
            serde_json::json!([]),
        ] {
            let t = with_header(
                serde_json::json!({"alg": "HS256", "typ": "JWT", "b64": false, "crit": crit}),
            );
            assert!(
                matches!(v.subject(&t), Err(JwtError::Critical)),
                "crit {crit} accepted"
            );
        }
    }

    fn signed(claims: &serde_json::Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    }

    /// A configured issuer and audience must be in the token, not only
    /// right when present, and a token is refused before its `nbf`.
    #[test]
    fn issuer_audience_and_not_before_are_enforced() {
        let v = JwtVerifier::new(&JwtConfig {
            algorithm: Algorithm::HS256,
            key: SECRET.into(),
            issuer: Some("https://id.example".into()),
            audience: Some("anteroom".into()),
        })
        .unwrap();
        let exp = 4_000_000_000u64;
        let good = serde_json::json!({"sub": "u", "exp": exp, "iss": "https://id.example", "aud": "anteroom"});
        assert_eq!(v.subject(&signed(&good)).unwrap(), "u");
        for (why, claims) in [
            (
                "no iss",
                serde_json::json!({"sub": "u", "exp": exp, "aud": "anteroom"}),
            ),
            (
                "no aud",
                serde_json::json!({"sub": "u", "exp": exp, "iss": "https://id.example"}),
            ),
            ("neither", serde_json::json!({"sub": "u", "exp": exp})),
            (
                "wrong iss",
                serde_json::json!({"sub": "u", "exp": exp, "iss": "https://evil.example", "aud": "anteroom"}),
            ),
            (
                "wrong aud",
                serde_json::json!({"sub": "u", "exp": exp, "iss": "https://id.example", "aud": "other"}),
            ),
            (
                "not yet valid",
                serde_json::json!({"sub": "u", "exp": exp, "iss": "https://id.example", "aud": "anteroom", "nbf": exp - 1}),
            ),
        ] {
            assert!(v.subject(&signed(&claims)).is_err(), "{why} was accepted");
        }
        // Without issuer or audience configured, neither is asked for; a
        // past `nbf` is fine.
        let past = serde_json::json!({"sub": "u", "exp": exp, "nbf": 1_000_000_000u64});
        assert_eq!(verifier().subject(&signed(&past)).unwrap(), "u");
    }

    #[test]
    fn rejects_alg_none() {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let t = format!(
            "{}.{}.",
            b64(r#"{"alg":"none","typ":"JWT"}"#),
            b64(r#"{"sub":"u","exp":4000000000}"#)
        );
        assert!(verifier().subject(&t).is_err());
    }
}
