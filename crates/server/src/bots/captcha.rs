//! The CAPTCHA hook: POSTs a visitor's token to a Turnstile / hCaptcha
//! `siteverify`-compatible URL and reads `{"success": bool}`.
//!
//! Any failure to get a clear `success: true` (refused, timed out, a 5xx,
//! unparsable JSON) counts as not verified and is logged: the visitor is asked
//! again, which is a nuisance, while counting an outage as success would let
//! every bot through during it.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use super::BotsError;
use super::config::CaptchaConfig;

/// Longest token sent to the provider; real ones are at most 2 KiB, so a
/// longer one is refused without a round trip.
const MAX_TOKEN_LEN: usize = 4096;
/// Largest provider answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A configured provider.
pub struct Captcha {
    client: Client<HttpConnector, Full<Bytes>>,
    verify_url: http::Uri,
    secret: String,
    pub site_key: Option<String>,
    timeout: Duration,
}

#[derive(serde::Deserialize)]
struct Answer {
    success: bool,
    #[serde(default, rename = "error-codes")]
    error_codes: Vec<String>,
}

impl Captcha {
    pub fn new(cfg: &CaptchaConfig) -> Result<Self, BotsError> {
        let invalid =
            |message: &str| BotsError::Captcha(format!("bots.captcha.verify_url: {message}"));
        let verify_url: http::Uri = cfg.verify_url.parse().map_err(|_| invalid("not a URL"))?;
        if verify_url.scheme_str() != Some("http") || verify_url.host().is_none() {
            return Err(invalid(
                "must be an http:// URL (no TLS client is built in; use a local egress proxy)",
            ));
        }
        // The URL is in every warning about the provider; credentials for an
        // egress proxy belong in the proxy's own configuration.
        if verify_url
            .authority()
            .is_some_and(|a| a.as_str().contains('@'))
        {
            return Err(invalid("must not carry credentials (user:password@)"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(cfg.timeout));
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            verify_url,
            secret: cfg.secret.clone(),
            site_key: cfg.site_key.clone(),
            timeout: cfg.timeout,
        })
    }

    /// Whether the provider confirms `token`; never an error, see the module.
    pub async fn verify(&self, token: &str, remote_ip: IpAddr) -> bool {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return false;
        }
        let outcome = tokio::time::timeout(self.timeout, self.ask(token, remote_ip)).await;
        let result = match outcome {
            Ok(Ok(answer)) => {
                if !answer.success {
                    tracing::debug!(codes = ?answer.error_codes, "captcha not verified");
                }
                answer.success
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, url = %self.verify_url, "captcha provider failed; visitor not verified");
                false
            }
            Err(_) => {
                tracing::warn!(url = %self.verify_url, "captcha provider timed out; visitor not verified");
                false
            }
        };
        let label = if result { "success" } else { "failure" };
        metrics::counter!("anteroom_captcha_verify_total", "result" => label).increment(1);
        result
    }

    async fn ask(&self, token: &str, remote_ip: IpAddr) -> Result<Answer, String> {
        let form = format!(
            "secret={}&response={}&remoteip={}",
            utf8_percent_encode(&self.secret, NON_ALPHANUMERIC),
            utf8_percent_encode(token, NON_ALPHANUMERIC),
            remote_ip,
        );
        let req = http::Request::post(self.verify_url.clone())
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(Full::new(Bytes::from(form)))
            .map_err(|e| e.to_string())?;
        let res = self.client.request(req).await.map_err(|e| e.to_string())?;
        let status = res.status();
        if !status.is_success() {
            return Err(format!("status {status}"));
        }
        let body = Limited::new(res.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| format!("answer is not siteverify JSON: {e}"))
    }
}
