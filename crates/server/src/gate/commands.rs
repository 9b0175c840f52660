//! Origin commands: an origin's response may carry `Anteroom-Command`, which
//! the gate acts on and removes before the response goes on to the visitor.
//!
//! `release` ends the visitor's active session exactly as
//! `POST /api/queue/release` does (the store frees the slot and records the
//! revocation every node picks up), and this node refuses the session's
//! passes at once instead of at its next revocation refresh. Anything else
//! is ignored and counted, so an origin that misspells a command finds out
//! from the metrics rather than from a visitor.
//!
//! The header is Anteroom's own namespace: it is removed from every origin
//! response, protected or not, so a visitor never sees what the origin told
//! the gate.

use axum::http::{HeaderMap, HeaderName};

use crate::state::{AppState, EventRuntime};

/// The response header an origin speaks to the gate with.
pub const HEADER: HeaderName = HeaderName::from_static("anteroom-command");

/// What the origin asked for in one response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Commands {
    pub release: bool,
}

/// Removes every `Anteroom-Command` header (each may hold a comma-separated
/// list; names are case-insensitive) and returns the commands understood.
/// Unknown ones are counted in `anteroom_origin_commands_total{command="unknown"}`.
pub fn take(headers: &mut HeaderMap) -> Commands {
    let mut commands = Commands::default();
    // `remove` drops every value of the name; `get_all` reads them first.
    if !headers.contains_key(&HEADER) {
        return commands;
    }
    for value in headers.get_all(&HEADER) {
        let text = value.to_str().unwrap_or("\u{fffd}");
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name.eq_ignore_ascii_case("release") {
                commands.release = true;
            } else {
                count("unknown", "ignored");
            }
        }
    }
    headers.remove(&HEADER);
    commands
}

/// Ends `member`'s session that started at `session_start_us` (canonical µs,
/// from its pass): the store release (slot freed, revocation recorded for
/// every node) and this node's own revocation, so the pass the visitor
/// holds is refused here from the next request on.
pub async fn release(state: &AppState, rt: &EventRuntime, member: &str, session_start_us: i64) {
    let queue = crate::queue::Queue::new(state, rt);
    match queue.release(member, Some(session_start_us)).await {
        Ok(_) => count("release", "applied"),
        Err(e) => {
            // The session may outlive the command on other nodes until the
            // store answers again; this node refuses it already.
            tracing::warn!(event = %rt.id(), error = e.kind(), "origin release command: store release failed");
            count("release", "store_failed");
        }
    }
}

/// A `release` on a response to an unprotected path: there is no session
/// the gate knows of to end.
pub fn release_without_session() {
    count("release", "no_session");
}

fn count(command: &'static str, outcome: &'static str) {
    metrics::counter!("anteroom_origin_commands_total", "command" => command, "outcome" => outcome)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_str(v).unwrap());
        }
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        h
    }

    #[test]
    fn commands_are_read_in_any_case_and_list_and_always_removed() {
        for (values, release) in [
            (&["release"][..], true),
            (&["Release"][..], true),
            (&[" RELEASE , later"][..], true),
            (&["later", "release"][..], true),
            (&["frobnicate"][..], false),
            (&[""][..], false),
            (&[][..], false),
        ] {
            let mut h = headers(values);
            assert_eq!(take(&mut h).release, release, "{values:?}");
            assert!(!h.contains_key(&HEADER), "{values:?}: header left on");
            assert!(h.contains_key("content-type"), "other headers kept");
        }
    }

    #[test]
    fn a_value_that_is_not_text_is_an_unknown_command_and_removed() {
        let mut h = HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_bytes(b"rel\xffease").unwrap());
        assert!(!take(&mut h).release);
        assert!(h.is_empty());
    }
}
