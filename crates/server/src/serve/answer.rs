//! A hot route's answer: a response, and for a proxied one the origin's
//! fields passed through as lines of text.
//!
//! Putting a proxied page's answer fields in a `HeaderMap` (each name
//! looked up among the standard ones, each value checked byte by byte, each
//! pair hashed in) costs more than parsing the head does, only for
//! the door to write them back out as text. So the lean origin client keeps
//! a plain answer's fields as the lines the door writes ([`PassedFields`]),
//! and the map holds only what Anteroom adds (a renewed pass's
//! `Set-Cookie`, HSTS). The door writes the lines, then the map; everything
//! else that serves a hot answer (hyper, for HTTP/2 and for what the door
//! declines) takes it as one response ([`Answer::into_response`]).

use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue};

/// What a hot route answers.
pub struct Answer {
    pub response: Response,
    /// Fields that come before the response's own, as lines.
    pub passed: Option<PassedFields>,
}

impl From<Response> for Answer {
    fn from(response: Response) -> Self {
        Self {
            response,
            passed: None,
        }
    }
}

impl Answer {
    /// The answer with `lease` held until its body is sent (or dropped):
    /// the origin connection behind the body is the client connection's
    /// until then.
    pub fn holding(self, lease: super::connections::OriginLease) -> Self {
        use http_body_util::BodyExt as _;
        Self {
            response: self.response.map(|body| {
                axum::body::Body::new(body.map_frame(move |frame| {
                    let _lease = &lease;
                    frame
                }))
            }),
            passed: self.passed,
        }
    }

    /// One response: the passed fields put in its map, ahead of the fields
    /// it had (the order the door writes them in).
    pub fn into_response(self) -> Response {
        let Self {
            mut response,
            passed,
        } = self;
        if let Some(passed) = passed {
            let own = std::mem::take(response.headers_mut());
            let mut headers = passed.into_map(own.len());
            // A `None` name is the previous field's again.
            let mut last: Option<HeaderName> = None;
            for (name, value) in own {
                if name.is_some() {
                    last = name;
                }
                if let Some(name) = &last {
                    headers.append(name.clone(), value);
                }
            }
            *response.headers_mut() = headers;
        }
        response
    }
}

/// An answer's fields as `name: value\r\n` lines, with what the head's end
/// needs to know of them noted as they were added.
///
/// Only the lean origin client makes them, from fields its parser took
/// (names are tokens, values hold no CR or LF), and only for an answer
/// framed by one `Content-Length`.
#[derive(Debug)]
pub struct PassedFields {
    lines: Vec<u8>,
    length: u64,
    date: bool,
    hsts: bool,
}

impl PassedFields {
    /// No fields yet, framed by `length`; `bytes` is room for the lines.
    pub fn new(length: u64, bytes: usize) -> Self {
        Self {
            lines: Vec::with_capacity(bytes),
            length,
            date: false,
            hsts: false,
        }
    }

    /// Adds one field, as the origin's parser took it.
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        if name.eq_ignore_ascii_case(b"date") {
            self.date = true;
        } else if name.eq_ignore_ascii_case(b"strict-transport-security") {
            self.hsts = true;
        }
        self.lines.extend_from_slice(name);
        self.lines.extend_from_slice(b": ");
        self.lines.extend_from_slice(value);
        self.lines.extend_from_slice(b"\r\n");
    }

    /// The lines, each ending in CRLF.
    pub fn lines(&self) -> &[u8] {
        &self.lines
    }

    /// The answer's `Content-Length` (one of the lines).
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Whether one of the lines is `Date`.
    pub fn has_date(&self) -> bool {
        self.date
    }

    /// Whether one of the lines is `Strict-Transport-Security`.
    pub fn has_hsts(&self) -> bool {
        self.hsts
    }

    /// The fields in a map with room for `more`. A line `http` would refuse
    /// cannot be here (see the type's documentation); one would be left
    /// out rather than fail the answer.
    fn into_map(self, more: usize) -> HeaderMap {
        let lines = bytes::Bytes::from(self.lines);
        let mut map = HeaderMap::with_capacity(more + 8);
        let mut at = 0;
        while let Some(end) = find(&lines[at..], b"\r\n") {
            let line = lines.slice(at..at + end);
            at += end + 2;
            let Some(colon) = find(&line, b": ") else {
                continue;
            };
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(&line[..colon]),
                HeaderValue::from_maybe_shared(line.slice(colon + 2..)),
            ) else {
                continue;
            };
            map.append(name, value);
        }
        map
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
