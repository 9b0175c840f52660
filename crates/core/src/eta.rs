//! Honest wait estimates: admission history, the blended admission rate, the slots' turnover and the rate the queue really moves at, the buffered ETA, its display text and the adaptive polling interval.
//!
//! A visitor trusts an estimate that is a little pessimistic and never jumps up
//! while admissions run steadily, so every step here leans conservative: the
//! rate is measured over at least [`MIN_SPAN_MS`] (a burst right after opening
//! does not look like a steady rate), churn counts for at most
//! [`MAX_CHURN_SHARE`] of the rate, and the result gets a [`BUFFER`].

use std::collections::VecDeque;

mod turnover;
pub use turnover::{
    GENERATION_SHARE, MIN_HOLD_MS, SEEN_WITHIN_MS, STALL_FACTOR, Turnover, earliest_turn,
    estimate_in_slots, on_schedule, queue_rate, within_free_slots,
};

/// Conservative multiplier applied to every estimate.
pub const BUFFER: f64 = 1.2;

/// Under this many seconds the visitor is told "almost there".
pub const ALMOST_THERE_S: u64 = 60;

/// Window of the short admission rate.
pub const RATE_1M_MS: i64 = 60_000;

/// Window of the long admission rate, and how long the history keeps samples.
pub const RATE_5M_MS: i64 = 300_000;

/// Shortest span a rate is measured over. Batch admission releases a whole
/// batch at once; dividing the first batch by the seconds since it left would
/// report a rate many times the real one, and an estimate far too short.
pub const MIN_SPAN_MS: i64 = 30_000;

/// Visitors ahead who abandon shorten the wait, but churn is noisy: it never
/// counts for more than this share of the admission rate.
pub const MAX_CHURN_SHARE: f64 = 0.25;

/// Samples are bucketed per second, so the ring needs one slot per second of
/// the longest window (plus the partial second at each end).
const BUCKET_MS: i64 = 1_000;
const MAX_SAMPLES: usize = (RATE_5M_MS / BUCKET_MS) as usize + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    /// Start of the one-second bucket.
    t_ms: i64,
    admitted: u64,
    released: u64,
    abandoned: u64,
}

/// Bounded per-second history of one event's admissions, releases and
/// abandonments: at most five minutes, at most [`MAX_SAMPLES`] buckets.
#[derive(Debug, Clone, Default)]
pub struct AdmissionHistory {
    samples: VecDeque<Sample>,
    /// When the history started; a rate is never measured over more time than
    /// the history has seen (nor less than [`MIN_SPAN_MS`]).
    started_ms: Option<i64>,
}

impl AdmissionHistory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one tick's counts. Call it every tick, zeros included: a tick that
    /// admitted nobody is a data point too.
    pub fn record(&mut self, now_ms: i64, admitted: u64, released: u64) {
        let s = self.bucket(now_ms);
        s.admitted = s.admitted.saturating_add(admitted);
        s.released = s.released.saturating_add(released);
    }

    /// Adds waiting visitors who left the queue (idled out or left on purpose).
    pub fn record_abandoned(&mut self, now_ms: i64, abandoned: u64) {
        let s = self.bucket(now_ms);
        s.abandoned = s.abandoned.saturating_add(abandoned);
    }

    /// Visitors admitted per second over the last `window_ms`; `None` before
    /// anything was recorded.
    pub fn rate_per_s(&self, now_ms: i64, window_ms: i64) -> Option<f64> {
        self.rate_of(now_ms, window_ms, |s| s.admitted)
    }

    /// Active sessions ended per second over the last `window_ms`.
    pub fn release_rate_per_s(&self, now_ms: i64, window_ms: i64) -> Option<f64> {
        self.rate_of(now_ms, window_ms, |s| s.released)
    }

    /// Waiting visitors lost per second over the last `window_ms`.
    pub fn churn_per_s(&self, now_ms: i64, window_ms: i64) -> Option<f64> {
        self.rate_of(now_ms, window_ms, |s| s.abandoned)
    }

    /// The admission rate an estimate should use: [`blended_rate`] of the
    /// one-minute and five-minute rates.
    pub fn blended_rate(&self, now_ms: i64) -> Option<f64> {
        blended_rate(
            self.rate_per_s(now_ms, RATE_1M_MS),
            self.rate_per_s(now_ms, RATE_5M_MS),
        )
    }

    fn bucket(&mut self, now_ms: i64) -> &mut Sample {
        let t_ms = now_ms.saturating_sub(now_ms.rem_euclid(BUCKET_MS));
        self.started_ms.get_or_insert(t_ms);
        // Samples older than the longest window are of no use.
        let horizon = t_ms.saturating_sub(RATE_5M_MS);
        while self.samples.front().is_some_and(|s| s.t_ms < horizon) {
            self.samples.pop_front();
        }
        // A clock that steps back (another node's tick, a store failover) adds
        // to the newest bucket instead of breaking the time order.
        let fresh = self.samples.back().is_none_or(|s| s.t_ms < t_ms);
        if fresh {
            if self.samples.len() >= MAX_SAMPLES {
                self.samples.pop_front();
            }
            self.samples.push_back(Sample {
                t_ms,
                admitted: 0,
                released: 0,
                abandoned: 0,
            });
        }
        let last = self.samples.len() - 1;
        &mut self.samples[last]
    }

    fn rate_of(&self, now_ms: i64, window_ms: i64, count: impl Fn(&Sample) -> u64) -> Option<f64> {
        let started = self.started_ms?;
        let window_ms = window_ms.clamp(BUCKET_MS, RATE_5M_MS);
        let from = now_ms.saturating_sub(window_ms);
        // The samples are in time order (see `bucket`), and every poll's
        // estimate reads the one-minute window of five minutes' samples:
        // they are read from the newest back to the window's start.
        let total: u64 = self
            .samples
            .iter()
            .rev()
            .skip_while(|s| s.t_ms > now_ms)
            .take_while(|s| s.t_ms > from)
            .map(count)
            .fold(0, u64::saturating_add);
        let seen = now_ms.saturating_sub(started).saturating_add(BUCKET_MS);
        let span = seen.clamp(MIN_SPAN_MS.min(window_ms), window_ms);
        Some(total as f64 * 1000.0 / span as f64)
    }
}

/// The rate an estimate uses: 0.7 × the one-minute rate + 0.3 × the
/// five-minute rate, so it follows changes without jumping on one slow minute;
/// whichever exists when only one does.
pub fn blended_rate(rate_1m: Option<f64>, rate_5m: Option<f64>) -> Option<f64> {
    let valid = |r: Option<f64>| r.filter(|r| r.is_finite() && *r >= 0.0);
    match (valid(rate_1m), valid(rate_5m)) {
        (Some(a), Some(b)) => Some(0.7 * a + 0.3 * b),
        (one, other) => one.or(other),
    }
}

/// A buffered wait estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// The wait shown: buffered, rounded up to the second.
    pub seconds: u64,
    pub almost_there: bool,
    /// The expected wait for the slot, unbuffered, in ms: what the poll
    /// interval follows (whole seconds are too coarse at the front).
    pub wait_ms: u64,
}

/// The wait of the visitor with `rank` visitors ahead, or `None` while no
/// positive admission rate is known.
///
/// `churn_per_s` is how fast visitors ahead leave the queue without being
/// admitted; it shortens the wait by at most [`MAX_CHURN_SHARE`] of the rate.
pub fn estimate(rank: u64, admit_rate_per_s: Option<f64>, churn_per_s: f64) -> Option<Estimate> {
    let rate = admit_rate_per_s.filter(|r| r.is_finite() && *r > 0.0)?;
    let churn = if churn_per_s.is_finite() {
        churn_per_s.clamp(0.0, rate * MAX_CHURN_SHARE)
    } else {
        0.0
    };
    let position = rank.saturating_add(1) as f64;
    // The tiny tolerance keeps float noise (10 × 1.2 = 12.000000000000002)
    // from adding a second; `as` saturates, so an absurd wait is u64::MAX.
    let wait_s = position / (rate + churn);
    let seconds = (wait_s * BUFFER - 1e-9).ceil() as u64;
    Some(Estimate {
        seconds,
        almost_there: seconds < ALMOST_THERE_S,
        wait_ms: ms(wait_s),
    })
}

/// An ISO 8601 duration: "PT0S", "PT6M12S", "PT1H2M3S"; hours are not
/// folded into days.
pub fn iso8601(seconds: u64) -> String {
    if seconds == 0 {
        return "PT0S".to_owned();
    }
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let mut out = String::from("PT");
    for (value, unit) in [(h, 'H'), (m, 'M'), (s, 'S')] {
        if value > 0 {
            out.push_str(&value.to_string());
            out.push(unit);
        }
    }
    out
}

/// The language of the display text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Fr,
}

impl Lang {
    /// The supported language the visitor prefers, by q-value (ties go to the
    /// first listed); English when none is acceptable or the header is garbage.
    pub fn from_accept_language(header: &str) -> Lang {
        let mut best: Option<(f64, Lang)> = None;
        for item in header.split(',') {
            let mut parts = item.split(';');
            let tag = parts.next().unwrap_or("").trim();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            if !(q > 0.0 && q <= 1.0) {
                continue;
            }
            let primary = tag.split('-').next().unwrap_or("");
            let lang = if primary.eq_ignore_ascii_case("fr") {
                Lang::Fr
            } else if primary.eq_ignore_ascii_case("en") || primary == "*" {
                Lang::En
            } else {
                continue;
            };
            if best.is_none_or(|(best_q, _)| q > best_q) {
                best = Some((q, lang));
            }
        }
        best.map_or(Lang::En, |(_, lang)| lang)
    }
}

/// Estimates past this many minutes are shown in hours.
const HOURS_FROM_MIN: u64 = 90;

/// What `display` says while the event's admissions are paused: no
/// figure, and not "calculating…", which promises one is coming.
pub fn display_paused(lang: Lang) -> String {
    match lang {
        Lang::En => "paused: no estimate until admissions resume",
        Lang::Fr => "en pause : pas d’estimation avant la reprise",
    }
    .to_owned()
}

/// The estimate in words: "almost there", "about 7 minutes", "about 2 hours".
///
/// Minutes round up (the conservative side); hours, shown only past 90
/// minutes, round to the nearest hour, since rounding 2 h 01 up to "about 3
/// hours" would mislead more than the buffer already protects.
pub fn display(e: Option<Estimate>, lang: Lang) -> String {
    let Some(e) = e else {
        return match lang {
            Lang::En => "calculating…",
            Lang::Fr => "calcul en cours…",
        }
        .to_owned();
    };
    if e.almost_there {
        return match lang {
            Lang::En => "almost there",
            Lang::Fr => "presque à vous",
        }
        .to_owned();
    }
    let minutes = e.seconds.div_ceil(60);
    let (n, unit_en, unit_fr) = if minutes > HOURS_FROM_MIN {
        ((minutes + 30) / 60, "hour", "heure")
    } else {
        (minutes, "minute", "minute")
    };
    let plural = if n == 1 { "" } else { "s" };
    match lang {
        Lang::En => format!("about {n} {unit_en}{plural}"),
        Lang::Fr => format!("environ {n} {unit_fr}{plural}"),
    }
}

/// Near the front (or under this rank) a visitor polls every [`NEAR_POLL_MS`].
pub const NEAR_RANK: u64 = 20;
pub const NEAR_POLL_MS: u64 = 2_000;
/// Under this expected (unbuffered) wait a visitor polls every [`NEAR_POLL_MS`].
pub const NEAR_WAIT_MS: u64 = 10_000;
/// The fastest poll: within [`NEAR_POLL_MS`] × 2 of the turn a visitor polls
/// after half the expected wait, never sooner than this.
pub const FRONT_POLL_MS: u64 = 500;
/// Farther back a visitor polls after this share of the expected wait.
pub const POLL_SHARE: f64 = 0.25;
/// The slowest poll, far back in the queue.
pub const FAR_POLL_MS: u64 = 30_000;
/// The poll while no estimate exists yet: the first rate will come soon.
pub const UNKNOWN_POLL_MS: u64 = 5_000;
/// A crowd's first polls spread over this span.
pub const FIRST_POLL_SPREAD_MS: u64 = 3_000;

/// When the visitor should poll again, with ±20 % jitter from `jitter` in
/// `[0, 1)` so a crowd that joined together does not poll together.
///
/// The interval follows the *expected* wait ([`Estimate::wait_ms`], without
/// the [`BUFFER`]): far back a visitor polls after a quarter of it (at most
/// 30 s), so polls thin out geometrically with the distance from the front,
/// while each poll still lands well before the turn comes — an admitted
/// visitor who has not polled yet holds a slot nobody uses. Within ~10 s of
/// the turn (or [`NEAR_RANK`] of the front) the visitor polls every ~2 s,
/// and in the last ~4 s after half the wait left, down to [`FRONT_POLL_MS`]:
/// a visitor without the push stream then learns of the admission about
/// half a second after it, not two, for two or three more polls each.
pub fn poll_after_ms(rank: u64, eta: Option<Estimate>, jitter: f64) -> u64 {
    let base = match eta {
        Some(e) if rank < NEAR_RANK || e.wait_ms < NEAR_WAIT_MS => {
            (e.wait_ms / 2).clamp(FRONT_POLL_MS, NEAR_POLL_MS)
        }
        None if rank < NEAR_RANK => NEAR_POLL_MS,
        None => UNKNOWN_POLL_MS,
        // `as` saturates, and the clamp bounds an absurd estimate.
        Some(e) => ((e.wait_ms as f64 * POLL_SHARE) as u64).clamp(NEAR_POLL_MS, FAR_POLL_MS),
    };
    let factor = 0.8 + 0.4 * unit(jitter);
    (base as f64 * factor).round() as u64
}

/// The delay before a visitor's first poll after joining, given the
/// interval [`poll_after_ms`] gave them: spread over 0–3 s so a flash
/// crowd's polls do not arrive in one spike — unless that interval is
/// shorter than any poll near the front (the turn is due within a couple of
/// seconds), then that interval. In a burst those are the visitors the free
/// slots cover; later, a few seconds' worth of admissions.
pub fn first_poll_ms(jitter: f64, poll_after: u64) -> u64 {
    if poll_after < NEAR_POLL_MS * 8 / 10 {
        return poll_after;
    }
    (FIRST_POLL_SPREAD_MS as f64 * unit(jitter)).floor() as u64
}

/// Seconds as whole milliseconds; `as` saturates, and NaN becomes 0.
fn ms(seconds: f64) -> u64 {
    (seconds * 1000.0) as u64
}

/// `x` forced into `[0, 1)`; NaN becomes the middle.
fn unit(x: f64) -> f64 {
    if x.is_nan() {
        0.5
    } else {
        x.clamp(0.0, 1.0 - f64::EPSILON)
    }
}

#[cfg(test)]
mod tests;
