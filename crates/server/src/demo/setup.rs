//! The configuration `anteroom demo` runs with: one event protecting only
//! the shop page, so the demo's home page stays public (it says so) and a
//! visitor who frees their place lands on it instead of back in the line.

use std::net::SocketAddr;
use std::path::Path;

use super::PROTECTED_PREFIX;

/// Everything the demo needs to write its configuration and banner.
pub struct DemoSetup {
    listen: SocketAddr,
    admin_listen: SocketAddr,
    data: String,
    shop: SocketAddr,
    crowd: usize,
    admin_token: String,
    secret: String,
}

impl DemoSetup {
    /// Fresh random secrets each run: the demo never ships a fixed key.
    pub fn new(
        listen: SocketAddr,
        admin_listen: SocketAddr,
        data: &Path,
        shop: SocketAddr,
        crowd: usize,
    ) -> Self {
        Self {
            listen,
            admin_listen,
            data: data.display().to_string().replace('\\', "/"),
            shop,
            crowd,
            admin_token: crate::identity::new_session_id(),
            secret: format!(
                "{}{}",
                crate::identity::new_session_id(),
                crate::identity::new_session_id()
            ),
        }
    }

    /// The admin token of this run (printed in the banner).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    pub fn config_toml(&self) -> String {
        // The virtual crowd comes from 127.0.0.1 with one X-Forwarded-For
        // address per shopper, so the per-address limits see many people
        // (as they would on the night) rather than one flooding client.
        let trusted = if self.crowd > 0 {
            "trusted_proxies = [\"127.0.0.1/32\"]"
        } else {
            ""
        };
        format!(
            r#"
[server]
listen = "{listen}"
admin_listen = "{admin_listen}"
admin_token = "{admin_token}"
insecure_cookies = true
[store]
kind = "embedded"
path = "{data}"
[keys]
secrets = ["{secret}"]
[limits]
{trusted}
[[events]]
id = "drop"
origin = "http://{shop}"
paths = ["{PROTECTED_PREFIX}"]
max_active = 5
session_ttl = "2m"
token_ttl = "1m"
pass_ttl = "30s"
queue_idle_timeout = "2m"
admission = {{ mode = "continuous", max_per_minute = 40 }}
# Scripts (curl's user agent, no Accept-Language) score high risk and must
# solve a proof-of-work challenge; a browser scores low and joins at once.
# 16 bits is a fraction of a second of the page's solver in a browser.
bots = {{ challenge = "high", difficulty = 16 }}
"#,
            listen = self.listen,
            admin_listen = self.admin_listen,
            admin_token = self.admin_token,
            data = self.data,
            secret = self.secret,
            shop = self.shop,
        )
    }

    pub fn banner(&self) -> String {
        let crowd = match self.crowd {
            0 => String::new(),
            n => format!("\n{n} virtual shoppers are queueing beside you (--crowd)."),
        };
        format!(
            "Anteroom demo: open http://{listen}/ and press \"Buy tickets\" \
             (5 shoppers at a time; 40 admitted a minute).{crowd}\n\
             Dashboard: http://{admin}/dashboard  Admin API: http://{admin}/admin/events  \
             (admin token: {token})",
            listen = self.listen,
            admin = self.admin_listen,
            token = self.admin_token,
        )
    }
}
