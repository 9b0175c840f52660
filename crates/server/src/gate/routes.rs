//! The route table: which event, if any, protects a normalised path.
//!
//! Prefixes match ASCII case-insensitively and only on segment boundaries,
//! and the longest matching prefix wins across all events, so `/tickets/vip`
//! can belong to one event while `/tickets` belongs to another.

use anteroom_store::EventId;

use super::normalize::{NormalizeError, normalize_path};

#[cfg(test)]
mod tests;

/// Protected path prefixes of every event, longest first.
#[derive(Clone, Debug, Default)]
pub struct RouteTable {
    routes: Vec<(String, EventId)>,
}

impl RouteTable {
    /// Builds the table from `(prefix, event)` pairs.
    ///
    /// Prefixes are normalised like request paths (see [`check_prefix`]);
    /// config validation should refuse a prefix that does not normalise, and
    /// one that slips through is kept as written (it then matches only the
    /// paths spelled that way). When two events claim the same prefix, the
    /// first one given wins.
    pub fn new(prefixes: Vec<(String, EventId)>) -> Self {
        let mut routes: Vec<(String, EventId)> = prefixes
            .into_iter()
            .map(|(prefix, event)| {
                let canonical = check_prefix(&prefix).unwrap_or(prefix);
                (canonical, event)
            })
            .collect();
        // A stable sort keeps the given order among equal lengths.
        routes.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Self { routes }
    }

    /// The event protecting `normalized_path` (the output of
    /// [`normalize_path`], query allowed), or `None` when it is unprotected.
    pub fn lookup(&self, normalized_path: &str) -> Option<&EventId> {
        let path = normalized_path.as_bytes();
        self.routes
            .iter()
            .find(|(prefix, _)| matches_prefix(path, prefix.as_bytes()))
            .map(|(_, event)| event)
    }

    /// Whether no event protects any path.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// Normalises a configured prefix: like a request path, with no query and
/// no trailing `/` (so `/tickets/` and `/tickets` protect the same paths).
pub fn check_prefix(prefix: &str) -> Result<String, NormalizeError> {
    let mut canonical = normalize_path(prefix)?;
    if let Some(at) = canonical.find('?') {
        canonical.truncate(at);
    }
    while canonical.len() > 1 && canonical.ends_with('/') {
        canonical.pop();
    }
    Ok(canonical)
}

/// Whether `prefix` covers `path`: equal ignoring ASCII case up to the
/// prefix's end, which must fall on a boundary. `;` counts as one because
/// servlet containers strip `;params` from the segment (`/tickets;x` is
/// `/tickets` there).
fn matches_prefix(path: &[u8], prefix: &[u8]) -> bool {
    let Some(head) = path.get(..prefix.len()) else {
        return false;
    };
    if !head.eq_ignore_ascii_case(prefix) {
        return false;
    }
    prefix.ends_with(b"/") || matches!(path.get(prefix.len()), None | Some(b'/' | b'?' | b';'))
}
