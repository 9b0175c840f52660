//! The route table: which event, if any, protects a normalised path.
//!
//! A prefix protects what web frameworks route to it, not just the bytes it
//! starts with (see [`matches_prefix`]): the path itself, everything below
//! it, and its last segment with a format suffix or path parameters
//! (`/tickets.json`, `/tickets;jsessionid=x`), matched ASCII
//! case-insensitively. `/ticketsale` stays a different path. The longest
//! matching prefix wins across all events, so `/tickets/vip` (and
//! `/tickets/vip.json`) can belong to one event while `/tickets` belongs to
//! another.

pub mod normalize;
#[cfg(test)]
mod tests;

use anteroom_store::EventId;

use normalize::{NormalizeError, normalize_path};

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
    // A segment with nothing left once bare is passed over in every path
    // (see [`matches_prefix`]), so a prefix keeps none either:
    // `/shop/%20/vip` protects what `/shop/vip` does, not nothing.
    if canonical
        .split('/')
        .skip(1)
        .any(|s| !s.is_empty() && is_empty_once_bare(s.as_bytes()))
    {
        let kept: Vec<&str> = canonical
            .split('/')
            .filter(|s| !is_empty_once_bare(s.as_bytes()))
            .collect();
        if kept.is_empty() {
            return Err(NormalizeError::EmptyPrefix);
        }
        canonical = format!("/{}", kept.join("/"));
    }
    while canonical.len() > 1 && canonical.ends_with('/') {
        canonical.pop();
    }
    Ok(canonical)
}

/// The name under which the gate knows a canonical prefix (see
/// [`check_prefix`]): each segment lowercased and bare (see [`bare`]). Two
/// prefixes with one name cover the same paths by [`matches_prefix`]'s
/// rule (`/tickets`, `/Tickets.`, `/tickets;x`, `/tickets%20`), so one event
/// at most may hold it: were two to, the longer spelling would silently
/// take the other event's paths.
pub fn prefix_name(canonical: &str) -> String {
    let mut name = String::with_capacity(canonical.len());
    for (i, segment) in canonical.split('/').enumerate() {
        if i > 0 {
            name.push('/');
        }
        name.push_str(&String::from_utf8_lossy(bare(segment.as_bytes())).to_ascii_lowercase());
    }
    name
}

/// Whether `prefix` (canonical, see [`check_prefix`]) covers `path` (the
/// output of [`normalize_path`]), segment by segment, ignoring ASCII case:
///
/// - every segment but the prefix's last compares after dropping its
///   `;params` (servlet containers strip them from every segment, so
///   `/tickets;x=1/vip` is `/tickets/vip` there), its trailing dots (IIS
///   and Windows file systems drop them) and the encoded spaces at either
///   end (`%20`: Spring's `trimTokens` trims them);
/// - the prefix's last segment also matches the same name followed by `.`
///   or `;` and anything after it: Rails' `(.:format)`, Spring's suffix
///   matching and servlet path parameters route `/tickets.json`,
///   `/TICKETS.HTML` and `/tickets;jsessionid=x` to the `/tickets` handler;
///   so does such a segment once bare (`/%20tickets..x;p`: Spring trims
///   the space, drops the parameters, then matches the suffix);
/// - `%3B` counts as `;`, for origins that decode before they strip
///   parameters (the gate keeps reserved escapes encoded).
///
/// Anything may follow the matched segments (`/tickets/...`). The rule
/// protects a little more than a given framework routes (`/tickets.old/x`),
/// never less.
pub fn matches_prefix(path: &[u8], prefix: &[u8]) -> bool {
    let Some(prefix) = prefix.strip_prefix(b"/") else {
        return false;
    };
    if prefix.is_empty() {
        return true;
    }
    // Every request is looked up against each event's prefixes in turn,
    // and most prefixes differ from the path in its first byte: that is
    // known before the path is split.
    if !may_begin(path.strip_prefix(b"/").unwrap_or(path), prefix) {
        return false;
    }
    let path = memchr::memchr(b'?', path).map_or(path, |q| &path[..q]);
    // A segment with nothing left once bare (`%20`, `.%20`, `...`) is an
    // empty one to an origin that trims its path tokens and drops the
    // empty ones (Spring's `tokenizeToStringArray`), or drops trailing
    // dots (IIS): `/tickets/%20/vip` is `/tickets/vip` there.
    let mut segments = path
        .strip_prefix(b"/")
        .unwrap_or(path)
        .split(|&b| b == b'/')
        .filter(|s| !is_empty_once_bare(s));
    let mut wanted = prefix.split(|&b| b == b'/').peekable();
    while let Some(want) = wanted.next() {
        let Some(segment) = segments.next() else {
            return false;
        };
        if !may_begin(segment, want) {
            return false;
        }
        let last = wanted.peek().is_none();
        let same = segment.eq_ignore_ascii_case(want)
            || bare(segment).eq_ignore_ascii_case(bare(want))
            || (last
                && (starts_with_suffix(segment, want) || starts_with_suffix(bare(segment), want)));
        if !same {
            return false;
        }
    }
    true
}

/// Whether the segment at the start of `rest` may match the segment at the
/// start of `want`, judged by their first bytes alone. When `want` begins
/// with a byte its bare name keeps (not `;`, `%` or `.`, and not the end of
/// an empty segment), each way of matching in [`matches_prefix`] starts the
/// segment with that byte, so any other first byte is a miss, except one
/// that may start a segment passed over (empty, or empty once bare: `/`,
/// `%`, `.`, `;`), after which the segment compared comes later.
fn may_begin(rest: &[u8], want: &[u8]) -> bool {
    match want.first() {
        // A segment that starts with an escape may be an encoded space
        // the origin trims: only the whole comparison can tell.
        Some(&w) if !matches!(w, b';' | b'%' | b'.' | b'/') => rest
            .first()
            .is_some_and(|s| matches!(s, b'%' | b'.' | b';' | b'/') || s.eq_ignore_ascii_case(&w)),
        _ => true,
    }
}

/// Whether nothing is left of `segment` once bare (see [`bare`]); only a
/// segment that starts with a byte [`bare`] may take away can be.
fn is_empty_once_bare(segment: &[u8]) -> bool {
    match segment.first() {
        None => true,
        Some(b'%' | b'.' | b';') => bare(segment).is_empty(),
        Some(_) => false,
    }
}

/// `segment` without its `;params` (`;` or `%3B`), its trailing dots and
/// the encoded spaces (`%20`) at either end.
fn bare(segment: &[u8]) -> &[u8] {
    // Parameters can only start at a `;` or a `%`: the other bytes are
    // passed over without a look at what follows them.
    let end = (0..segment.len())
        .find(|&i| matches!(segment[i], b';' | b'%') && param_start(&segment[i..]))
        .unwrap_or(segment.len());
    let mut name = &segment[..end];
    while let Some(rest) = name.strip_prefix(b"%20") {
        name = rest;
    }
    loop {
        if let Some(rest) = name.strip_suffix(b".") {
            name = rest;
        } else if let Some(rest) = name.strip_suffix(b"%20") {
            name = rest;
        } else {
            return name;
        }
    }
}

/// Whether `segment` is `name` followed by a format suffix or parameters.
fn starts_with_suffix(segment: &[u8], name: &[u8]) -> bool {
    match (segment.get(..name.len()), segment.get(name.len()..)) {
        (Some(head), Some(rest)) => {
            head.eq_ignore_ascii_case(name) && (rest.starts_with(b".") || param_start(rest))
        }
        _ => false,
    }
}

/// Whether path parameters start here: `;`, or `%3B` for an origin that
/// decodes first.
fn param_start(rest: &[u8]) -> bool {
    rest.starts_with(b";")
        || rest
            .get(..3)
            .is_some_and(|e| e.eq_ignore_ascii_case(b"%3B"))
}
