//! The names, `SameSite` values and reading rules of Anteroom's two cookies
//! (`server.cookies`), chosen so visitors keep their place across sites.
//!
//! The journeys that decide the defaults (docs/api.md, "Cookies and
//! journeys", has the whole reasoning):
//! - a link from an email or a search result is a cross-site top-level
//!   `GET`: a `Strict` cookie is not sent with it, `Lax` and `None` are;
//! - a payment provider's return is often a cross-site form `POST`: only a
//!   `None` cookie is sent with it.
//!
//! So the session cookie is `Lax` (every state-changing queue call is a
//! `POST`, which no other site can make with it), and the pass cookie is
//! `None`, read only on top-level navigations when it comes from another
//! site, which is `Lax` plus the cross-site form `POST`: the pass opens the
//! door to the origin and nothing more, and the origin's own cookies keep
//! their own `SameSite` rules.
//!
//! A session is minted only on a request that cannot have been stripped of
//! its cookie by `SameSite` (same-origin, typed or bookmarked, or sent by a
//! client that does not say), so no cross-site arrival ever replaces a place.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};

use super::{
    CookieScan, HOST_PASS_COOKIE, HOST_SESSION_COOKIE, PASS_COOKIE, SESSION_COOKIE, cookie_of,
};

/// Between the session id and the passes in the pass cookie; a cookie-octet
/// that neither a session id nor a pass contains.
const SESSION_SEPARATOR: char = '!';

/// A cookie's `SameSite` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameSite {
    Strict,
    Lax,
    None,
}

impl SameSite {
    /// The config spelling: `"strict"`, `"lax"` or `"none"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "strict" => Some(Self::Strict),
            "lax" => Some(Self::Lax),
            "none" => Some(Self::None),
            _ => None,
        }
    }

    fn attribute(self) -> &'static str {
        match self {
            Self::Strict => "Strict",
            Self::Lax => "Lax",
            Self::None => "None",
        }
    }
}

/// `server.cookies` (with `server.insecure_cookies`), validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieSettings {
    /// `Secure` and the `__Host-` names; off only with `insecure_cookies`.
    pub secure: bool,
    pub session_same_site: SameSite,
    pub pass_same_site: SameSite,
    /// With `secure`, also read the unprefixed names (cookies set before the
    /// `__Host-` prefix), so visitors mid-queue survive an upgrade from such
    /// a version. Off by default: a sibling subdomain can plant an
    /// unprefixed cookie, so an operator turns it on for the upgrade's day
    /// only.
    pub read_unprefixed: bool,
}

/// Which name a cookie came under: the one Anteroom sets now, or an old
/// unprefixed one (read while upgrading), which is never set anew under the
/// current name (see [`crate::identity::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CookieName {
    Current,
    Old,
}

impl Default for CookieSettings {
    fn default() -> Self {
        Self::secure()
    }
}

impl CookieSettings {
    /// The defaults (see the module for why): `Secure` and the `__Host-`
    /// names.
    pub fn secure() -> Self {
        Self {
            secure: true,
            session_same_site: SameSite::Lax,
            pass_same_site: SameSite::None,
            read_unprefixed: false,
        }
    }

    /// The defaults under `server.insecure_cookies` (plain http): neither
    /// `Secure` nor the `__Host-` names.
    pub fn insecure() -> Self {
        Self {
            secure: false,
            // `None` needs `Secure`; over plain http `Lax` is the closest.
            pass_same_site: SameSite::Lax,
            ..Self::secure()
        }
    }

    /// The session cookie's name as set now.
    pub fn session_name(&self) -> &'static str {
        if self.secure {
            HOST_SESSION_COOKIE
        } else {
            SESSION_COOKIE
        }
    }

    /// The pass cookie's name as set now.
    pub fn pass_name(&self) -> &'static str {
        if self.secure {
            HOST_PASS_COOKIE
        } else {
            PASS_COOKIE
        }
    }

    /// The caller's session cookie value and the name it came under.
    pub fn session<'h>(&self, headers: &'h HeaderMap) -> Option<(&'h str, CookieName)> {
        self.read(headers, HOST_SESSION_COOKIE, SESSION_COOKIE)
            .map(|(v, name)| {
                let name = if name == self.session_name() {
                    CookieName::Current
                } else {
                    CookieName::Old
                };
                (v, name)
            })
    }

    /// The caller's pass cookie value. A `SameSite=None` pass arriving from
    /// another site counts only on a top-level navigation: an image, a
    /// script or a frame on another site gets what a `Lax` pass would give.
    pub fn pass<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        self.pass_only(headers).pass()
    }

    /// The session id the pass cookie carries for the gate. A cross-site
    /// form `POST` brings the `SameSite=None` pass but not the `Lax` session
    /// cookie, and a pass is bound to a session only by its hash; so the
    /// (`HttpOnly`) pass cookie also names its session, for the gate alone:
    /// the queue API reads the session cookie only, so no other site can
    /// make queue calls with it.
    pub fn pass_session<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        self.pass_only(headers).pass_session()
    }

    /// The pass cookie alone, read as [`ScannedCookies`] holds it (which
    /// splits the session from the passes).
    fn pass_only<'h>(&self, headers: &'h HeaderMap) -> ScannedCookies<'h> {
        ScannedCookies {
            session: None,
            pass: self.pass_value(headers),
        }
    }

    /// The pass cookie's value for `passes`, naming `session` when it is a
    /// session id (see [`Self::pass_session`]); empty when `passes` is.
    pub fn pass_value_for(session: &str, passes: &str) -> String {
        if passes.is_empty() || !super::is_session_id(session) {
            return passes.to_owned();
        }
        // Pieces pushed, not `format!`: every redeem makes this value, and
        // the formatter's walk over its arguments costs more than the copies.
        let mut value = String::with_capacity(session.len() + 1 + passes.len());
        value.push_str(session);
        value.push(SESSION_SEPARATOR);
        value.push_str(passes);
        value
    }

    fn pass_value<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        if self.pass_same_site == SameSite::None && cross_site_subresource(headers) {
            return None;
        }
        self.read(headers, HOST_PASS_COOKIE, PASS_COOKIE)
            .map(|(v, _)| v)
    }

    /// [`Self::session`] and [`Self::pass`]'s values (before the pass's
    /// session is split off) read from one [`CookieScan`] of `headers`.
    pub fn from_scan<'h>(&self, headers: &HeaderMap, scan: &CookieScan<'h>) -> ScannedCookies<'h> {
        let plain_too = !self.secure || self.read_unprefixed;
        let pick = |host: Option<&'h str>, plain: Option<&'h str>| match host {
            Some(v) => Some((v, self.secure)),
            None => plain.filter(|_| plain_too).map(|v| (v, !self.secure)),
        };
        let [host_sid, host_pass, sid, pass] = scan.values;
        let session = pick(host_sid, sid).map(|(v, current)| {
            let name = if current {
                CookieName::Current
            } else {
                CookieName::Old
            };
            (v, name)
        });
        let pass = pick(host_pass, pass).map(|(v, _)| v).filter(|_| {
            !(self.pass_same_site == SameSite::None && cross_site_subresource(headers))
        });
        ScannedCookies { session, pass }
    }

    /// `Set-Cookie` for the session cookie.
    pub fn session_cookie(&self, value: &str, max_age: Option<Duration>) -> Option<HeaderValue> {
        self.set(self.session_name(), self.session_same_site, value, max_age)
    }

    /// `Set-Cookie` for the pass cookie; `max_age` of zero deletes it.
    pub fn pass_cookie(&self, value: &str, max_age: Option<Duration>) -> Option<HeaderValue> {
        self.set(self.pass_name(), self.pass_same_site, value, max_age)
    }

    /// A `__Host-` cookie is only ever accepted by a browser from a secure
    /// context with `Secure`, host-only and `Path=/`, so it is always
    /// trusted; the unprefixed name is this server's own name over plain
    /// http, and otherwise read only while upgrading.
    fn read<'h>(
        &self,
        headers: &'h HeaderMap,
        host: &'static str,
        plain: &'static str,
    ) -> Option<(&'h str, &'static str)> {
        let plain_too = !self.secure || self.read_unprefixed;
        cookie_of(headers, host, plain_too.then_some(plain))
            .map(|(v, first)| (v, if first { host } else { plain }))
    }

    fn set(
        &self,
        name: &str,
        same_site: SameSite,
        value: &str,
        max_age: Option<Duration>,
    ) -> Option<HeaderValue> {
        // Every new visitor's join and every pass sets a cookie: one string,
        // grown once, handed to the header value without a copy (two
        // `format!`s and a copied value cost a join about 1.9k instructions).
        let mut s = String::with_capacity(name.len() + value.len() + 80);
        for part in [name, "=", value, "; HttpOnly; SameSite="] {
            s.push_str(part);
        }
        s.push_str(same_site.attribute());
        s.push_str("; Path=/");
        if self.secure {
            s.push_str("; Secure");
        }
        if let Some(age) = max_age {
            s.push_str("; Max-Age=");
            s.push_str(itoa::Buffer::new().format(age.as_secs()));
        }
        HeaderValue::try_from(s).ok()
    }
}

/// Whether a request without a session cookie may get a new one: only when
/// `SameSite` cannot have withheld the cookie. `Sec-Fetch-Site: same-origin`
/// (the waiting page's own calls) and `none` (typed, bookmarked) carry every
/// cookie; a browser that sends no `Sec-Fetch-Site`, or a script, is taken at
/// its word. `cross-site` and `same-site` may have lost a `Strict` cookie, or
/// a `Lax` one on a `POST`: minting there would replace the visitor's place.
pub fn may_mint_session(headers: &HeaderMap) -> bool {
    match fetch_site(headers) {
        None => true,
        Some(site) => site == "same-origin" || site == "none",
    }
}

/// The session and pass cookies as [`CookieSettings::from_scan`] read them;
/// the one place the pass cookie's value is split into its session and its
/// passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScannedCookies<'h> {
    /// As [`CookieSettings::session`] reads it.
    pub session: Option<(&'h str, CookieName)>,
    /// The pass cookie's whole value, as the private `pass_value` reads it.
    pass: Option<&'h str>,
}

impl<'h> ScannedCookies<'h> {
    /// The passes' text (see [`CookieSettings::pass`]).
    pub fn pass(&self) -> Option<&'h str> {
        self.pass.map(|v| {
            v.split_once(SESSION_SEPARATOR)
                .map_or(v, |(_, passes)| passes)
        })
    }

    /// The session the pass cookie names (see
    /// [`CookieSettings::pass_session`]).
    pub fn pass_session(&self) -> Option<&'h str> {
        self.pass
            .and_then(|v| v.split_once(SESSION_SEPARATOR))
            .map(|(sid, _)| sid)
            .filter(|sid| super::is_session_id(sid))
    }
}

/// A request from another site that is not a top-level navigation (an
/// image, a script, a `fetch`, a frame).
fn cross_site_subresource(headers: &HeaderMap) -> bool {
    if fetch_site(headers) != Some("cross-site") {
        return false;
    }
    let mode = headers.get("sec-fetch-mode").and_then(|v| v.to_str().ok());
    let dest = headers.get("sec-fetch-dest").and_then(|v| v.to_str().ok());
    // A browser that sends `Sec-Fetch-Site` sends these too; without them
    // nothing says it is a navigation.
    !(mode == Some("navigate") && dest.is_none_or(|d| d == "document"))
}

/// A browser's request that another origin's page made: `Sec-Fetch-Site`
/// `same-site` (a sibling subdomain, whose form `POST` carries the `Lax`
/// session cookie) or `cross-site`. A client that sends no `Sec-Fetch-Site`
/// (a script, an older browser) is taken at its word.
pub fn from_another_origin(headers: &HeaderMap) -> bool {
    matches!(fetch_site(headers), Some("same-site" | "cross-site"))
}

fn fetch_site(headers: &HeaderMap) -> Option<&str> {
    headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SID: &str = "0123456789abcdef0123456789abcdef";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn secure_cookies_use_host_names_and_flags() {
        let c = CookieSettings::secure();
        assert_eq!(
            c.session_cookie("v", Some(Duration::from_secs(5))).unwrap(),
            "__Host-anteroom_sid=v; HttpOnly; SameSite=Lax; Path=/; Secure; Max-Age=5"
        );
        assert_eq!(
            c.pass_cookie("p", None).unwrap(),
            "__Host-anteroom_pass=p; HttpOnly; SameSite=None; Path=/; Secure"
        );
        let plain = CookieSettings::insecure();
        assert_eq!(
            plain.pass_cookie("p", None).unwrap(),
            "anteroom_pass=p; HttpOnly; SameSite=Lax; Path=/"
        );
    }

    #[test]
    fn the_prefixed_name_wins_and_the_old_one_is_read_while_upgrading() {
        let mut c = CookieSettings::secure();
        assert!(!c.read_unprefixed, "off unless the operator upgrades");
        c.read_unprefixed = true;
        let old = headers(&[("cookie", &format!("anteroom_sid={SID}"))]);
        assert_eq!(c.session(&old), Some((SID, CookieName::Old)));
        let both = headers(&[(
            "cookie",
            &format!("anteroom_sid=planted; __Host-anteroom_sid={SID}"),
        )]);
        assert_eq!(c.session(&both), Some((SID, CookieName::Current)));
        c.read_unprefixed = false;
        assert_eq!(c.session(&old), None);
        // Over plain http the unprefixed name is the current one.
        assert_eq!(
            CookieSettings::insecure().session(&old),
            Some((SID, CookieName::Current))
        );
    }

    #[test]
    fn a_cross_site_pass_counts_only_on_a_top_level_navigation() {
        let c = CookieSettings::secure();
        let nav = headers(&[
            ("cookie", "__Host-anteroom_pass=p"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
            ("sec-fetch-dest", "document"),
        ]);
        assert_eq!(c.pass(&nav), Some("p"));
        for (mode, dest) in [
            ("no-cors", "image"),
            ("navigate", "iframe"),
            ("cors", "empty"),
        ] {
            let sub = headers(&[
                ("cookie", "__Host-anteroom_pass=p"),
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", mode),
                ("sec-fetch-dest", dest),
            ]);
            assert_eq!(c.pass(&sub), None, "{mode} {dest}");
        }
        let same = headers(&[
            ("cookie", "__Host-anteroom_pass=p"),
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-mode", "cors"),
        ]);
        assert_eq!(c.pass(&same), Some("p"));
    }

    #[test]
    fn the_pass_cookie_names_its_session_for_the_gate() {
        let mut c = CookieSettings::secure();
        c.read_unprefixed = true;
        let value = CookieSettings::pass_value_for(SID, "p1~p2");
        assert_eq!(value, format!("{SID}!p1~p2"));
        let h = headers(&[("cookie", &format!("__Host-anteroom_pass={value}"))]);
        assert_eq!(c.pass(&h), Some("p1~p2"));
        assert_eq!(c.pass_session(&h), Some(SID));
        // A JWT subject is not a session id and is not written.
        assert_eq!(CookieSettings::pass_value_for("user-7", "p"), "p");
        assert_eq!(CookieSettings::pass_value_for(SID, ""), "");
        // An old cookie holds only passes.
        let old = headers(&[("cookie", "anteroom_pass=p1")]);
        assert_eq!(c.pass(&old), Some("p1"));
        assert_eq!(c.pass_session(&old), None);
    }

    #[test]
    fn sessions_are_minted_only_where_no_cookie_can_have_been_withheld() {
        assert!(may_mint_session(&HeaderMap::new()));
        assert!(may_mint_session(&headers(&[(
            "sec-fetch-site",
            "same-origin"
        )])));
        assert!(may_mint_session(&headers(&[("sec-fetch-site", "none")])));
        assert!(!may_mint_session(&headers(&[(
            "sec-fetch-site",
            "cross-site"
        )])));
        assert!(!may_mint_session(&headers(&[(
            "sec-fetch-site",
            "same-site"
        )])));
    }

    proptest::proptest! {
        /// The gate's reading from one scan gives what the settings' own
        /// readers give, for every setting, name, session and fetch context.
        #[test]
        fn a_reading_from_the_scan_is_the_settings_own(
            secure in proptest::bool::ANY,
            read_unprefixed in proptest::bool::ANY,
            pass_none in proptest::bool::ANY,
            pairs in proptest::collection::vec(
                (
                    proptest::sample::select(vec![
                        "__Host-anteroom_sid", "__Host-anteroom_pass", "anteroom_sid",
                        "anteroom_pass", "theme",
                    ]),
                    proptest::sample::select(vec![
                        SID, "0123", "p1~p2", "0123456789abcdef0123456789abcdef!p1~p2",
                        "bad!p", "",
                    ]),
                ),
                0..5,
            ),
            site in proptest::sample::select(vec![None, Some("cross-site"), Some("same-origin")]),
            mode in proptest::sample::select(vec![None, Some("navigate"), Some("no-cors")]),
        ) {
            let c = CookieSettings {
                secure,
                read_unprefixed,
                pass_same_site: if pass_none { SameSite::None } else { SameSite::Lax },
                ..CookieSettings::secure()
            };
            let jar = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
            let mut h = headers(&[("cookie", &jar)]);
            if let Some(site) = site {
                h.append("sec-fetch-site", HeaderValue::from_static(site));
            }
            if let Some(mode) = mode {
                h.append("sec-fetch-mode", HeaderValue::from_static(mode));
            }
            let scan = super::super::scan_cookies(&h);
            let read = c.from_scan(&h, &scan);
            proptest::prop_assert_eq!(read.session, c.session(&h));
            proptest::prop_assert_eq!(read.pass(), c.pass(&h));
            proptest::prop_assert_eq!(read.pass_session(), c.pass_session(&h));
        }
    }
}
