//! The demo shop's HTML: self-contained pages, no third-party assets.

const STYLE: &str = r#"
:root { color-scheme: light dark; --accent: #5b4bdb; --bg: #f6f5fb; --card: #fff; --ink: #1d1b2c; --muted: #6b6880; }
@media (prefers-color-scheme: dark) { :root { --bg: #15131f; --card: #201d2e; --ink: #eeeaf9; --muted: #a29db8; --accent: #9d8fff; } }
* { box-sizing: border-box; }
body { margin: 0; min-height: 100vh; display: grid; place-items: center; background: var(--bg); color: var(--ink);
  font: 17px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { width: min(34rem, 92vw); background: var(--card); border-radius: 1.25rem; padding: 2.5rem;
  box-shadow: 0 10px 40px rgb(0 0 0 / .12); }
.kicker { text-transform: uppercase; letter-spacing: .12em; font-size: .75rem; color: var(--muted); margin: 0; }
h1 { font-size: 2rem; line-height: 1.15; margin: .4rem 0 1rem; }
p { color: var(--muted); }
.button { display: inline-block; margin-top: 1rem; padding: .85rem 1.6rem; border: 0; border-radius: 999px;
  background: var(--accent); color: #fff; font: inherit; font-weight: 600; text-decoration: none; cursor: pointer; }
.button:focus-visible { outline: 3px solid var(--ink); outline-offset: 3px; }
dl { display: grid; grid-template-columns: auto 1fr; gap: .4rem 1rem; margin: 1.5rem 0; }
dt { color: var(--muted); }
dd { margin: 0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; word-break: break-all; }
"#;

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>{STYLE}</style></head>\
         <body><main>{body}</main></body></html>\n"
    )
}

/// The public home page, with the way into the protected shop.
pub(super) fn home() -> String {
    layout(
        "Aurora Live 2026 — Demo Shop",
        "<p class=\"kicker\">Anteroom demo shop</p>\
         <h1>Aurora Live 2026</h1>\
         <p>Tickets go on sale now. When the crowd is larger than the shop can \
         serve, Anteroom holds everyone in a fair queue and lets them in at the \
         rate the shop can take.</p>\
         <a class=\"button\" href=\"/shop\">Buy tickets</a>",
    )
}

/// The protected page: proof that the visitor got through the gate.
pub(super) fn shop(event: Option<&str>, session: Option<&str>) -> String {
    let shown = |v: Option<&str>| v.map_or_else(|| "— (not sent by a gate)".to_owned(), escape);
    let leave = match event {
        // Releasing frees the slot for the next visitor in the queue.
        Some(event) => format!(
            "<button class=\"button\" id=\"leave\" data-event=\"{}\">I'm done, free my place</button>\
             <script>document.getElementById('leave').onclick=async(e)=>{{\
             const id=encodeURIComponent(e.target.dataset.event);\
             await fetch('/api/queue/release?eventId='+id,{{method:'POST'}});location.href='/';}};</script>",
            escape(event)
        ),
        None => "<a class=\"button\" href=\"/\">Back home</a>".to_owned(),
    };
    layout(
        "You're in! — Demo Shop",
        &format!(
            "<p class=\"kicker\">Aurora Live 2026</p>\
             <h1>You're in!</h1>\
             <p>The waiting room let you through. This page came from the demo \
             origin, which received:</p>\
             <dl><dt>X-Anteroom-Event</dt><dd>{}</dd>\
             <dt>X-Anteroom-Session</dt><dd>{}</dd></dl>{leave}",
            shown(event),
            shown(session),
        ),
    )
}

pub(super) fn not_found() -> String {
    layout(
        "Not found — Demo Shop",
        "<p class=\"kicker\">Demo shop</p><h1>Not found</h1>\
         <a class=\"button\" href=\"/\">Back home</a>",
    )
}

/// HTML-escapes text for element content and quoted attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}
