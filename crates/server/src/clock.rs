//! The wall clock, injected so tests and the core see one source of time,
//! and the node clock: the system clock, shifted by a test-only offset so a
//! test can run gateway nodes whose clocks disagree and show that the queue
//! order does not depend on them (it comes from the store's canonical clock).
//! And one timer kept for many deadlines in turn ([`poll_due`]).

use std::cell::Cell;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock, injected so tests and the core see one source of time.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        i64::try_from(ms).unwrap_or(i64::MAX)
    }
}

/// The system clock shifted by a fixed offset.
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock {
    pub offset_ms: i64,
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms().saturating_add(self.offset_ms)
    }
}

/// The node clock: the plain system clock unless a test offset
/// (`server.test_clock_offset_ms`) is configured.
pub fn node_clock(test_offset_ms: i64) -> Arc<dyn Clock> {
    if test_offset_ms == 0 {
        Arc::new(SystemClock)
    } else {
        Arc::new(OffsetClock {
            offset_ms: test_offset_ms,
        })
    }
}

/// RFC 3339 with milliseconds, UTC: `2026-12-01T10:03:12.412Z`; a time
/// before 1970 is 1970's first instant.
///
/// Every position answer carries one, so it is written here directly (the
/// civil date from the day count, as in Howard Hinnant's
/// `civil_from_days`), without humantime's formatter and its `Display`
/// round trip. The tests hold it to humantime's text.
pub fn rfc3339_ms(ms: i64) -> String {
    // RFC 3339 has four-digit years: a later time is the last instant of
    // 9999 (humantime's formatter panicked there).
    const LAST_MS: i64 = 253_402_300_799_999;
    // Every poll's answer carries the time; a loop answering a crowd
    // writes the same millisecond many times over, so each thread keeps
    // the last one written (the sentinel is below every clamped time).
    thread_local! {
        static LAST: Cell<(i64, [u8; 24])> = const { Cell::new((-1, [0; 24])) };
    }
    let ms = ms.clamp(0, LAST_MS);
    let text = LAST.with(|last| match last.get() {
        (at, text) if at == ms => text,
        _ => {
            let text = rfc3339_ms_text(ms);
            last.set((ms, text));
            text
        }
    });
    // Every byte is ASCII, so the check cannot fail (and is cheaper than
    // the lossy conversion's chunked scan).
    std::str::from_utf8(&text).unwrap_or_default().to_owned()
}

/// [`rfc3339_ms`]'s bytes for `ms`, already clamped.
fn rfc3339_ms_text(ms: i64) -> [u8; 24] {
    let (days, in_day) = (ms / 86_400_000, ms % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, m, sec, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let mut out = [0u8; 24];
    let mut put = |at: usize, width: usize, mut n: i64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + u8::try_from(n % 10).unwrap_or(0);
            n /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, h);
    put(14, 2, m);
    put(17, 2, sec);
    put(20, 3, milli);
    for (at, b) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (23, b'Z'),
    ] {
        out[at] = b;
    }
    out
}

/// (year, month, day) of the `days`-th day after 1970-01-01 (proleptic
/// Gregorian; `days` ≥ 0).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Polls a timer kept for many deadlines in turn (a connection's, one
/// deadline per request), `Ready` once `due` has passed. The timer is moved
/// only when it must be: to `due` when it would fire later, and on to `due`
/// when it fired for an earlier deadline. So a connection whose deadlines
/// each lie a fixed time after its request re-arms it about once per that
/// time, where a timer set per request would enter and leave the runtime's
/// timer wheel, under its lock, on every request.
pub fn poll_due(
    mut timer: Pin<&mut tokio::time::Sleep>,
    due: tokio::time::Instant,
    cx: &mut Context<'_>,
) -> Poll<()> {
    loop {
        if timer.as_mut().poll(cx).is_pending() {
            if timer.deadline() > due {
                timer.as_mut().reset(due);
                continue;
            }
            return Poll::Pending;
        }
        if tokio::time::Instant::now() >= due {
            return Poll::Ready(());
        }
        timer.as_mut().reset(due);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn humantime_ms(ms: i64) -> String {
        let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms.max(0)).unwrap());
        humantime::format_rfc3339_millis(t).to_string()
    }

    #[test]
    fn edges_are_written_as_humantime_writes_them() {
        for ms in [
            i64::MIN,
            -1,
            0,
            951_782_400_000,     // 2000-02-29
            4_107_542_399_999,   // 2100-02-28T23:59:59.999
            253_402_300_799_999, // the last instant of year 9999
        ] {
            assert_eq!(rfc3339_ms(ms), humantime_ms(ms), "{ms}");
        }
        for later in [253_402_300_800_000, i64::MAX] {
            assert_eq!(rfc3339_ms(later), "9999-12-31T23:59:59.999Z");
        }
        assert_eq!(rfc3339_ms(1_764_583_392_412), "2025-12-01T10:03:12.412Z");
    }

    proptest! {
        /// The time kept from the last call is the one asked for: repeats,
        /// returns to an earlier time and the clamped edges are all
        /// written as if anew.
        #[test]
        fn the_kept_time_is_written_only_for_its_own_millisecond(
            times in proptest::collection::vec(
                prop_oneof![Just(-5i64), Just(0), Just(1), Just(i64::MAX), 0i64..3000],
                1..12,
            ),
        ) {
            for ms in times {
                prop_assert_eq!(rfc3339_ms(ms), humantime_ms(ms.min(253_402_300_799_999)));
            }
        }
    }

    proptest! {
        #[test]
        fn any_instant_is_written_as_humantime_writes_it(ms in 0i64..253_402_300_800_000) {
            prop_assert_eq!(rfc3339_ms(ms), humantime_ms(ms));
        }
    }
}
