//! The page's static files, compiled into the binary, and the
//! Content-Security-Policy that lets exactly them run.

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Content type and bytes of `/_anteroom/<name>`, or `None` for any other name
/// (the list is closed, so no path ever reaches the file system).
pub fn static_asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    let (content_type, body): (&'static str, &'static str) = match name {
        "anteroom.js" => (JS, include_str!("../../static/anteroom.js")),
        "pow-worker.js" => (JS, include_str!("../../static/pow-worker.js")),
        "sha256.js" => (JS, include_str!("../../static/sha256.js")),
        "anteroom.css" => (CSS, include_str!("../../static/anteroom.css")),
        "noscript.css" => (CSS, include_str!("../../static/noscript.css")),
        _ => return None,
    };
    Some((content_type, body.as_bytes()))
}

/// The `Content-Security-Policy` header for a waiting page rendered with `nonce`.
///
/// Self-only: scripts, the worker, styles and API calls come from this origin;
/// nothing is framed, embedded or loaded from a third party. The nonce lets an
/// operator's template add its own inline script by carrying `nonce="{{ nonce }}"`,
/// while injected inline code (which cannot know the nonce) never runs.
pub fn content_security_policy(nonce: &str) -> String {
    format!(
        "default-src 'none'; script-src 'self' 'nonce-{nonce}'; worker-src 'self'; \
         connect-src 'self'; style-src 'self'; img-src 'self' data:; \
         form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
}
