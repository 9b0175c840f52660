//! Path normalisation for the gate: one canonical spelling of a request path,
//! so that route matching cannot be bypassed by encoding tricks.
//!
//! The gate matches protected prefixes against the *normalised* path, while
//! the origin receives whatever the client sent. Everything an origin might
//! decode into a different path than ours is therefore either canonicalised
//! here (unreserved escapes, dot segments, repeated slashes) or refused
//! (encoded slashes, backslashes, NUL, `..;` and `..%3B` segments, malformed escapes,
//! double-encoded escapes).
//!
//! Lower-casing is not done here: routes compare ASCII case-insensitively.

use thiserror::Error;

#[cfg(test)]
mod tests;

/// Why a path was refused. Every variant is a client error: the caller
/// answers `400` JSON with [`NormalizeError::code`] and the `Display` text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum NormalizeError {
    #[error("the path contains a NUL byte")]
    Nul,
    #[error("the path contains an encoded slash (%2F)")]
    EncodedSlash,
    #[error("the path contains a backslash")]
    Backslash,
    #[error("the path contains a control character")]
    ControlChar,
    #[error("the path contains a malformed percent-escape")]
    BadEscape,
    #[error("the path contains a dot segment with parameters")]
    DotSegmentParam,
    #[error("the path contains a double-encoded escape (%25 followed by hex digits)")]
    DoubleEncoded,
    /// A configured prefix whose every segment is empty once trimmed
    /// (`/%20`, `/...`): it would protect every path, not what it says.
    #[error("the prefix has no segment left once trimmed (each is only dots or %20)")]
    EmptyPrefix,
}

impl NormalizeError {
    /// The stable `error` code of the JSON answer.
    pub const fn code(self) -> &'static str {
        "bad_request"
    }
}

/// Normalises a request path (optionally followed by `?query`).
///
/// - `%XX` escapes of unreserved characters (`A-Z a-z 0-9 - . _ ~`) are
///   decoded; every other escape is kept, with its hex digits uppercased;
/// - dot segments (`.`, `..`, also as `%2e`) are resolved, never above `/`;
/// - repeated `/` are collapsed, and so are segments of parameters only
///   (`/;x`); a trailing `/` is kept;
/// - the query, if any, is kept verbatim (it plays no part in routing).
///
/// The result always starts with `/`, and normalising it again changes
/// nothing.
pub fn normalize_path(raw: &str) -> Result<String, NormalizeError> {
    normalized(raw).map(std::borrow::Cow::into_owned)
}

/// [`normalize_path`], borrowing `raw` when it is already normal: the
/// gate classifies every request by its normal path, and nearly every
/// path a crowd asks for is one, so it is not copied for the lookup.
pub fn normalized(raw: &str) -> Result<std::borrow::Cow<'_, str>, NormalizeError> {
    if is_already_normal(raw) {
        return Ok(std::borrow::Cow::Borrowed(raw));
    }
    normalize_in_full(raw).map(std::borrow::Cow::Owned)
}

/// Whether normalising `raw` would give it back unchanged, told in one pass
/// over its bytes: a path that starts with `/` and holds only unreserved
/// characters, sub-delimiters other than `;`, `:`, `@` and single slashes,
/// with no dot segment, and a query without control characters. Nearly
/// every request of a crowd is such a path, and it then skips the decode
/// and the segment stack. Held to [`normalize_in_full`] by a proptest.
fn is_already_normal(raw: &str) -> bool {
    let (path, query) = raw.split_at(raw.find('?').unwrap_or(raw.len()));
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') || query.bytes().any(|b| b.is_ascii_control()) {
        return false;
    }
    // Where the segment being read began (just past its `/`).
    let mut start = 1;
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        match b {
            b'/' => {
                let segment = &bytes[start..i];
                if segment.is_empty() || segment == b"." || segment == b".." {
                    return false;
                }
                start = i + 1;
            }
            b'a'..=b'z'
            | b'A'..=b'Z'
            | b'0'..=b'9'
            | b'-'
            | b'.'
            | b'_'
            | b'~'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b'='
            | b':'
            | b'@' => {}
            _ => return false,
        }
    }
    let last = &bytes[start.min(bytes.len())..];
    last != b"." && last != b".."
}

/// [`normalize_path`] step by step.
fn normalize_in_full(raw: &str) -> Result<String, NormalizeError> {
    if let Some(bad) = raw.chars().find(|c| c.is_ascii_control()) {
        return Err(if bad == '\0' {
            NormalizeError::Nul
        } else {
            NormalizeError::ControlChar
        });
    }
    let (path, query) = match raw.find('?') {
        Some(i) => raw.split_at(i),
        None => (raw, ""),
    };
    let decoded = decode_unreserved(path)?;
    if is_double_encoded(&decoded) {
        return Err(NormalizeError::DoubleEncoded);
    }
    let mut out = resolve_segments(&decoded)?;
    out.push_str(query);
    Ok(out)
}

/// Whether a decoded byte is an RFC 3986 unreserved character.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Decodes unreserved escapes and uppercases the others. Decoding never
/// produces a `%`, so a second pass finds exactly the escapes the first kept:
/// that is what makes normalisation idempotent (no double decoding).
fn decode_unreserved(path: &str) -> Result<String, NormalizeError> {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(i) = rest.find(['%', '\\']) {
        out.push_str(&rest[..i]);
        let bytes = rest.as_bytes();
        if bytes[i] == b'\\' {
            return Err(NormalizeError::Backslash);
        }
        let (hi, lo) = match (bytes.get(i + 1), bytes.get(i + 2)) {
            (Some(&h), Some(&l)) => (h, l),
            _ => return Err(NormalizeError::BadEscape),
        };
        let value = match (hex_value(hi), hex_value(lo)) {
            (Some(h), Some(l)) => h << 4 | l,
            _ => return Err(NormalizeError::BadEscape),
        };
        match value {
            0 => return Err(NormalizeError::Nul),
            // An origin may strip an encoded tab or line break from a
            // segment (Spring's `trimTokens`), or a log read it as a new
            // line: refused encoded as raw.
            1..=0x1F | 0x7F => return Err(NormalizeError::ControlChar),
            b'/' => return Err(NormalizeError::EncodedSlash),
            b'\\' => return Err(NormalizeError::Backslash),
            // C0 and C1 never start valid UTF-8; a decoder that accepts
            // overlong forms reads them, with the next byte's low six bits,
            // as an ASCII character (`%C0%AE` is '.', `%C0o` is '/' to one
            // that does not check continuation bits either).
            0xC0 | 0xC1 => return Err(NormalizeError::BadEscape),
            // The longer leads make ASCII the same way when the next byte,
            // escaped or not, is an overlong continuation (`%E0%80%AE`,
            // `%F0%80%80%AE`, `%F8%80%80%80%AE`) or has low bits that
            // leave the value that small (`%E0@n` is '.'). Otherwise they
            // are Latin-1 letters (`%E0` is `à`), kept like any other
            // escape.
            0xE0 | 0xF0 | 0xF8..=0xFD if is_overlong(value, next_byte(rest, i + 3)) => {
                return Err(NormalizeError::BadEscape);
            }
            v if is_unreserved(v) => out.push(char::from(v)),
            _ => {
                out.push('%');
                out.push(char::from(hi.to_ascii_uppercase()));
                out.push(char::from(lo.to_ascii_uppercase()));
            }
        }
        // The three bytes are ASCII, so `i + 3` is a char boundary.
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The byte at `at` in `rest`, escaped (`%XX`) or not, if there is one.
fn next_byte(rest: &str, at: usize) -> Option<u8> {
    match rest.as_bytes().get(at..)? {
        [b'%', h, l, ..] => Some(hex_value(*h)? << 4 | hex_value(*l)?),
        [b, ..] => Some(*b),
        [] => None,
    }
}

/// Whether `lead` followed by `next` starts a character that a lenient
/// decoder reads as ASCII: a continuation byte in the overlong range (E0
/// below A0, F0 below 90, the five- and six-byte leads with any), or any
/// byte whose low six bits leave the value below 0x80 when its
/// continuation bits go unchecked (0 or 1 after E0, 0 after the longer
/// leads, whose further bytes must then be 0 too).
fn is_overlong(lead: u8, next: Option<u8>) -> bool {
    let Some(next) = next else {
        return false;
    };
    let low = next & 0x3F;
    let strict = (0x80..=0xBF).contains(&next)
        && match lead {
            0xE0 => next < 0xA0,
            0xF0 => next < 0x90,
            _ => true,
        };
    strict || if lead == 0xE0 { low <= 1 } else { low == 0 }
}

/// Whether a decoded path holds `%25` followed by two hex digits. An origin
/// (or a framework behind it) that decodes twice reads `%252e` as `.` and
/// `%2574` as `t`: a different path than the one matched here. A literal `%`
/// followed by two hex digits has no other use in a path, so the ambiguity
/// is refused. Checked after decoding (`%25%41%42` is `%25AB`), so a path
/// that passes once passes again.
fn is_double_encoded(decoded: &str) -> bool {
    decoded.match_indices("%25").any(|(i, _)| {
        let hex = |at: usize| decoded.as_bytes().get(at).copied().and_then(hex_value);
        hex(i + 3).is_some() && hex(i + 4).is_some()
    })
}

/// Resolves dot segments and collapses empty ones (RFC 3986 5.2.4, with
/// `..` stopping at the root).
fn resolve_segments(path: &str) -> Result<String, NormalizeError> {
    let mut stack: Vec<&str> = Vec::new();
    // A path ending in `/`, `/.` or `/..` names a directory: keep the slash.
    let mut trailing_slash = false;
    for segment in path.split('/') {
        trailing_slash = true;
        match segment {
            "" | "." => {}
            ".." => {
                stack.pop();
            }
            _ => {
                // Servlet containers drop `;params` before resolving dots, so
                // `/public/..;/tickets` would reach `/tickets` there while we
                // saw `/public/..;/tickets`: refuse the ambiguity.
                // `%3B` too: an origin may decode before it strips them.
                let bare = segment.split(';').next().unwrap_or(segment);
                let bare = bare.split("%3B").next().unwrap_or(bare);
                if bare == "." || bare == ".." {
                    return Err(NormalizeError::DotSegmentParam);
                }
                // A segment of parameters only (`/;jsessionid=x/tickets`)
                // is an empty segment there, so it is one here.
                if bare.is_empty() {
                    continue;
                }
                stack.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len() + 1);
    for segment in &stack {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    Ok(out)
}
