//! What the risk rules see of a request, taken from its headers once and
//! owned, so the handler can drop the request before the async work.

use std::net::IpAddr;

use anteroom_core::risk::{Reputation, Signals};
use http::HeaderMap;

/// Header-derived risk signals, owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnedSignals {
    pub user_agent: Option<String>,
    pub accept_language: Option<String>,
    /// Lowercased header names, each once, in the order of their first field.
    pub header_order: Vec<String>,
    pub tls_fingerprint: Option<String>,
}

impl OwnedSignals {
    /// Borrows these signals for `anteroom_core::risk::assess`.
    pub fn with_reputation<'a>(
        &'a self,
        names: &'a [&'a str],
        reputation: Reputation,
    ) -> Signals<'a> {
        Signals {
            user_agent: self.user_agent.as_deref(),
            accept_language: self.accept_language.as_deref(),
            header_order: names,
            tls_fingerprint: self.tls_fingerprint.as_deref(),
            reputation,
        }
    }

    /// The header names as the borrowed slice [`Signals`] wants.
    pub fn names(&self) -> Vec<&str> {
        self.header_order.iter().map(String::as_str).collect()
    }
}

/// Everything the enter gate needs to know about the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnterSignals {
    /// From [`crate::client_ip::client_ip`].
    pub ip: IpAddr,
    pub headers: OwnedSignals,
}

/// Reads the risk signals of a request.
///
/// `tls_header` is the configured name of the edge's TLS fingerprint header
/// (`bots.tls_fingerprint_header`). Values that are not UTF-8 count as absent,
/// which the rules then score as missing: a browser never sends them.
///
/// Header order is an approximation: `http::HeaderMap` iterates names in the
/// order each name was *first* inserted, which hyper does in arrival order,
/// but a repeated header is reported at its first position only. The rules
/// only fingerprint a few single-valued headers (user-agent, accept,
/// accept-encoding, accept-language), for which this is exact.
pub fn signals_from_headers(headers: &HeaderMap, tls_header: Option<&str>) -> OwnedSignals {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    OwnedSignals {
        user_agent: text("user-agent"),
        accept_language: text("accept-language"),
        // HeaderName is already lowercase.
        header_order: headers.keys().map(|k| k.as_str().to_owned()).collect(),
        tls_fingerprint: tls_header.and_then(text),
    }
}
