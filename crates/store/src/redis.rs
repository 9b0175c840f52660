//! Redis and Redis Cluster backend of [`QueueStore`]: any number of stateless
//! gateway nodes share one queue per event.
//!
//! Every multi-step operation is one Lua script (see `redis/*.lua`), atomic on
//! the node that holds the event's slot, and takes its time from that node's
//! `TIME`, so gateway clocks never order the queue. The key layout is in
//! [`keys`]; every call is bounded by [`RedisConfig::timeout`] and fails as
//! [`StoreError::Unavailable`] rather than hanging.

mod batch;
mod conn;
mod keys;
mod news;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::phase::AdminState;
use anteroom_core::score::JoinScoring;
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;

use self::batch::{Batcher, Joins, Polls};
use self::conn::{Conn, Lua, bounded};
use self::keys::{AUDITED, CONFIGS, EventKeys, GENERATION};
use crate::{
    Admission, AdmitRequest, ConfigSet, EventId, EventStats, ExpireRequest, Expired, JoinOutcome,
    MemberState, Nonce, QueueStore, RedeemOutcome, Result, Revocation, ShareGrant, ShareRequest,
    StoreError, TickView, Touch, check_member, check_node,
};

/// The pub/sub channel of the admission news between nodes (for tests that
/// wait for its listeners).
#[cfg(feature = "conformance")]
pub(crate) const NEWS_CHANNEL: &str = news::CHANNEL;

/// How to reach Redis.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// One `redis://` URL for standalone; one or more seed nodes for a cluster.
    pub urls: Vec<String>,
    /// Talk the Redis Cluster protocol (slot routing, MOVED/ASK).
    pub cluster: bool,
    /// Bound of every operation, connecting included.
    pub timeout: Duration,
}

/// The Redis backend. Cheap to clone: clones share one multiplexed connection
/// and the join batching (see [`batch`]).
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    joins: Batcher<Joins>,
    polls: Batcher<Polls>,
    timeout: Duration,
    cluster: bool,
    /// Admission news to and from the other nodes ([`news`]).
    news: Arc<news::News>,
}

/// Largest number of members one expire script call sweeps per category, so
/// a sweep never blocks Redis for long; `expire` repeats until done.
const EXPIRE_BATCH: u64 = 20_000;

/// Admit batches (of at most 1000 tokens each, see `admit.lua`) one expire
/// script call sweeps: about as many tokens as [`EXPIRE_BATCH`].
const EXPIRE_TOKEN_BATCHES: u64 = 20;

/// Join batches (of at most 256 members, see [`batch`]) one expire script
/// call sweeps: about as many members as [`EXPIRE_BATCH`].
const EXPIRE_JOIN_BATCHES: u64 = 80;

impl RedisStore {
    /// Connects to standalone Redis (`cluster: false`, exactly one URL) or to a
    /// Redis Cluster through its seed nodes. An unreachable server is
    /// `Unavailable` after at most `cfg.timeout`.
    pub async fn connect(cfg: &RedisConfig) -> Result<Self> {
        let conn = if cfg.cluster {
            if cfg.urls.is_empty() {
                return Err(StoreError::InvalidInput(
                    "redis cluster needs at least one seed url",
                ));
            }
            let client = ClusterClientBuilder::new(cfg.urls.clone())
                .connection_timeout(cfg.timeout)
                .response_timeout(cfg.timeout)
                .tcp_settings(conn::tcp())
                .build()
                .map_err(|_| StoreError::InvalidInput("invalid redis cluster url"))?;
            Conn::Cluster(bounded(cfg.timeout, client.get_async_connection()).await?)
        } else {
            let [url] = cfg.urls.as_slice() else {
                return Err(StoreError::InvalidInput(
                    "standalone redis takes exactly one url",
                ));
            };
            let client =
                conn::client(url).map_err(|_| StoreError::InvalidInput("invalid redis url"))?;
            // One reconnect attempt per failure, not redis-rs's default six with
            // growing pauses: a dead server must look dead (connection refused,
            // drain at once), not like a hang that every caller waits out.
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(cfg.timeout))
                .set_response_timeout(Some(cfg.timeout))
                .set_number_of_retries(1);
            Conn::Single(
                bounded(
                    cfg.timeout,
                    ConnectionManager::new_with_config(client, config),
                )
                .await?,
            )
        };
        Ok(Self {
            joins: Batcher::new(conn.clone(), cfg.timeout),
            polls: Batcher::new(conn.clone(), cfg.timeout),
            conn,
            timeout: cfg.timeout,
            cluster: cfg.cluster,
            news: Arc::new(news::News::new(cfg.urls.clone(), cfg.timeout)),
        })
    }

    /// Runs `call`, built by `script.call(keys)` plus its arguments.
    async fn eval<T: redis::FromRedisValue>(&self, script: &Lua, call: &redis::Cmd) -> Result<T> {
        self.conn.eval(script, call, self.timeout).await
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.conn.query(cmd, self.timeout).await
    }

    /// Stores (`Some`) or removes (`None`) an event's config document and
    /// moves the documents' generation on, in one script.
    async fn write_config(&self, event: &EventId, json: Option<&str>) -> Result<()> {
        let mut call = scripts::WRITE_CONFIG.call(&[CONFIGS.to_owned(), GENERATION.to_owned()]);
        call.arg(event.as_str());
        match json {
            Some(json) => call.arg("set").arg(json),
            None => call.arg("del"),
        };
        self.eval::<i64>(&scripts::WRITE_CONFIG, &call)
            .await
            .map(|_| ())
    }

    /// `admit`, or `admit_sharing` as `node`: the nodes' holds are the
    /// script's eighth key and the node its fourth argument.
    async fn admit_with(
        &self,
        event: &EventId,
        req: &AdmitRequest,
        node: Option<&str>,
    ) -> Result<Vec<Admission>> {
        let max = req
            .max
            .min(u64::try_from(req.nonces.len()).unwrap_or(u64::MAX));
        if max == 0 {
            return Ok(Vec::new());
        }
        let k = EventKeys::new(event);
        let mut keys = vec![
            k.queue(),
            k.held(),
            k.token_batches(),
            k.token_batch_members(),
            k.state(),
            k.totals(),
            k.admitted_per_s(),
        ];
        if node.is_some() {
            keys.push(k.shares());
        }
        // Only the nonces that can be used travel to Redis.
        let take = usize::try_from(max).unwrap_or(usize::MAX);
        let mut call = scripts::ADMIT.call(&keys);
        call.arg(max)
            .arg(req.max_active)
            // Lua counts in doubles: kept where `now + ttl` stays exact
            // (2^52 µs is 142 years).
            .arg(req.token_ttl_us.clamp(-(1 << 52), 1 << 52))
            .arg(node.unwrap_or(""));
        for nonce in &req.nonces[..take] {
            call.arg(&token_entry(nonce)[..]);
        }
        let members: Vec<String> = self.eval(&scripts::ADMIT, &call).await?;
        if members.len() > take {
            return Err(StoreError::Corrupt(
                "admit returned more members than nonces".into(),
            ));
        }
        if !members.is_empty() {
            self.news.publish(&self.conn, event);
        }
        Ok(members
            .into_iter()
            .zip(&req.nonces)
            .map(|(member, nonce)| Admission {
                member,
                nonce: *nonce,
            })
            .collect())
    }
}

/// A call of expire.lua, or of expire_read.lua (`with_totals`: its one
/// key more): the event's keys as the sweep expects them, and its limits.
fn expire_call(
    script: &Lua,
    event: &EventId,
    req: &ExpireRequest,
    with_totals: bool,
) -> redis::Cmd {
    let k = EventKeys::new(event);
    let mut keys = vec![
        k.queue(),
        k.seen(),
        k.held(),
        k.token_batches(),
        k.token_batch_members(),
        k.active(),
        k.used(),
        k.revocations(),
        k.admitted_per_s(),
        k.churn_per_s(),
        k.no_shows_per_s(),
        k.join_batches(),
        k.join_batch_members(),
    ];
    if with_totals {
        keys.push(k.totals());
    }
    let mut call = script.call(&keys);
    call.arg(req.waiting_seen_before_us)
        .arg(EXPIRE_BATCH)
        .arg(crate::REVOCATION_RETENTION_US)
        .arg(EXPIRE_TOKEN_BATCHES)
        .arg(EXPIRE_JOIN_BATCHES);
    call
}

/// The keys of stats.lua (and of tick.lua's first seven).
fn stats_keys(k: &EventKeys) -> [String; 7] {
    [
        k.queue(),
        k.active(),
        k.held(),
        k.totals(),
        k.admitted_per_s(),
        k.churn_per_s(),
        k.no_shows_per_s(),
    ]
}

/// stats.lua's nine numbers.
fn stats_from(v: &[i64]) -> Result<EventStats> {
    let [
        waiting,
        active,
        outstanding,
        admitted_total,
        redeemed_total,
        a1,
        a5,
        churn,
        no_shows,
    ] = v[..]
    else {
        return Err(StoreError::Corrupt(format!(
            "stats script returned {} numbers, not 9",
            v.len()
        )));
    };
    Ok(EventStats {
        waiting: count(waiting),
        active: count(active),
        outstanding: count(outstanding),
        admitted_total: count(admitted_total),
        redeemed_total: count(redeemed_total),
        admitted_last_1m: count(a1),
        admitted_last_5m: count(a5),
        churn_last_1m: count(churn),
        no_shows_last_5m: count(no_shows),
    })
}

/// The documents' generation as stored: absent until a first change.
fn parse_generation(stored: Option<String>) -> Result<u64> {
    match stored {
        None => Ok(0),
        Some(g) => g
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("bad generation {g:?} in {GENERATION}"))),
    }
}

/// An event's admin state as stored (unset: running).
fn admin_from(stored: Option<&str>) -> Result<AdminState> {
    match stored {
        None | Some("running") => Ok(AdminState::Running),
        Some("paused") => Ok(AdminState::Paused),
        Some("closed") => Ok(AdminState::Closed),
        Some(other) => Err(StoreError::Corrupt(format!(
            "unknown admin state {other:?} in redis"
        ))),
    }
}

/// The `held` entry of a token: tagged `t` so a session (`s`) never reads as one.
fn token_entry(nonce: &Nonce) -> [u8; 17] {
    let mut entry = [b't'; 17];
    entry[1..].copy_from_slice(nonce);
    entry
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Adds one round of the sweep (the script frees at most a batch a call,
/// and says whether more is left) to what the sweep freed so far.
fn add_round(total: &mut Expired, idle: i64, tokens: i64, sessions: i64) {
    total.idle_waiters += count(idle);
    total.unredeemed_tokens += count(tokens);
    total.sessions += count(sessions);
}

/// The state of a member holding a slot, from `held_state`'s text: a token
/// (16-byte nonce then decimal expiry) or a session's decimal end.
fn decode_held(token: bool, text: &[u8]) -> Result<MemberState> {
    if !token {
        return Ok(MemberState::Active {
            expires_at_us: decode_i64(text)?,
        });
    }
    let (nonce, expiry) = text.split_at_checked(16).ok_or_else(|| bad_token(text))?;
    let nonce = Nonce::try_from(nonce).map_err(|_| bad_token(text))?;
    Ok(MemberState::Admitted {
        nonce,
        expires_at_us: decode_i64(expiry)?,
    })
}

fn bad_token(raw: &[u8]) -> StoreError {
    StoreError::Corrupt(format!(
        "stored token has {} bytes, not a nonce and an expiry",
        raw.len()
    ))
}

/// Parses an exact time stored as decimal text.
fn decode_i64(raw: &[u8]) -> Result<i64> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            StoreError::Corrupt(format!(
                "stored time {:?} is not an integer",
                String::from_utf8_lossy(raw)
            ))
        })
}

fn state_name(state: AdminState) -> &'static str {
    match state {
        AdminState::Running => "running",
        AdminState::Paused => "paused",
        AdminState::Closed => "closed",
    }
}

#[async_trait]
impl QueueStore for RedisStore {
    fn name(&self) -> &'static str {
        if self.cluster {
            "redis-cluster"
        } else {
            "redis"
        }
    }

    fn admissions_elsewhere(&self) -> Option<tokio::sync::broadcast::Receiver<EventId>> {
        Some(self.news.subscribe())
    }

    async fn now_us(&self, event: &EventId) -> Result<i64> {
        // Run on the event's own node: that is the clock its scores use.
        let call = scripts::NOW.call(&[EventKeys::new(event).queue()]);
        self.eval(&scripts::NOW, &call).await
    }

    async fn anchor_us(&self, event: &EventId) -> Result<i64> {
        let call = scripts::ANCHOR.call(&[EventKeys::new(event).anchor()]);
        self.eval(&scripts::ANCHOR, &call).await
    }

    async fn join(
        &self,
        event: &EventId,
        member: &str,
        scoring: &JoinScoring,
    ) -> Result<JoinOutcome> {
        check_member(member)?;
        self.joins.call(event, member, *scoring).await
    }

    async fn status(&self, event: &EventId, member: &str, touch: Touch) -> Result<MemberState> {
        check_member(member)?;
        // Polls are the hot path: batched like joins (see `batch`).
        self.polls.call(event, member, touch).await
    }

    async fn queue_length(&self, event: &EventId) -> Result<u64> {
        self.query(redis::cmd("ZCARD").arg(EventKeys::new(event).queue()))
            .await
    }

    async fn admit(&self, event: &EventId, req: &AdmitRequest) -> Result<Vec<Admission>> {
        self.admit_with(event, req, None).await
    }

    async fn admit_sharing(
        &self,
        event: &EventId,
        req: &AdmitRequest,
        node: &str,
    ) -> Result<Vec<Admission>> {
        check_node(node)?;
        self.admit_with(event, req, Some(node)).await
    }

    async fn redeem_as(
        &self,
        event: &EventId,
        member: &str,
        nonce: &Nonce,
        session_expires_at_us: i64,
        opens: bool,
    ) -> Result<RedeemOutcome> {
        check_member(member)?;
        let k = EventKeys::new(event);
        let keys = [k.held(), k.used(), k.active(), k.totals(), k.state()];
        let mut call = scripts::REDEEM.call(&keys);
        call.arg(member)
            .arg(&nonce[..])
            .arg(session_expires_at_us)
            .arg(u8::from(opens));
        match self.eval::<Vec<i64>>(&scripts::REDEEM, &call).await?[..] {
            [0, at_us] => Ok(RedeemOutcome::Redeemed { at_us }),
            [1] => Ok(RedeemOutcome::AlreadyUsed),
            [2] => Ok(RedeemOutcome::NotAdmitted),
            [3] => Ok(RedeemOutcome::Paused),
            [4] => Ok(RedeemOutcome::Closed),
            ref other => Err(StoreError::Corrupt(format!(
                "unknown redeem outcome {other:?} from redis"
            ))),
        }
    }

    async fn extend(&self, event: &EventId, member: &str, expires_at_us: i64) -> Result<bool> {
        check_member(member)?;
        let k = EventKeys::new(event);
        let mut call = scripts::EXTEND.call(&[k.active(), k.held()]);
        call.arg(member).arg(expires_at_us);
        Ok(self.eval::<i64>(&scripts::EXTEND, &call).await? == 1)
    }

    async fn release(&self, event: &EventId, member: &str) -> Result<bool> {
        check_member(member)?;
        let k = EventKeys::new(event);
        let keys = [
            k.queue(),
            k.seen(),
            k.held(),
            k.active(),
            k.revocations(),
            k.churn_per_s(),
        ];
        let mut call = scripts::RELEASE.call(&keys);
        call.arg(member);
        Ok(self.eval::<i64>(&scripts::RELEASE, &call).await? == 1)
    }

    async fn reconcile_active(&self, event: &EventId, members: &[(String, i64)]) -> Result<u64> {
        let k = EventKeys::new(event);
        let keys = [k.queue(), k.seen(), k.active(), k.held()];
        let mut recorded = 0;
        // Bounded batches: one script per batch keeps each step short; every
        // member's check-and-record is still atomic.
        for batch in members.chunks(1000) {
            let mut call = scripts::RECONCILE.call(&keys);
            for (member, expires_at_us) in batch {
                check_member(member)?;
                call.arg(member).arg(*expires_at_us);
            }
            recorded += count(self.eval::<i64>(&scripts::RECONCILE, &call).await?);
        }
        Ok(recorded)
    }

    async fn hold_share(&self, event: &EventId, req: &ShareRequest) -> Result<ShareGrant> {
        check_node(&req.node)?;
        let k = EventKeys::new(event);
        let mut call = scripts::SHARE.call(&[k.held(), k.shares()]);
        call.arg(&req.node)
            .arg(req.max_active)
            .arg(req.reserve)
            .arg(req.pending)
            .arg(req.ttl_ms);
        let v: Vec<i64> = self.eval(&scripts::SHARE, &call).await?;
        let [reserve, pending, others] = v[..] else {
            return Err(StoreError::Corrupt(format!(
                "share script returned {} numbers, not 3",
                v.len()
            )));
        };
        Ok(ShareGrant {
            reserve: count(reserve),
            pending: count(pending),
            others: count(others),
        })
    }

    async fn expire(&self, event: &EventId, req: &ExpireRequest) -> Result<Expired> {
        let call = expire_call(&scripts::EXPIRE, event, req, false);
        let mut total = Expired::default();
        loop {
            let (idle, tokens, sessions, more): (i64, i64, i64, i64) =
                self.eval(&scripts::EXPIRE, &call).await?;
            add_round(&mut total, idle, tokens, sessions);
            if more == 0 {
                return Ok(total);
            }
        }
    }

    async fn expire_and_stats(
        &self,
        event: &EventId,
        req: &ExpireRequest,
    ) -> Result<(Expired, EventStats)> {
        let call = expire_call(&scripts::EXPIRE_READ, event, req, true);
        let mut total = Expired::default();
        loop {
            let (idle, tokens, sessions, more, counts): (i64, i64, i64, i64, Vec<i64>) =
                self.eval(&scripts::EXPIRE_READ, &call).await?;
            add_round(&mut total, idle, tokens, sessions);
            if more == 0 {
                return Ok((total, stats_from(&counts)?));
            }
        }
    }

    async fn stats(&self, event: &EventId) -> Result<EventStats> {
        let keys = stats_keys(&EventKeys::new(event));
        let v: Vec<i64> = self
            .eval(&scripts::STATS, &scripts::STATS.call(&keys))
            .await?;
        stats_from(&v)
    }

    async fn revocations_since(&self, event: &EventId, since_us: i64) -> Result<Vec<Revocation>> {
        let key = EventKeys::new(event).revocations();
        let rows: Vec<(String, f64)> = self
            .query(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(key)
                    .arg(since_us)
                    .arg("+inf")
                    .arg("WITHSCORES"),
            )
            .await?;
        // Scores are integers below 2^53, exact in an f64.
        #[allow(clippy::cast_possible_truncation)]
        Ok(rows
            .into_iter()
            .map(|(member, at)| Revocation {
                member,
                at_us: at as i64,
            })
            .collect())
    }

    async fn consume_once(
        &self,
        event: &EventId,
        nonce: &Nonce,
        expires_at_us: i64,
    ) -> Result<bool> {
        // The key expires by the server's own clock, the canonical one; a
        // deadline already past is remembered for a millisecond, which is
        // harmless: the caller refuses expired answers anyway.
        let at_ms = expires_at_us.div_euclid(1000) + 1;
        let key = EventKeys::new(event).once(nonce);
        let set: Option<String> = self
            .query(
                redis::cmd("SET")
                    .arg(key)
                    .arg(1)
                    .arg("NX")
                    .arg("PXAT")
                    .arg(at_ms.max(1)),
            )
            .await?;
        Ok(set.is_some())
    }

    async fn set_batch_owed(
        &self,
        event: &EventId,
        start_ms: i64,
        owed: u64,
        ttl_ms: u64,
    ) -> Result<()> {
        let mut call = scripts::BATCH_OWED.call(&[EventKeys::new(event).batch_owed()]);
        call.arg(start_ms).arg(owed).arg(ttl_ms.max(1));
        self.eval::<i64>(&scripts::BATCH_OWED, &call)
            .await
            .map(|_| ())
    }

    async fn batch_owed(&self, event: &EventId) -> Result<Option<(i64, u64)>> {
        let key = EventKeys::new(event).batch_owed();
        let stored: Option<String> = self.query(redis::cmd("GET").arg(&key)).await?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let parsed = stored
            .split_once(':')
            .and_then(|(start, owed)| Some((start.parse().ok()?, owed.parse().ok()?)));
        parsed
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("bad batch record {stored:?} in {key}")))
    }

    async fn claim_tick(&self, event: &EventId, tick: u64, ttl_ms: u64) -> Result<bool> {
        let mut call = scripts::CLAIM.call(&[EventKeys::new(event).tick(tick)]);
        call.arg(ttl_ms.max(1));
        Ok(self.eval::<i64>(&scripts::CLAIM, &call).await? == 1)
    }

    async fn set_admin_state(&self, event: &EventId, state: AdminState) -> Result<()> {
        let key = EventKeys::new(event).state();
        self.query::<()>(redis::cmd("SET").arg(key).arg(state_name(state)))
            .await
    }

    async fn admin_state(&self, event: &EventId) -> Result<AdminState> {
        let stored: Option<String> = self
            .query(redis::cmd("GET").arg(EventKeys::new(event).state()))
            .await?;
        admin_from(stored.as_deref())
    }

    async fn set_admin_state_if(
        &self,
        event: &EventId,
        expected: AdminState,
        state: AdminState,
    ) -> Result<Option<AdminState>> {
        let mut call = scripts::ADMIN_STATE_IF.call(&[EventKeys::new(event).state()]);
        call.arg(state_name(expected)).arg(state_name(state));
        let found: Option<String> = self.eval(&scripts::ADMIN_STATE_IF, &call).await?;
        found.map(|f| admin_from(Some(&f))).transpose()
    }

    async fn claim_tick_and_read(
        &self,
        event: &EventId,
        tick: u64,
        ttl_ms: u64,
    ) -> Result<Option<TickView>> {
        let k = EventKeys::new(event);
        let mut keys = stats_keys(&k).to_vec();
        keys.extend([k.tick(tick), k.state()]);
        let mut call = scripts::TICK.call(&keys);
        call.arg(ttl_ms.max(1));
        let (won, now_us, stats, admin): (i64, i64, Vec<i64>, Option<String>) =
            self.eval(&scripts::TICK, &call).await?;
        if won == 0 {
            return Ok(None);
        }
        Ok(Some(TickView {
            now_us,
            stats: stats_from(&stats)?,
            admin: admin_from(admin.as_deref())?,
        }))
    }

    async fn put_event_config(&self, event: &EventId, json: &str) -> Result<()> {
        self.write_config(event, Some(json)).await
    }

    async fn replace_event_config(
        &self,
        event: &EventId,
        generation: u64,
        json: &str,
    ) -> Result<bool> {
        let mut call = scripts::REPLACE_CONFIG.call(&[CONFIGS.to_owned(), GENERATION.to_owned()]);
        call.arg(event.as_str()).arg(json).arg(generation);
        self.eval::<i64>(&scripts::REPLACE_CONFIG, &call)
            .await
            .map(|stored| stored == 1)
    }

    async fn config_generation(&self) -> Result<u64> {
        let stored: Option<String> = self.query(redis::cmd("GET").arg(GENERATION)).await?;
        parse_generation(stored)
    }

    async fn event_config_set(&self) -> Result<ConfigSet> {
        let call = scripts::CONFIG_SET.call(&[CONFIGS.to_owned(), GENERATION.to_owned()]);
        let (generation, rows): (Option<String>, Vec<(String, String)>) =
            self.eval(&scripts::CONFIG_SET, &call).await?;
        let generation = parse_generation(generation)?;
        let mut configs = rows
            .into_iter()
            .map(|(id, json)| {
                EventId::new(&id)
                    .map(|id| (id, json))
                    .map_err(|_| StoreError::Corrupt(format!("bad event id {id:?} in {CONFIGS}")))
            })
            .collect::<Result<Vec<_>>>()?;
        configs.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(ConfigSet {
            generation,
            configs,
        })
    }

    async fn ping(&self, event: &EventId) -> Result<()> {
        let call = scripts::PROBE.call(&[EventKeys::new(event).probe()]);
        self.eval::<i64>(&scripts::PROBE, &call).await.map(|_| ())
    }

    async fn delete_event(&self, event: &EventId) -> Result<()> {
        // One DEL: the keys share the event's hash tag, so one slot.
        let mut del = redis::cmd("DEL");
        for k in EventKeys::new(event).all_but_audit() {
            del.arg(k);
        }
        self.query::<()>(&del).await?;
        self.write_config(event, None).await
    }

    async fn append_audit(&self, event: &EventId, json: &str) -> Result<()> {
        let key = EventKeys::new(event).audit();
        self.query::<()>(redis::cmd("LPUSH").arg(&key).arg(json))
            .await?;
        let keep = i64::try_from(crate::AUDIT_KEEP).unwrap_or(i64::MAX);
        self.query::<()>(redis::cmd("LTRIM").arg(&key).arg(0).arg(keep - 1))
            .await?;
        self.query::<()>(redis::cmd("SADD").arg(AUDITED).arg(event.as_str()))
            .await
    }

    async fn audit(&self, event: &EventId, limit: usize) -> Result<Vec<String>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let last = i64::try_from(limit).unwrap_or(i64::MAX) - 1;
        self.query(
            redis::cmd("LRANGE")
                .arg(EventKeys::new(event).audit())
                .arg(0)
                .arg(last),
        )
        .await
    }

    async fn audit_events(&self) -> Result<Vec<EventId>> {
        let ids: Vec<String> = self.query(redis::cmd("SMEMBERS").arg(AUDITED)).await?;
        let mut ids: Vec<EventId> = ids.iter().filter_map(|i| EventId::new(i).ok()).collect();
        ids.sort();
        Ok(ids)
    }
}
