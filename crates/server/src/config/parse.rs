//! Turning figment's errors into one line each that an operator can act on:
//! the key as the validation messages write it (`events[0].max_active`),
//! the event's id when the key is inside `[[events]]`, and where the value
//! came from. figment's own text repeats itself through its error chain and
//! names keys with its profile (`default.events.0.max_active`).

use figment::Figment;
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
    if key.is_empty() {
        format!("{}{origin}", e.kind)
    } else {
        format!("{key}{event}: {}{origin}", e.kind)
    }
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
