//! Admission news between the gateway nodes that share one Redis: each node
//! that admits visitors publishes the event's id, and every other node hears
//! it at once instead of at its next read of the event.
//!
//! A visitor who waits on a push stream learns of their admission from the
//! node that holds the stream. That node's own admissions wake its streams
//! directly; another node's admission (the scheduler's tick is claimed by
//! one node at a time) was heard only at the next periodic read, while the
//! admitted visitor held a slot nobody used. The news is a hint, not a
//! record: a message lost while a subscriber reconnects costs only that
//! delay, because the periodic reads stay as they were.
//!
//! Classic pub/sub (`PUBLISH` / `SUBSCRIBE`), which a Redis Cluster carries
//! to every node, so one subscription on any seed node hears every event.
//! A message is `<origin> <event id>`: `origin` is a random number per store
//! instance, so a node skips its own admissions, which it already told.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast;

use super::conn::{Conn, bounded};
use crate::EventId;

/// The channel every node publishes on and listens to. Outside any event's
/// hash tag, like the other cross-event names (`@` is not in event ids).
pub(crate) const CHANNEL: &str = "anteroom:{@news}:admitted";

/// How often an idle subscription is checked with a `PING`: a connection
/// that died without a reset (a partition, a frozen server) is replaced
/// within this and the timeout.
const PING_EVERY: Duration = Duration::from_secs(5);

/// News kept for a slow receiver; one that falls further behind skips to
/// the newest (a missed hint only delays).
const BACKLOG: usize = 256;

/// The news of one store instance: what it publishes, and (once asked for)
/// the task that listens.
pub(crate) struct News {
    origin: u64,
    sender: broadcast::Sender<EventId>,
    /// Where to subscribe: the standalone URL, or the cluster's seed nodes
    /// in turn.
    urls: Vec<String>,
    timeout: Duration,
    /// The listening task, started by the first subscriber and stopped
    /// when the store's last handle goes.
    task: OnceLock<tokio::task::JoinHandle<()>>,
}

impl News {
    pub(crate) fn new(urls: Vec<String>, timeout: Duration) -> Self {
        Self {
            origin: rand::random(),
            sender: broadcast::channel(BACKLOG).0,
            urls,
            timeout,
            task: OnceLock::new(),
        }
    }

    /// Tells the other nodes that this one admitted into `event`. Sent on a
    /// task of its own: the scheduler's tick does not wait for it, and a
    /// failure only leaves the others to their periodic read.
    pub(crate) fn publish(&self, conn: &Conn, event: &EventId) {
        let message = format!("{:016x} {}", self.origin, event.as_str());
        let conn = conn.clone();
        let timeout = self.timeout;
        tokio::spawn(async move {
            let mut cmd = redis::cmd("PUBLISH");
            cmd.arg(CHANNEL).arg(message);
            if let Err(e) = conn.query::<i64>(&cmd, timeout).await {
                tracing::debug!(error = %e, "admission news not published");
            }
        });
    }

    /// A receiver of the events other nodes admit into, starting the
    /// listening task on the first call.
    pub(crate) fn subscribe(self: &Arc<Self>) -> broadcast::Receiver<EventId> {
        let receiver = self.sender.subscribe();
        // The task holds only a weak handle, so dropping the store ends it.
        self.task
            .get_or_init(|| tokio::spawn(listen(Arc::downgrade(self))));
        receiver
    }

    /// The event of a message from another instance; `None` for this
    /// instance's own messages and for anything malformed.
    fn parse(&self, payload: &str) -> Option<EventId> {
        let (origin, event) = payload.split_once(' ')?;
        if u64::from_str_radix(origin, 16).ok()? == self.origin {
            return None;
        }
        EventId::new(event).ok()
    }
}

impl Drop for News {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

/// Subscribes, forwards what it hears, and subscribes again after any
/// failure (with a pause that grows to 5 s), trying the seed nodes in turn.
async fn listen(news: std::sync::Weak<News>) {
    let mut pause = Duration::from_millis(100);
    for attempt in 0usize.. {
        let Some(n) = news.upgrade() else { return };
        let url = n.urls[attempt % n.urls.len().max(1)].clone();
        let timeout = n.timeout;
        drop(n);
        match subscribe_once(&url, timeout).await {
            Ok(pubsub) => {
                pause = Duration::from_millis(100);
                tracing::debug!(url = %redact(&url), "listening for other nodes' admissions");
                forward(&news, pubsub, timeout).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, url = %redact(&url), "admission news: cannot subscribe");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

async fn subscribe_once(
    url: &str,
    timeout: Duration,
) -> Result<redis::aio::PubSub, crate::StoreError> {
    bounded(timeout, async {
        let client = super::conn::client(url)?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(CHANNEL).await?;
        Ok(pubsub)
    })
    .await
}

/// Forwards messages until the subscription ends or stops answering.
async fn forward(news: &std::sync::Weak<News>, pubsub: redis::aio::PubSub, timeout: Duration) {
    let (mut sink, mut stream) = pubsub.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.reset();
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else { return };
                let Some(n) = news.upgrade() else { return };
                let Ok(payload) = message.get_payload::<String>() else { continue };
                if let Some(event) = n.parse(&payload) {
                    // No receiver left is not an error: the node stopped listening.
                    let _ = n.sender.send(event);
                }
            }
            _ = ping.tick() => {
                if news.strong_count() == 0 {
                    return;
                }
                let alive = tokio::time::timeout(timeout, sink.ping::<String>()).await;
                if !matches!(alive, Ok(Ok(_))) {
                    return;
                }
            }
        }
    }
}

/// A URL for the log, without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_and_malformed_messages_are_skipped() {
        let news = News::new(vec!["redis://127.0.0.1/".into()], Duration::from_secs(1));
        let other = format!("{:016x} drop", news.origin.wrapping_add(1));
        assert_eq!(news.parse(&other), Some(EventId::new("drop").unwrap()));
        assert_eq!(news.parse(&format!("{:016x} drop", news.origin)), None);
        assert_eq!(news.parse("drop"), None);
        assert_eq!(news.parse("zz drop"), None);
        assert_eq!(
            news.parse(&format!("{:016x} bad id!", news.origin + 1)),
            None
        );
    }

    #[test]
    fn passwords_stay_out_of_the_log() {
        assert_eq!(
            redact("redis://:s3cret@10.0.0.1:6379"),
            "redis://…@10.0.0.1:6379"
        );
        assert_eq!(redact("redis://10.0.0.1:6379"), "redis://10.0.0.1:6379");
    }
}
