//! Turns a [`PageContext`] into what the template shows: finished sentences,
//! formatted numbers, the progress value and the no-JavaScript continue form.
//!
//! The template stays free of logic so an operator's override only arranges
//! markup; the rules (what each status says) live here and in the script.

use serde::Serialize;
use serde_json::Value;

use super::messages::{Messages, for_lang};
use super::{Lang, PageContext, Refusal};

/// What one render shows.
#[derive(Debug, Serialize)]
pub struct View {
    pub event_id: String,
    /// The event's name, or its id when it has none.
    pub event_label: String,
    pub return_path: String,
    /// The QueuePosition status, or `None` before the visitor has joined.
    pub status: Option<String>,
    /// What the status region's `data-status` says: the status, or
    /// `BLOCKED` for a refused browser (as the script marks it).
    pub state: String,
    /// The page's `<h1>`: fits the state (nobody is told "you are in line"
    /// before they are).
    pub heading: String,
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
    /// Where a browser without JavaScript is sent by itself once admitted:
    /// the redeem path, which spends the token at once (`ADMITTED`).
    pub redeem_url: Option<String>,
    /// A plain link to the return path once the visitor holds a pass (`ACTIVE`).
    pub active: bool,
    /// Whether `<noscript>` should refresh the page: not once the wait is
    /// over, nor when a refresh cannot change anything (a refused browser, a
    /// check that needs JavaScript).
    pub refresh: bool,
    /// Seconds until that refresh: 10, or less when the pre-window opens
    /// sooner so the refresh lands inside it (and joins the visitor there).
    pub refresh_seconds: u64,
    /// Whether the "keep this page open" hint is true in this state.
    pub hint: bool,
    /// A browser check was asked for: without JavaScript it cannot be done,
    /// and the page says so (in `<noscript>`) instead of "joining" forever.
    pub needs_script: bool,
    #[serde(skip)]
    lang: Lang,
    #[serde(skip)]
    position: Option<Value>,
}

/// The refresh period of the no-JavaScript page, in seconds.
pub const REFRESH_SECONDS: u64 = 10;

/// A page open before the pre-window joins at a random moment within this
/// many milliseconds of its start (or a quarter of the pre-window, if that
/// is shorter), so thousands of open pages do not join in one instant. Every
/// pre-window arrival gets a shuffled place, so the spread costs nobody a
/// place. The script uses the same bound (`PRE_WINDOW_SPREAD_MS`).
pub const PRE_WINDOW_SPREAD_MS: u64 = 5_000;

impl View {
    pub fn build(ctx: &PageContext) -> Self {
        let t = for_lang(ctx.lang);
        let pos = ctx.position.as_ref();
        let field = |name: &str| pos.and_then(|p| p.get(name));
        let int = |name: &str| field(name).and_then(Value::as_u64);
        let text = |name: &str| field(name).and_then(Value::as_str);
        let status = text("status").map(str::to_owned);
        let rank = int("rank");
        let length = int("queueLength");
        let wait = int("estimatedWaitSeconds");
        let display = text("display");
        let token = text("token").map(str::to_owned);

        let mut view = Self {
            event_id: ctx.event_id.clone(),
            event_label: ctx
                .event_name
                .clone()
                .unwrap_or_else(|| ctx.event_id.clone()),
            return_path: safe_return_path(&ctx.return_path).to_owned(),
            status: status.clone(),
            state: status.clone().unwrap_or_default(),
            heading: t.heading_outside.to_owned(),
            headline: t.joining.to_owned(),
            detail: None,
            eta: None,
            notice: None,
            progress: None,
            countdown: None,
            token: None,
            redeem_url: None,
            active: false,
            refresh: true,
            refresh_seconds: REFRESH_SECONDS,
            hint: true,
            needs_script: false,
            lang: ctx.lang,
            position: ctx.position.clone(),
        };
        match status.as_deref() {
            Some(s @ ("WAITING" | "PAUSED")) => {
                let paused = s == "PAUSED";
                view.heading = t.heading.to_owned();
                view.headline = position_sentence(t, ctx.lang, rank);
                view.detail = length.map(|n| queue_length(t, n, ctx.lang));
                view.progress = progress(rank, length);
                if paused {
                    // Nobody moves while paused: no "almost there", and the
                    // bar stops short of full (full means it is your turn).
                    view.eta = Some(t.eta_paused.to_owned());
                    view.notice = Some(t.paused.to_owned());
                    view.progress = view.progress.map(|p| p.min(PAUSED_PROGRESS_MAX));
                } else {
                    view.eta = Some(eta_sentence(t, rank, wait, display));
                }
            }
            Some("NOT_OPEN") => {
                view.heading = t.heading_not_open.to_owned();
                view.headline = t.not_open.to_owned();
                // As the script counts: to `opensAt` on the server's clock.
                let left = seconds_between(text("timestamp"), text("opensAt")).or(wait);
                view.countdown = left.map(|s| t.countdown.replace("{time}", &duration(s)));
                view.refresh_seconds = refresh_before_pre_window(
                    text("timestamp"),
                    text("preWindowStartsAt"),
                    text("opensAt"),
                    ctx.jitter,
                );
            }
            Some("ADMITTED") if token.is_some() => {
                view.heading = t.heading_admitted.to_owned();
                view.headline = t.admitted.to_owned();
                view.progress = Some(100);
                view.redeem_url = text("redirect")
                    .filter(|r| r.starts_with("/api/queue/redeem?"))
                    .map(str::to_owned);
                view.token = token;
                view.refresh = false;
            }
            Some("ACTIVE") => {
                view.heading = t.heading_active.to_owned();
                view.headline = t.active.to_owned();
                view.progress = Some(100);
                view.active = true;
                view.refresh = false;
                view.hint = false;
            }
            Some("CLOSED") => {
                view.heading = t.heading_closed.to_owned();
                view.headline = t.closed.to_owned();
                view.refresh = false;
                view.hint = false;
            }
            Some("DRAINING") => view.headline = t.draining.to_owned(),
            _ => match ctx.refusal {
                Some(Refusal::Challenge) => {
                    // With JavaScript the script solves it (and says so).
                    view.headline = t.checking.to_owned();
                    view.needs_script = true;
                    view.refresh = false;
                }
                Some(Refusal::Blocked) => {
                    view.state = "BLOCKED".to_owned();
                    view.headline = t.blocked.to_owned();
                    view.refresh = false;
                    view.hint = false;
                }
                Some(Refusal::RateLimited) => view.notice = Some(t.rate_limited.to_owned()),
                Some(Refusal::Unavailable) => {
                    view.state = "DRAINING".to_owned();
                    view.headline = t.draining.to_owned();
                }
                None => {}
            },
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

/// A paused bar never looks full: a full bar means it is the visitor's turn.
pub const PAUSED_PROGRESS_MAX: u32 = 99;

/// "1 person in line", "2 people in line" (French: 0 and 1 are singular).
pub fn queue_length(t: &Messages, n: u64, lang: Lang) -> String {
    let template = if super::lang::is_one(n, lang) {
        t.queue_length_one
    } else {
        t.queue_length
    };
    template.replace("{count}", &group(n, lang))
}

/// The no-JavaScript refresh of a `NOT_OPEN` page: when the pre-window opens
/// before the usual refresh would come, the refresh is timed to land inside
/// it, `jitter` (0..1) spreading pages over its first seconds; the render of
/// that refresh then joins the visitor (`api::page`). A meta refresh counts
/// whole seconds: a pre-window shorter than about 1.5 s may be missed.
pub fn refresh_before_pre_window(
    timestamp: Option<&str>,
    pre_window_starts_at: Option<&str>,
    opens_at: Option<&str>,
    jitter: f64,
) -> u64 {
    let (Some(now), Some(start), Some(opens)) =
        (ms(timestamp), ms(pre_window_starts_at), ms(opens_at))
    else {
        return REFRESH_SECONDS;
    };
    let until = start - now;
    if until < 0 {
        return REFRESH_SECONDS;
    }
    let spread = pre_window_spread_ms(opens - start);
    let at = until.saturating_add(spread_offset(spread, jitter));
    let seconds = u64::try_from(at.div_euclid(1000) + 1).unwrap_or(REFRESH_SECONDS);
    seconds.min(REFRESH_SECONDS)
}

/// Milliseconds since the epoch of an RFC 3339 time.
fn ms(s: Option<&str>) -> Option<i64> {
    let t = humantime::parse_rfc3339(s?).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

/// Whole seconds (rounded up) from `from` to `to`, at least 0.
fn seconds_between(from: Option<&str>, to: Option<&str>) -> Option<u64> {
    let left = ms(to)? - ms(from)?;
    u64::try_from(left.max(0).div_euclid(1000) + i64::from(left.rem_euclid(1000) > 0)).ok()
}

/// The spread of the pre-window joins for a pre-window of `window_ms`.
pub fn pre_window_spread_ms(window_ms: i64) -> i64 {
    (window_ms / 4).clamp(0, i64::try_from(PRE_WINDOW_SPREAD_MS).unwrap_or(i64::MAX))
}

fn spread_offset(spread_ms: i64, jitter: f64) -> i64 {
    // `jitter` is in [0, 1); the product is within the spread.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let offset = (spread_ms as f64 * jitter.clamp(0.0, 1.0)) as i64;
    offset.clamp(0, spread_ms)
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
        refusal: None,
        jitter: 0.5,
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
