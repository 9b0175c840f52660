//! A visitor following `GET /api/queue/stream` (Server-Sent Events) on a
//! socket of its own, as the waiting page does: every `event: position`
//! message goes back to the scheduler as news, and the stream's end (the
//! server closed it, refused it, or it broke) sends the visitor back to
//! polling. Streams are at most `--streams` at once (the first arrivals, then
//! visitors near the front), so a task each costs little; the million others
//! keep polling on the shared pool.

use std::net::SocketAddr;

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use tokio::{sync::mpsc, time::Instant};

use super::wire::QueuePosition;

/// What a stream told the scheduler.
pub enum News {
    /// A position and when its message arrived (µs since the run's start),
    /// read by the stream's own task: the fleet may take its turn with the
    /// news much later when it is busy, and a `WAITING` dated by the fleet
    /// would look like a wait that lasted past later visitors' admissions.
    Position(QueuePosition, u64),
    /// The stream is over; the text says why (`closed`, `refused_503`, …).
    Ended(&'static str),
}

/// Longest SSE message the simulator keeps; a QueuePosition is well under.
const MAX_MESSAGE: usize = 16 * 1024;

/// Follows one stream until it ends or carries a status that ends waiting.
pub async fn follow(
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
    id: u32,
    start: Instant,
    news: mpsc::UnboundedSender<(u32, News)>,
) {
    let why = run(addr, req, id, start, &news).await;
    let _ = news.send((id, News::Ended(why)));
}

async fn run(
    addr: SocketAddr,
    req: Request<Full<Bytes>>,
    id: u32,
    start: Instant,
    news: &mpsc::UnboundedSender<(u32, News)>,
) -> &'static str {
    // The pool's own connect (no Nagle delay, the connection driven by a
    // task of its own, which ends once the sender and the body are dropped).
    let Ok(mut sender) = super::conn::connect(addr).await else {
        return "connect";
    };
    async {
        let Ok(answer) = sender.send_request(req).await else {
            return "send";
        };
        if answer.status() != hyper::StatusCode::OK {
            return match answer.status().as_u16() {
                503 => "refused_503",
                429 => "refused_429",
                _ => "refused",
            };
        }
        let mut body = answer.into_body();
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return "broken" };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let arrived = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
            buf.extend_from_slice(&data);
            while let Some(end) = find_blank_line(&buf) {
                let message = buf.split_to(end);
                buf.advance(2);
                let Some(pos) = position(&message) else {
                    continue;
                };
                let over = !matches!(
                    pos.status.as_str(),
                    "WAITING" | "PAUSED" | "NOT_OPEN" | "DRAINING"
                );
                if news.send((id, News::Position(pos, arrived))).is_err() || over {
                    return "over";
                }
            }
            if buf.len() > MAX_MESSAGE {
                return "oversized";
            }
        }
        "closed"
    }
    .await
}

fn find_blank_line(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\n\n")
}

/// The QueuePosition of an `event: position` message (its `data:` lines
/// joined); comments (heartbeats) and other events are none.
fn position(message: &[u8]) -> Option<QueuePosition> {
    let text = std::str::from_utf8(message).ok()?;
    let mut event = "message";
    let mut data = String::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim();
        } else if let Some(v) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (event == "position")
        .then(|| serde_json::from_str(&data).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_messages_are_read_and_heartbeats_skipped() {
        let p =
            position(b"event: position\ndata: {\"status\":\"ADMITTED\",\"token\":\"t\"}").unwrap();
        assert_eq!(p.status, "ADMITTED");
        assert_eq!(p.token.as_deref(), Some("t"));
        assert!(position(b": heartbeat").is_none());
        assert!(position(b"event: other\ndata: {\"status\":\"WAITING\"}").is_none());
        assert_eq!(find_blank_line(b"a\n\nb"), Some(1));
    }
}
