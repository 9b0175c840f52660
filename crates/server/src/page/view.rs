//! Turns a [`PageContext`] into what the template shows: finished sentences,
//! formatted numbers, the progress value and the no-JavaScript continue form.
//!
//! The template stays free of logic so an operator's override only arranges
//! markup; the rules (what each status says) live here and in the script.

use serde::Serialize;
use serde_json::Value;

use super::messages::{Messages, for_lang};
use super::{Lang, PageContext};

/// What one render shows.
#[derive(Debug, Serialize)]
pub struct View {
    pub event_id: String,
    /// The event's name, or its id when it has none.
    pub event_label: String,
    pub return_path: String,
    /// The QueuePosition status, or `None` before the visitor has joined.
    pub status: Option<String>,
    pub headline: String,
    pub detail: Option<String>,
    pub eta: Option<String>,
    pub notice: Option<String>,
    /// Percent of the line behind the visitor; `None` draws an indeterminate bar.
    pub progress: Option<u32>,
    /// Time left before the queue opens, `NOT_OPEN` only.
    pub countdown: Option<String>,
    /// The admission token for the no-JavaScript continue form (`ADMITTED`).
    pub token: Option<String>,
    /// A plain link to the return path once the visitor holds a pass (`ACTIVE`).
    pub active: bool,
    /// Whether `<noscript>` should refresh the page: not once the wait is over.
    pub refresh: bool,
    #[serde(skip)]
    lang: Lang,
    #[serde(skip)]
    position: Option<Value>,
}

impl View {
    pub fn build(ctx: &PageContext) -> Self {
        let t = for_lang(ctx.lang);
        let pos = ctx.position.as_ref();
        let field = |name: &str| pos.and_then(|p| p.get(name));
        let int = |name: &str| field(name).and_then(Value::as_u64);
        let status = field("status").and_then(Value::as_str).map(str::to_owned);
        let rank = int("rank");
        let length = int("queueLength");
        let wait = int("estimatedWaitSeconds");
        let display = field("display").and_then(Value::as_str);
        let token = field("token").and_then(Value::as_str).map(str::to_owned);

        let mut view = Self {
            event_id: ctx.event_id.clone(),
            event_label: ctx
                .event_name
                .clone()
                .unwrap_or_else(|| ctx.event_id.clone()),
            return_path: safe_return_path(&ctx.return_path).to_owned(),
            status: status.clone(),
            headline: t.joining.to_owned(),
            detail: None,
            eta: None,
            notice: None,
            progress: None,
            countdown: None,
            token: None,
            active: false,
            refresh: true,
            lang: ctx.lang,
            position: ctx.position.clone(),
        };
        match status.as_deref() {
            Some("WAITING" | "PAUSED") => {
                view.headline = position_sentence(t, ctx.lang, rank);
                view.detail =
                    length.map(|n| t.queue_length.replace("{count}", &group(n, ctx.lang)));
                view.eta = Some(eta_sentence(t, rank, wait, display));
                view.progress = progress(rank, length);
                if status.as_deref() == Some("PAUSED") {
                    view.notice = Some(t.paused.to_owned());
                }
            }
            Some("NOT_OPEN") => {
                view.headline = t.not_open.to_owned();
                view.countdown = wait.map(|s| t.countdown.replace("{time}", &duration(s)));
            }
            Some("ADMITTED") if token.is_some() => {
                view.headline = t.admitted.to_owned();
                view.progress = Some(100);
                view.token = token;
                view.refresh = false;
            }
            Some("ACTIVE") => {
                view.headline = t.active.to_owned();
                view.progress = Some(100);
                view.active = true;
                view.refresh = false;
            }
            Some("CLOSED") => {
                view.headline = t.closed.to_owned();
                view.refresh = false;
            }
            Some("DRAINING") => view.headline = t.draining.to_owned(),
            _ => {}
        }
        view
    }

    /// The script's configuration as JSON that is safe inside
    /// `<script type="application/json">`: `<`, `>` and `&` are escaped so no
    /// value (a hostile event name or return path) can close the element, and
    /// U+2028/2029 so older parsers treat it as one line.
    pub fn script_config_json(&self) -> String {
        let config = serde_json::json!({
            "eventId": self.event_id,
            "returnPath": self.return_path,
            "lang": super::lang::code(self.lang),
            "messages": for_lang(self.lang),
            "position": self.position,
            "api": "/api/queue",
            "worker": "/_anteroom/pow-worker.js",
        });
        let mut out = String::new();
        for c in config.to_string().chars() {
            match c {
                '<' => out.push_str("\\u003c"),
                '>' => out.push_str("\\u003e"),
                '&' => out.push_str("\\u0026"),
                '\u{2028}' => out.push_str("\\u2028"),
                '\u{2029}' => out.push_str("\\u2029"),
                c => out.push(c),
            }
        }
        out
    }
}

/// A local absolute path, or `/`. Rejects `//host` and `/\host` (both are
/// network paths to browsers), absolute URLs and control characters, so a
/// crafted `?return=` cannot send an admitted visitor to another site.
pub fn safe_return_path(path: &str) -> &str {
    let bytes = path.as_bytes();
    let local = bytes.first() == Some(&b'/')
        && !matches!(bytes.get(1), Some(b'/' | b'\\'))
        && !path.chars().any(char::is_control)
        && path.len() <= 2048;
    if local { path } else { "/" }
}

fn position_sentence(t: &Messages, lang: Lang, rank: Option<u64>) -> String {
    match rank {
        Some(0) => t.next.to_owned(),
        Some(rank) => t.position.replace("{position}", &group(rank + 1, lang)),
        None => t.joining.to_owned(),
    }
}

fn eta_sentence(
    t: &Messages,
    rank: Option<u64>,
    wait: Option<u64>,
    display: Option<&str>,
) -> String {
    // "Almost there" under a minute, as the ETA's own `display` says; checking
    // here too keeps the page right if `display` is missing.
    if rank == Some(0) || wait.is_some_and(|w| w < 60) {
        return t.almost_there.to_owned();
    }
    match display {
        Some(display) => t.eta.replace("{display}", display),
        None => t.eta_unknown.to_owned(),
    }
}

/// Share of the line behind the visitor, in percent: it grows as the front is
/// admitted and never needs the visitor's starting rank (which a no-JavaScript
/// refresh would not remember).
pub fn progress(rank: Option<u64>, length: Option<u64>) -> Option<u32> {
    let (rank, length) = (rank?, length?);
    if length == 0 {
        return Some(100);
    }
    let behind = length.saturating_sub(rank.min(length));
    u32::try_from(behind.saturating_mul(100) / length).ok()
}

/// Thousands grouping as `Intl.NumberFormat` does it, so the server render and
/// the script's updates look identical: `1,234` in English, `1 234` (narrow
/// no-break space) in French.
pub fn group(n: u64, lang: Lang) -> String {
    let sep = match lang {
        Lang::En => ",",
        Lang::Fr => "\u{202f}",
    };
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 * sep.len());
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push_str(sep);
        }
        out.push(c);
    }
    out
}

/// `1 h 02 min`, `2 min 05 s`, `45 s`: the countdown format, shared with the script.
pub fn duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if h > 0 {
        format!("{h} h {m:02} min")
    } else if m > 0 {
        format!("{m} min {s:02} s")
    } else {
        format!("{s} s")
    }
}

/// A representative context for the trial render of an operator's template.
pub fn sample_context(event: &str) -> PageContext {
    PageContext {
        event_id: event.to_owned(),
        event_name: None,
        return_path: "/".to_owned(),
        lang: Lang::En,
        position: Some(serde_json::json!({
            "eventId": event, "status": "WAITING", "rank": 9, "position": 10,
            "queueLength": 100, "estimatedWaitSeconds": 120, "display": "about 2 minutes",
            "pollAfterMs": 3000, "token": null, "redirect": null,
        })),
        nonce: "sample".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping() {
        assert_eq!(group(0, Lang::En), "0");
        assert_eq!(group(999, Lang::En), "999");
        assert_eq!(group(1234, Lang::En), "1,234");
        assert_eq!(group(1_234_567, Lang::Fr), "1\u{202f}234\u{202f}567");
    }

    #[test]
    fn return_paths() {
        for (input, want) in [
            ("/shop?x=1", "/shop?x=1"),
            ("", "/"),
            ("//evil.example/", "/"),
            ("/\\evil.example/", "/"),
            ("https://evil.example/", "/"),
            ("javascript:alert(1)", "/"),
            ("/a\nb", "/"),
        ] {
            assert_eq!(safe_return_path(input), want, "{input:?}");
        }
    }

    #[test]
    fn progress_and_duration() {
        assert_eq!(progress(Some(0), Some(10)), Some(100));
        assert_eq!(progress(Some(9), Some(10)), Some(10));
        assert_eq!(progress(Some(50), Some(10)), Some(0));
        assert_eq!(progress(None, Some(10)), None);
        assert_eq!(duration(45), "45 s");
        assert_eq!(duration(125), "2 min 05 s");
        assert_eq!(duration(3720), "1 h 02 min");
    }
}
