//! Header rewriting on the way to the origin and back: hop-by-hop headers
//! stay on their hop, the origin gets one rebuilt set of forwarding headers
//! that says who asked, only the gate may speak for Anteroom
//! (`X-Anteroom-*`), and Anteroom's own cookies stay with Anteroom.

use std::net::IpAddr;

use http::header::{CONNECTION, CONTENT_LENGTH, COOKIE, EXPECT, HOST, TRANSFER_ENCODING, UPGRADE};
use http::uri::Authority;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri};
use ipnet::IpNet;

use crate::serve::ClientScheme;

#[cfg(test)]
mod tests;

/// RFC 9110 7.6.1 connection-specific headers, plus the de-facto ones. A
/// `static`: a `const` array would be built (and dropped) at every use.
static HOP_BY_HOP: [HeaderName; 9] = [
    http::header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    http::header::PROXY_AUTHENTICATE,
    http::header::PROXY_AUTHORIZATION,
    http::header::TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
];

/// Whether `name` is one of [`HOP_BY_HOP`]: one reading of the name's
/// text (see [`is_hop_by_hop_name`]), where looking it up in the list
/// compares nine names.
pub(super) fn is_hop_by_hop(name: &HeaderName) -> bool {
    is_hop_by_hop_name(name.as_str().as_bytes())
}

/// Whether an answer's field (name and value as they came off the wire)
/// sets one of Anteroom's own cookies ([`crate::identity::is_own_cookie`]):
/// the origin, or another app behind the default origin, must not fix a
/// visitor's session or clear their pass, as the visitor's own such
/// cookies never reach the origin.
pub(super) fn sets_own_cookie(name: &[u8], value: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"set-cookie") && {
        let pair = value.split(|b| *b == b';').next().unwrap_or(b"");
        let mut parts = pair.splitn(2, |b| *b == b'=');
        let cookie = parts.next().unwrap_or(b"").trim_ascii();
        // A cookie without a name (`=anteroom_sid=x`, or no `=` at all) is
        // sent back as its bare value, `anteroom_sid=x`: its value's own
        // name is the one the visitor's next request carries.
        let sent_as = match parts.next() {
            Some(value) if cookie.is_empty() => value.split(|b| *b == b'=').next().unwrap_or(b""),
            Some(_) => cookie,
            None => pair,
        };
        crate::identity::is_own_cookie(sent_as.trim_ascii())
    }
}

/// Whether a name as it came off the wire, in any case, is one of
/// [`HOP_BY_HOP`]: a name of any other length is settled by its length
/// alone.
pub(super) fn is_hop_by_hop_name(name: &[u8]) -> bool {
    let hops: &[&[u8]] = match name.len() {
        2 => &[b"te"],
        7 => &[b"trailer", b"upgrade"],
        10 => &[b"connection", b"keep-alive"],
        16 => &[b"proxy-connection"],
        17 => &[b"transfer-encoding"],
        18 => &[b"proxy-authenticate"],
        19 => &[b"proxy-authorization"],
        _ => return false,
    };
    hops.iter().any(|hop| name.eq_ignore_ascii_case(hop))
}

/// Request headers a client must not set for the origin, compared after
/// `_` is read as `-` (CGI, WSGI, PHP and nginx with
/// `underscores_in_headers` map both to the same variable, so
/// `X_Forwarded_For` is `X-Forwarded-For` to the application): they claim
/// who the client is, how it connected, or which path it asked for
/// (`X-Original-URL` and `X-Rewrite-URL` make IIS, Symfony and Zend route
/// by a header instead of the request target the gate matched).
const FORGEABLE: &[&str] = &[
    "forwarded",
    "x-real-ip",
    "x-original-url",
    "x-rewrite-url",
    "x-client-ip",
    "client-ip",
    "true-client-ip",
    "x-cluster-client-ip",
];

/// Prefixes of forgeable names: Anteroom's own, and every `X-Forwarded-*`
/// (`-For`, `-Proto`, `-Host`, `-Port`, `-Prefix`, `-Server`, ...).
const FORGEABLE_PREFIXES: &[&str] = &["x-anteroom-", "x-forwarded-"];

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// What the origin is told about the client: the believed address, the
/// scheme and the host it asked for.
#[derive(Clone, Debug)]
pub struct ClientHop {
    pub ip: IpAddr,
    pub proto: &'static str,
    pub host: Option<HeaderValue>,
}

impl ClientHop {
    /// Reads a request that arrived from `peer`. Only a peer in `trusted`
    /// is believed about the client: its `X-Forwarded-For` chain (through
    /// [`crate::client_ip`]), its `X-Forwarded-Proto` (`http` or `https`,
    /// the scheme the client used at the proxy) and its `X-Forwarded-Host`.
    /// Anyone else gets the TCP peer, this listener's scheme and the `Host`
    /// it sent. The URI's own scheme is never believed: a client writes it.
    pub fn read<B>(req: &Request<B>, peer: IpAddr, trusted: &[IpNet]) -> Self {
        let headers = req.headers();
        let ip = crate::client_ip::client_ip(peer, headers, trusted);
        let vouched = crate::client_ip::is_trusted(peer, trusted);
        let listener = match req.extensions().get::<ClientScheme>() {
            Some(ClientScheme::Https) => "https",
            Some(ClientScheme::Http) | None => "http",
        };
        let proto = vouched
            .then(|| only(headers, &X_FORWARDED_PROTO))
            .flatten()
            .and_then(|v| {
                let v = v.to_str().ok()?.trim();
                if v.eq_ignore_ascii_case("https") {
                    Some("https")
                } else if v.eq_ignore_ascii_case("http") {
                    Some("http")
                } else {
                    None
                }
            })
            .unwrap_or(listener);
        let host = vouched
            .then(|| only(headers, &X_FORWARDED_HOST).cloned())
            .flatten()
            .or_else(|| request_host(headers, req.uri()));
        Self { ip, proto, host }
    }
}

/// The value of a header sent exactly once; a repeated one is not believed.
fn only<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h HeaderValue> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values.next().is_none().then_some(first)
}

/// What the origin is told about the request it receives.
pub(super) struct Forwarding<'a> {
    pub client: &'a ClientHop,
    pub origin_authority: Option<&'a Authority>,
    pub upgrade: Option<HeaderValue>,
    /// Whether the request has a `Connection` field, whose listed names
    /// stay on the visitor's hop ([`HopFields::connection`]). `true` is
    /// always right, only slower: the field is then looked up.
    pub connection: bool,
}

/// What a visitor's request fields say about its own hop, read in one pass
/// over them. The proxy asks about `Upgrade`, `Connection`,
/// `Transfer-Encoding` and `Content-Length` before it forwards; each
/// lookup by name hashes the name and probes the map, and reading a short
/// head's names once costs less than the first two of those.
#[derive(Debug, Default)]
pub(super) struct HopFields<'h> {
    /// The first `Upgrade` value.
    pub upgrade: Option<&'h HeaderValue>,
    /// How many `Upgrade` values there are.
    pub upgrades: usize,
    /// Whether there is a `Connection` field.
    pub connection: bool,
    /// Whether there is a `Transfer-Encoding` field.
    pub transfer_encoding: bool,
    /// Whether any `Content-Length` value is other than `0`.
    pub length: bool,
}

impl<'h> HopFields<'h> {
    pub(super) fn read(headers: &'h HeaderMap) -> Self {
        let mut hop = Self::default();
        for (name, value) in headers {
            if name == UPGRADE {
                hop.upgrades += 1;
                hop.upgrade.get_or_insert(value);
            } else if name == CONNECTION {
                hop.connection = true;
            } else if name == TRANSFER_ENCODING {
                hop.transfer_encoding = true;
            } else if name == CONTENT_LENGTH && value.as_bytes() != b"0" {
                hop.length = true;
            }
        }
        hop
    }

    /// The protocol the request asks to upgrade to (`Upgrade`), when its
    /// `Connection` field says `upgrade`; `headers` are the fields read.
    pub(super) fn upgrade_protocol(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        let asked = self.upgrade.is_some()
            && self.connection
            && connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"));
        asked.then(|| self.upgrade.cloned()).flatten()
    }
}

/// The host the visitor asked for: `Host`, or the authority of an
/// absolute-form or HTTP/2 request.
fn request_host(headers: &HeaderMap, uri: &Uri) -> Option<HeaderValue> {
    headers.get(HOST).cloned().or_else(|| {
        uri.authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    })
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Removes the hop-by-hop headers and those the `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most requests and answers carry none of them (or only `Connection`):
    // one pass over the names that are there is cheaper than looking each
    // of the nine up.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let listed: Vec<HeaderName> = connection_tokens(headers)
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    // Names made once: a `&str` would be parsed and checked on every call.
    for name in HOP_BY_HOP.iter() {
        headers.remove(name);
    }
}

/// An address as a header value's text, IPv4 written directly (every
/// proxied request carries one; `Display` goes through the formatter).
fn ip_text(ip: IpAddr, out: &mut Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(itoa::Buffer::new().format(*octet).as_bytes());
            }
        }
        IpAddr::V6(_) => out.extend_from_slice(ip.to_string().as_bytes()),
    }
}

#[cfg(test)]
fn ip_value(ip: IpAddr) -> Option<HeaderValue> {
    let mut out = Vec::with_capacity(15);
    ip_text(ip, &mut out);
    HeaderValue::from_bytes(&out).ok()
}

/// Whether a client-sent header claims something only Anteroom may say.
fn is_forgeable(name: &HeaderName) -> bool {
    // Header names are lowercase; `_` and `-` are the same to many stacks.
    // Compared in place: this runs for every header of every request.
    let name = name.as_str().as_bytes();
    let same = |a: &[u8], b: &[u8]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(&x, &y)| x == y || (x == b'_' && y == b'-'))
    };
    FORGEABLE.iter().any(|f| same(name, f.as_bytes()))
        || FORGEABLE_PREFIXES
            .iter()
            .any(|p| name.len() >= p.len() && same(&name[..p.len()], p.as_bytes()))
}

/// The `Cookie` headers without Anteroom's cookies, joined into one value
/// (RFC 9113 8.2.3: an HTTP/1.1 hop gets one); empty when nothing is left.
fn kept_cookies(headers: &HeaderMap) -> Vec<u8> {
    let mut kept: Vec<u8> = Vec::new();
    for value in headers.get_all(COOKIE) {
        // Pairs found with `memchr`: a pass makes the header a few hundred
        // bytes, and every proxied request of an admitted visitor has one.
        let mut rest = value.as_bytes();
        while !rest.is_empty() {
            let end = memchr::memchr(b';', rest).unwrap_or(rest.len());
            let pair = rest[..end].trim_ascii();
            rest = rest.get(end + 1..).unwrap_or_default();
            let name = memchr::memchr(b'=', pair).map_or(pair, |eq| &pair[..eq]);
            if pair.is_empty() || crate::identity::is_own_cookie(name.trim_ascii()) {
                continue;
            }
            if !kept.is_empty() {
                kept.extend_from_slice(b"; ");
            }
            kept.extend_from_slice(pair);
        }
    }
    kept
}

/// Where the origin's request fields go: a header map for hyper's client,
/// or the request head itself for the lean client, which then never builds
/// a map to write it out again.
pub(super) trait FieldSink {
    /// A visitor's field passed on.
    fn field(&mut self, name: &HeaderName, value: &HeaderValue);
    /// A value made here, valid by construction (it joins or formats
    /// valid values).
    fn made(&mut self, name: &HeaderName, value: &[u8]);
}

impl FieldSink for HeaderMap {
    fn field(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.append(name.clone(), value.clone());
    }

    fn made(&mut self, name: &HeaderName, value: &[u8]) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            self.append(name.clone(), value);
        }
    }
}

/// The fields written as an HTTP/1.1 head's field lines.
pub(super) struct HeadSink<'a>(pub &'a mut Vec<u8>);

impl FieldSink for HeadSink<'_> {
    fn field(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.made(name, value.as_bytes());
    }

    fn made(&mut self, name: &HeaderName, value: &[u8]) {
        let out = &mut *self.0;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
}

/// The visitor's request fields as the origin gets them, in one pass over
/// them, into `out`: the hop-by-hop fields and those `Connection` names
/// stay on the visitor's hop; the forgeable ones, Anteroom's cookies,
/// `Expect` (the visitor's `100-continue` was answered by our server
/// already) and any field named in `extra` are dropped; then the rebuilt
/// forwarding fields, `Host` (the origin's authority: name-based virtual
/// hosting on the origin must see its own name; first, as RFC 9112 3.2
/// asks), the upgrade the visitor asked for, and `extra`.
pub(super) fn for_origin(
    headers: &HeaderMap,
    fwd: Forwarding<'_>,
    extra: &[(HeaderName, HeaderValue)],
    out: &mut impl FieldSink,
) {
    // Names the `Connection` field lists are this hop's too. (No
    // allocation when there are none, and no lookup without the field.)
    let listed: Vec<&str> = if fwd.connection {
        connection_tokens(headers).collect()
    } else {
        Vec::new()
    };
    let host = fwd.origin_authority;
    if let Some(authority) = host {
        out.made(&HOST, authority.as_str().as_bytes());
    }
    let mut cookies = false;
    for (name, value) in headers {
        if is_hop_by_hop(name)
            || is_forgeable(name)
            || name == EXPECT
            || (host.is_some() && name == HOST)
            || extra.iter().any(|(n, _)| n == name)
            || listed.iter().any(|t| t.eq_ignore_ascii_case(name.as_str()))
        {
            continue;
        }
        if name == COOKIE {
            cookies = true;
            continue;
        }
        out.field(name, value);
    }
    if cookies {
        let kept = kept_cookies(headers);
        if !kept.is_empty() {
            out.made(&COOKIE, &kept);
        }
    }
    let client = fwd.client;
    let mut ip = Vec::with_capacity(15);
    ip_text(client.ip, &mut ip);
    out.made(&X_FORWARDED_FOR, &ip);
    out.made(&X_FORWARDED_PROTO, client.proto.as_bytes());
    if let Some(host) = &client.host {
        out.field(&X_FORWARDED_HOST, host);
    }
    if let Some(protocol) = &fwd.upgrade {
        out.made(&CONNECTION, b"upgrade");
        out.field(&UPGRADE, protocol);
    }
    for (name, value) in extra {
        out.field(name, value);
    }
}

/// Rewrites a visitor's request headers for the origin ([`for_origin`]).
pub(super) fn rewrite_request(
    headers: &mut HeaderMap,
    fwd: Forwarding<'_>,
    extra: &[(HeaderName, HeaderValue)],
) {
    let visitor = std::mem::take(headers);
    headers.reserve(visitor.len() + 4);
    for_origin(&visitor, fwd, extra, headers);
}

/// Rewrites an origin's response headers for the visitor (no hop-by-hop
/// field, no `Set-Cookie` of Anteroom's own cookies); a `101` keeps what
/// the visitor needs to finish the upgrade.
pub(super) fn rewrite_response(headers: &mut HeaderMap, status: StatusCode) {
    let upgrade = if status == StatusCode::SWITCHING_PROTOCOLS {
        headers.get(UPGRADE).cloned()
    } else {
        None
    };
    strip_hop_by_hop(headers);
    let set_cookie = http::header::SET_COOKIE;
    if headers
        .get_all(&set_cookie)
        .iter()
        .any(|v| sets_own_cookie(b"set-cookie", v.as_bytes()))
    {
        let kept: Vec<HeaderValue> = headers
            .get_all(&set_cookie)
            .iter()
            .filter(|v| !sets_own_cookie(b"set-cookie", v.as_bytes()))
            .cloned()
            .collect();
        headers.remove(&set_cookie);
        for v in kept {
            headers.append(&set_cookie, v);
        }
    }
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
}
