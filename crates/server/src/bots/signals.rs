//! What the risk rules see of a request, taken from its headers once and
//! borrowed from them: the enter handler keeps its request's head to the
//! end, and every join reads these, so copying each value and each header
//! name into a string of its own only cost allocations.

use std::net::IpAddr;

use anteroom_core::risk::{Reputation, Signals};
use http::header::{ACCEPT_LANGUAGE, AsHeaderName, USER_AGENT};
use http::{HeaderMap, HeaderName};

/// Header-derived risk signals, borrowed from the request's head.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderSignals<'h> {
    pub user_agent: Option<&'h str>,
    pub accept_language: Option<&'h str>,
    /// Lowercased header names, each once, in the order of their first field.
    pub header_order: Vec<&'h str>,
    pub tls_fingerprint: Option<&'h str>,
}

impl HeaderSignals<'_> {
    /// These signals for `anteroom_core::risk::assess`.
    pub fn with_reputation(&self, reputation: Reputation) -> Signals<'_> {
        Signals {
            user_agent: self.user_agent,
            accept_language: self.accept_language,
            header_order: &self.header_order,
            tls_fingerprint: self.tls_fingerprint,
            reputation,
        }
    }
}

/// Everything the enter gate needs to know about the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnterSignals<'h> {
    /// From [`crate::client_ip::client_ip`].
    pub ip: IpAddr,
    pub headers: HeaderSignals<'h>,
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
pub fn signals_from_headers<'h>(
    headers: &'h HeaderMap,
    tls_header: Option<&str>,
) -> HeaderSignals<'h> {
    HeaderSignals {
        user_agent: text(headers, USER_AGENT),
        accept_language: text(headers, ACCEPT_LANGUAGE),
        // HeaderName is already lowercase.
        header_order: headers.keys().map(HeaderName::as_str).collect(),
        tls_fingerprint: tls_header.and_then(|name| text(headers, name)),
    }
}

/// A field's value as text (visible ASCII, as `to_str` reads it); anything
/// else counts as absent.
fn text(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}
