//! Turning figment's errors into one line each that an operator can act on:
//! the key as the validation messages write it (`events[0].max_active`),
//! the event's id when the key is inside `[[events]]`, and where the value
//! came from. figment's own text repeats itself through its error chain and
//! names keys with its profile (`default.events.0.max_active`).
//!
//! The line never repeats the value it refuses. Any key can be given the
//! wrong type, a secret's too (`ANTEROOM_KEYS__SECRETS=…` is a string where a
//! list belongs), and this line goes to standard error, which systemd and
//! Kubernetes keep in their logs. The key, the source and the kind of value
//! found are what an operator acts on; the value is in their own file. A
//! TOML syntax error keeps its line, column and reason but not the excerpt
//! of the line it quotes, for the same reason. (A stored document's parse
//! error follows the same rule in `stored::without_values`, from
//! serde_json's text, which has no structured kind to rebuild it from.)

use figment::Figment;
use figment::error::{Actual, Kind};
use serde::Deserialize;

/// Just the ids of `[[events]]`, read leniently so that another bad field
/// of the same event does not hide its name.
#[derive(Deserialize)]
struct IdOnly {
    #[serde(default)]
    id: Option<serde_json::Value>,
}

pub(super) fn describe(err: figment::Error, figment: &Figment) -> String {
    let ids: Vec<Option<String>> = figment
        .extract_inner::<Vec<IdOnly>>("events")
        .map(|events| {
            events
                .into_iter()
                .map(|e| e.id.and_then(|v| v.as_str().map(str::to_owned)))
                .collect()
        })
        .unwrap_or_default();
    let lines: Vec<String> = err.into_iter().map(|e| one(&e, &ids)).collect();
    lines.join("; ")
}

fn one(e: &figment::Error, ids: &[Option<String>]) -> String {
    let key = key(&e.path);
    let event = match e.path.as_slice() {
        [first, index, ..] if first == "events" => index
            .parse::<usize>()
            .ok()
            .and_then(|i| ids.get(i).cloned().flatten())
            .map(|id| format!(" (event {id:?})"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let origin = e
        .metadata
        .as_ref()
        .map(|m| match &m.source {
            Some(source) => format!(" (in {source})"),
            None => format!(" (in {})", m.name),
        })
        .unwrap_or_default();
    let kind = without_values(&e.kind);
    if key.is_empty() {
        format!("{kind}{origin}")
    } else {
        format!("{key}{event}: {kind}{origin}")
    }
}

/// figment's text for `kind`, less the refused value itself.
fn without_values(kind: &Kind) -> String {
    match kind {
        Kind::InvalidType(found, expected) => {
            format!("invalid type: found {}, expected {expected}", what(found))
        }
        Kind::InvalidValue(found, expected) => {
            format!("invalid value: found {}, expected {expected}", what(found))
        }
        Kind::UnknownVariant(_, expected) => {
            format!("unknown variant, expected one of {}", expected.join(", "))
        }
        Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => "integer out of range".into(),
        Kind::Unsupported(found) => format!("unsupported type `{}`", what(found)),
        Kind::UnsupportedKey(found, need) => {
            format!(
                "unsupported type `{}` for key: must be `{need}`",
                what(found)
            )
        }
        Kind::Message(message) => without_excerpt(message),
        // Field names and lengths are the file's shape, not its values.
        other => other.to_string(),
    }
}

/// The kind of a found value, as figment names it, without the value.
fn what(found: &Actual) -> String {
    match found {
        Actual::Bool(_) => "bool".into(),
        Actual::Unsigned(_) => "unsigned int".into(),
        Actual::Signed(_) => "signed int".into(),
        Actual::Float(_) => "float".into(),
        Actual::Char(_) => "char".into(),
        Actual::Str(_) => "string".into(),
        Actual::Bytes(_) => "bytes".into(),
        Actual::Other(_) => "value".into(),
        shape => shape.to_string(),
    }
}

/// A TOML parse error quotes the offending line between `|` gutters:
/// keep every other line (the position and the reason).
fn without_excerpt(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| {
            !line.is_empty()
                && !line.starts_with('|')
                && !line
                    .split_once('|')
                    .is_some_and(|(gutter, _)| gutter.trim().chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    kept.join(": ")
}

/// `["events", "0", "max_active"]` as `events[0].max_active`.
fn key(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        if segment.parse::<usize>().is_ok() {
            out.push('[');
            out.push_str(segment);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}
