//! The server's integration tests, one test binary: one module per area
//! (named by it) and one `support` tree they share. One binary links the
//! server once instead of once per area, and every helper is in one place.
//! nextest still runs each test in its own process, so a test that installs
//! a process-global (the metrics recorder, say) does not see another's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod admin_api;
mod admin_faults;
mod admin_nodes;
mod admission_adaptive;
mod admission_modes;
mod admission_noshow;
mod admission_soak;
mod bots_captcha;
mod bots_challenge;
mod bots_rate;
mod bots_reputation;
mod bots_risk;
mod browser_cross_site;
mod browser_dashboard;
mod browser_journey;
mod browser_page;
mod browser_page_a11y;
mod browser_prewindow;
mod browser_stream;
mod browser_tls;
mod conn_flood;
mod distant_store;
mod door;
mod drain_hung_disk;
mod drain_share;
mod drain_slow_store;
mod durability_restart;
mod e2e;
mod eta_slots;
mod fault_cluster;
mod fault_node;
mod fault_redis;
mod gate_threats;
mod hot_routes;
mod js_vectors;
mod lifecycle_sessions;
mod origin_commands;
mod page_render;
mod process;
mod prometheus_real;
mod proxy_forwarding;
mod proxy_websocket;
mod replay_storm;
mod rss_soak;
mod serve_loops;
mod sessions_end;
mod skew_order;
mod snapshots_api;
mod stream_api;
mod tls_acme;
mod tls_bad_input;
mod tls_http2_timeouts;
mod tls_reload;
mod tls_serve;
mod wired_bots;
mod wired_limits;
mod wired_page;
mod wired_shared_address;
