//! The waiting page: server-rendered HTML (minijinja, autoescaped, overridable per
//! event), its embedded static assets and the Content-Security-Policy they need.
//!
//! The page works in two modes from the same render. With JavaScript,
//! `static/anteroom.js` joins the queue, polls, solves proof-of-work in a Web
//! Worker and redeems the admission token. Without it, a `<noscript>` refresh
//! re-requests the page every 10 s and the caller fills [`PageContext::position`]
//! server-side, so the visitor still sees the position and, once admitted, a plain
//! form to continue.

mod assets;
mod lang;
mod messages;
mod view;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value, context};

pub use anteroom_core::eta::Lang;
pub use assets::{content_security_policy, static_asset};

/// Name of the built-in template; an override may `{% extends "waiting.html" %}`
/// and replace only its blocks.
const DEFAULT_TEMPLATE: &str = "waiting.html";
/// The page a browser gets when its continue link (the redeem GET) fails.
const REDEEM_FAILED_TEMPLATE: &str = "redeem_failed.html";

/// Everything one render of the waiting page needs.
#[derive(Debug, Clone)]
pub struct PageContext {
    /// The event id (already validated against `^[A-Za-z0-9_-]{1,64}$` by the router).
    pub event_id: String,
    /// Human name of the event; the id is shown when absent.
    pub event_name: Option<String>,
    /// Where to send the visitor once admitted. Anything that is not a local
    /// path is replaced by `/` so the page can never be an open redirect.
    pub return_path: String,
    /// Language of the messages, from `Accept-Language`.
    pub lang: Lang,
    /// The visitor's QueuePosition JSON, for the no-JavaScript render.
    pub position: Option<serde_json::Value>,
    /// The CSP nonce of this response (see [`content_security_policy`]).
    pub nonce: String,
    /// Why the render has no position to show (the server-side join was
    /// refused), so the page can say what is true instead of "joining".
    pub refusal: Option<Refusal>,
    /// A random number in [0, 1) spreading the no-JavaScript refresh of pages
    /// open before the pre-window over its first seconds.
    pub jitter: f64,
}

/// Why the server-side join of a render was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A proof-of-work or CAPTCHA challenge: only the script can answer it.
    Challenge,
    /// The bot defence refused this browser (`403 blocked`).
    Blocked,
    /// A rate limit (`429`): the next refresh tries again.
    RateLimited,
    /// The store cannot take the join now (drain mode).
    Unavailable,
}

/// Why the waiting page could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// An operator's template file could not be read (at start).
    #[error("waiting page template for event `{event}`: cannot read {}: {source}", path.display())]
    ReadOverride {
        event: String,
        path: PathBuf,
        source: std::io::Error,
    },
    /// An operator's template file is not a valid template (at start).
    #[error("waiting page template for event `{event}`: {} is not a valid template: {source}", path.display())]
    ParseOverride {
        event: String,
        path: PathBuf,
        source: minijinja::Error,
    },
    /// A template failed while rendering (internal: a bug in a template).
    #[error("waiting page render failed for event `{event}`: {source}")]
    Render {
        event: String,
        source: minijinja::Error,
    },
}

/// The loaded templates: the built-in one plus one override per configured event.
pub struct Pages {
    env: Environment<'static>,
    overridden: HashMap<String, String>,
}

impl std::fmt::Debug for Pages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pages")
            .field("overridden", &self.overridden)
            .finish_non_exhaustive()
    }
}

impl Pages {
    /// Loads the built-in template and every operator override (event id →
    /// template file). Overrides are read and parsed once, here, so a broken file
    /// stops the start with a message naming it instead of failing visitors later.
    pub fn new(overrides: &HashMap<String, PathBuf>) -> Result<Self, PageError> {
        let mut env = Environment::new();
        // Every template is HTML whatever its file name: an operator's `.tmpl`
        // override must not silently lose autoescaping.
        env.set_auto_escape_callback(|_| AutoEscape::Html);
        // A typo in an operator's template should fail loudly in their test
        // render, not print an empty string to visitors.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.add_template(DEFAULT_TEMPLATE, include_str!("../templates/waiting.html"))
            .map_err(|source| PageError::ParseOverride {
                event: String::new(),
                path: PathBuf::from("templates/waiting.html"),
                source,
            })?;
        env.add_template(
            REDEEM_FAILED_TEMPLATE,
            include_str!("../templates/redeem_failed.html"),
        )
        .map_err(|source| PageError::ParseOverride {
            event: String::new(),
            path: PathBuf::from("templates/redeem_failed.html"),
            source,
        })?;
        let mut overridden = HashMap::new();
        for (event, path) in overrides {
            let name = format!("event/{event}.html");
            let source = read_override(event, path)?;
            env.add_template_owned(name.clone(), source)
                .map_err(|source| parse_error(event, path, source))?;
            // Parsing succeeds for templates that extend a missing parent or call
            // an unknown filter; a trial render catches those at start as well.
            render_in(&env, &name, &view::sample_context(event)).map_err(|err| match err {
                PageError::Render { source, .. } => parse_error(event, path, source),
                other => other,
            })?;
            overridden.insert(event.clone(), name);
        }
        Ok(Self { env, overridden })
    }

    /// Renders the waiting page for one visitor.
    pub fn render(&self, ctx: &PageContext) -> Result<String, PageError> {
        let name = self
            .overridden
            .get(&ctx.event_id)
            .map_or(DEFAULT_TEMPLATE, String::as_str);
        render_in(&self.env, name, ctx)
    }
}

/// Why a browser's redeem (the continue link) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedeemFailure {
    /// Expired, forged, another session's, or already used.
    Token,
    /// The event is paused: the token is kept while it is valid.
    Paused,
    /// The event is closed.
    Closed,
    /// Anything else (the store, a malformed request): try again from the page.
    Other,
}

impl Pages {
    /// The HTML answer to a browser navigation whose redeem failed: what
    /// happened and a link back into the line (`/queue/E?return=...`).
    pub fn render_redeem_failed(
        &self,
        event_id: &str,
        event_name: Option<&str>,
        return_path: &str,
        lang: Lang,
        failure: RedeemFailure,
    ) -> Result<String, PageError> {
        let t = messages::for_lang(lang);
        let (heading, text) = match failure {
            RedeemFailure::Token => (t.redeem_failed_title, t.redeem_failed),
            RedeemFailure::Paused => (t.heading_outside, t.redeem_paused),
            RedeemFailure::Closed => (t.heading_closed, t.closed),
            RedeemFailure::Other => (t.heading_outside, t.redeem_other),
        };
        let return_path = view::safe_return_path(return_path);
        let back = format!(
            "/queue/{event_id}?return={}",
            percent_encoding::utf8_percent_encode(return_path, percent_encoding::NON_ALPHANUMERIC)
        );
        let err = |source| PageError::Render {
            event: event_id.to_owned(),
            source,
        };
        self.env
            .get_template(REDEEM_FAILED_TEMPLATE)
            .map_err(err)?
            .render(context! {
                lang => lang::code(lang),
                t => Value::from_serialize(t),
                heading => heading,
                text => text,
                back => back,
                event_label => event_name.unwrap_or(event_id),
            })
            .map_err(err)
    }
}

fn render_in(env: &Environment<'_>, name: &str, ctx: &PageContext) -> Result<String, PageError> {
    let err = |source| PageError::Render {
        event: ctx.event_id.clone(),
        source,
    };
    let view = view::View::build(ctx);
    // The script reads its configuration from a JSON data block; the JSON is
    // escaped for that context (see `View::script_config_json`), so it is safe
    // to insert unescaped by the HTML autoescaper.
    let config = Value::from_safe_string(view.script_config_json());
    let template = env.get_template(name).map_err(err)?;
    template
        .render(context! {
            lang => lang::code(ctx.lang),
            nonce => &ctx.nonce,
            t => Value::from_serialize(messages::for_lang(ctx.lang)),
            view => Value::from_serialize(&view),
            config => config,
        })
        .map_err(err)
}

fn read_override(event: &str, path: &Path) -> Result<String, PageError> {
    std::fs::read_to_string(path).map_err(|source| PageError::ReadOverride {
        event: event.to_owned(),
        path: path.to_owned(),
        source,
    })
}

fn parse_error(event: &str, path: &Path, source: minijinja::Error) -> PageError {
    PageError::ParseOverride {
        event: event.to_owned(),
        path: path.to_owned(),
        source,
    }
}
