#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::{NormalizeError, is_already_normal, normalize_in_full, normalize_path};

#[track_caller]
fn check(raw: &str, expected: &str) {
    assert_eq!(
        normalize_path(raw).as_deref(),
        Ok(expected),
        "input: {raw:?}"
    );
}

#[track_caller]
fn refuse(raw: &str, expected: NormalizeError) {
    assert_eq!(normalize_path(raw), Err(expected), "input: {raw:?}");
}

#[test]
fn canonical_paths_are_unchanged() {
    check("/", "/");
    check("/tickets", "/tickets");
    check("/tickets/", "/tickets/");
    check("/Tickets/2026", "/Tickets/2026");
    check("/a;b=c/d", "/a;b=c/d");
    check("/caf%C3%A9", "/caf%C3%A9");
    // Latin-1 letters that lead overlong forms are kept alone (`à`, `ð`,
    // `ø`, `ÿ`), as every other escape is.
    check("/voil%E0", "/voil%E0");
    check("/m%FCnchen/%F0/%f8x/%FF", "/m%FCnchen/%F0/%F8x/%FF");
    // Three- and four-byte characters past the overlong range are kept.
    check("/%e0%a4%95", "/%E0%A4%95");
    check("/%F0%9F%8E%AB", "/%F0%9F%8E%AB");
}

#[test]
fn unreserved_escapes_are_decoded_others_uppercased() {
    check("/%74ickets", "/tickets");
    check("/%54%49%43%4b%45%54%53", "/TICKETS");
    check("/a%2db%5fc%7ed", "/a-b_c~d");
    check("/caf%c3%a9", "/caf%C3%A9");
    check("/a%20b", "/a%20b");
    check("/50%25", "/50%25");
    check("/50%25off", "/50%25off");
    check("/50%25%20", "/50%25%20");
    check("/a%3fb", "/a%3Fb");
}

#[test]
fn dot_segments_and_slashes_are_resolved() {
    check("", "/");
    check("tickets", "/tickets");
    check("//tickets", "/tickets");
    check("/a//b///c", "/a/b/c");
    check("/a/../tickets", "/tickets");
    check("/a/./tickets", "/a/tickets");
    check("/../../tickets", "/tickets");
    check("/a/%2e%2e/tickets", "/tickets");
    check("/a/.%2E/tickets", "/tickets");
    check("/a/%2e/b", "/a/b");
    check("/a/b/..", "/a/");
    check("/a/b/.", "/a/b/");
    check("/..", "/");
    check("/...", "/...");
    check("/.well-known/x", "/.well-known/x");
    check("/;jsessionid=1/tickets", "/tickets");
    check("/%3B/tickets", "/tickets");
    check("/tickets/;x", "/tickets/");
    check("/;x", "/");
}

#[test]
fn query_is_kept_verbatim() {
    check("/a/../tickets?x=/../%2F&y", "/tickets?x=/../%2F&y");
    check("?q", "/?q");
}

#[test]
fn tricks_are_refused() {
    refuse("/tickets%00", NormalizeError::Nul);
    refuse("/tickets\0", NormalizeError::Nul);
    refuse("/a%2Ftickets", NormalizeError::EncodedSlash);
    refuse("/a%2ftickets", NormalizeError::EncodedSlash);
    refuse("/a\\..\\tickets", NormalizeError::Backslash);
    refuse("/a%5c..%5Ctickets", NormalizeError::Backslash);
    refuse("/a\r\nX: y", NormalizeError::ControlChar);
    refuse("/a%", NormalizeError::BadEscape);
    refuse("/a%4", NormalizeError::BadEscape);
    refuse("/a%zz", NormalizeError::BadEscape);
    refuse("/a%C0%AE%C0%AE/tickets", NormalizeError::BadEscape);
    refuse("/x/%E0%80%AE%E0%80%AE/tickets", NormalizeError::BadEscape);
    refuse("/x/%F0%80%80%AE/tickets", NormalizeError::BadEscape);
    refuse("/x/%e0%9f%bf", NormalizeError::BadEscape);
    refuse("/x/%F8%80%80%80%AE", NormalizeError::BadEscape);
    refuse("/x/%FC%80%80%80%80%AE", NormalizeError::BadEscape);
    // To a decoder that checks no continuation bits either.
    refuse("/public/..%C0o..%C0otickets", NormalizeError::BadEscape);
    refuse("/x/%C1%DC", NormalizeError::BadEscape);
    refuse("/x/%E0@n", NormalizeError::BadEscape);
    refuse("/x/%E0%40%6E", NormalizeError::BadEscape);
    refuse("/x/%F0@@n", NormalizeError::BadEscape);
    refuse("/public/..;/tickets", NormalizeError::DotSegmentParam);
    refuse("/public/.;x/tickets", NormalizeError::DotSegmentParam);
    refuse("/public/%2e%2e;/tickets", NormalizeError::DotSegmentParam);
    refuse("/public/..%3b/tickets", NormalizeError::DotSegmentParam);
    refuse(
        "/public/%2E%2E%3Bx/tickets",
        NormalizeError::DotSegmentParam,
    );
    refuse("/%252e%252e/x", NormalizeError::DoubleEncoded);
    refuse("/tickets%252ejson", NormalizeError::DoubleEncoded);
    refuse("/%2574ickets", NormalizeError::DoubleEncoded);
    refuse("/a%252Fb", NormalizeError::DoubleEncoded);
    refuse("/a%25%41%42", NormalizeError::DoubleEncoded);
}

#[test]
fn errors_map_to_bad_request() {
    assert_eq!(NormalizeError::EncodedSlash.code(), "bad_request");
    assert_eq!(
        NormalizeError::EncodedSlash.to_string(),
        "the path contains an encoded slash (%2F)"
    );
}

/// Path-like input: mostly the characters that matter to normalisation.
fn pathish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("/".to_owned()),
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just(";".to_owned()),
            Just("?".to_owned()),
            "%[0-9a-fA-F]{2}",
            "%2[eE]",
            "[a-zA-Z0-9~_-]{1,3}",
            any::<char>().prop_map(String::from),
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

fn assert_canonical(raw: &str) {
    if let Ok(once) = normalize_path(raw) {
        assert!(once.starts_with('/'), "{raw:?} -> {once:?}");
        assert_eq!(normalize_path(&once).as_ref(), Ok(&once), "{raw:?}");
        let path = once.split('?').next().unwrap_or_default();
        assert!(!path.contains("//"), "{raw:?} -> {once:?}");
        assert!(
            path.split('/').all(|s| s != "." && s != ".."),
            "{raw:?} -> {once:?}"
        );
    }
}

proptest! {
    #[test]
    fn arbitrary_strings_never_panic_and_normalise_once(raw in any::<String>()) {
        assert_canonical(&raw);
    }

    #[test]
    fn pathlike_strings_normalise_once(raw in pathish()) {
        assert_canonical(&raw);
    }
}

proptest! {
    /// The one-pass test for an already normal path never disagrees with
    /// the full normalisation: what it lets through comes back unchanged.
    #[test]
    fn a_path_taken_as_normal_is_one(
        pieces in proptest::collection::vec(proptest::sample::select(vec![
            "/", "/", "a", "B", "9", ".", "..", "%2e", "%2F", "%25", "%41", "41", ";", "?",
            "\\", "~", "!", "@", ":", "'", "%", "\u{7f}", "\t", "\u{e9}", "..;", "=",
        ]), 0..10),
    ) {
        let raw: String = pieces.concat();
        if is_already_normal(&raw) {
            prop_assert_eq!(normalize_in_full(&raw), Ok(raw.clone()));
        }
        prop_assert_eq!(normalize_path(&raw), normalize_in_full(&raw));
    }
}

#[test]
fn common_paths_are_taken_as_normal() {
    for raw in [
        "/",
        "/shop/",
        "/tickets/row/1",
        "/a-b_c.d~e/f?x=1&y=%2F",
        "/x?",
    ] {
        assert!(is_already_normal(raw), "{raw}");
    }
    for raw in [
        "", "shop", "//x", "/a/./b", "/a/..", "/a/.", "/%41", "/a;b", "/x?\u{7}",
    ] {
        assert!(!is_already_normal(raw), "{raw}");
    }
}
