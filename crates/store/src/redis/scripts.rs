//! The Lua scripts of the Redis backend, one per multi-step operation, each
//! atomic on the node that holds its event's slot. Scripts that touch the
//! `held` hash share its helpers (`held.lua`), and those that read the
//! nodes' holds theirs (`shares.lua`), prepended at compile time.

use std::sync::LazyLock;

use super::conn::Lua;

pub(crate) static JOIN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(concat!(include_str!("held.lua"), include_str!("join.lua"))));
pub(crate) static STATUS: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("held.lua"),
        include_str!("status.lua")
    ))
});
pub(crate) static ADMIT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("held.lua"),
        include_str!("shares.lua"),
        include_str!("admit.lua")
    ))
});
pub(crate) static REDEEM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("held.lua"),
        include_str!("redeem.lua")
    ))
});
pub(crate) static EXTEND: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("held.lua"),
        include_str!("extend.lua")
    ))
});
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("release.lua")));
pub(crate) static RECONCILE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("held.lua"),
        include_str!("reconcile.lua")
    ))
});
pub(crate) static EXPIRE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("expire.lua")));
/// expire.lua as the function `sweep`, then the counts after it.
pub(crate) static EXPIRE_READ: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("stats.lua"),
        "local function sweep()\n",
        include_str!("expire.lua"),
        "end\n",
        include_str!("expire_read.lua")
    ))
});
pub(crate) static STATS: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(concat!(include_str!("stats.lua"), "return stats(KEYS)\n")));
/// The claim, then (for its winner) the reads, stats.lua's among them.
pub(crate) static TICK: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("stats.lua"),
        include_str!("claim.lua"),
        include_str!("tick.lua")
    ))
});
/// A guard alone (`claim_tick`): a tick or a batch.
pub(crate) static CLAIM: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("claim.lua"),
        include_str!("claim_one.lua")
    ))
});
pub(crate) static SHARE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("shares.lua"),
        include_str!("share.lua")
    ))
});
pub(crate) static NOW: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("now.lua")));
pub(crate) static PROBE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("probe.lua")));
pub(crate) static ANCHOR: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("anchor.lua")));
pub(crate) static REPLACE_CONFIG: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("replace_config.lua")));
pub(crate) static ADMIN_STATE_IF: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("admin_state_if.lua")));
pub(crate) static BATCH_OWED: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("batch_owed.lua")));
pub(crate) static CONFIG_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("config_set.lua")));
pub(crate) static WRITE_CONFIG: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("write_config.lua")));
