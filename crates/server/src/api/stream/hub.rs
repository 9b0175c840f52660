//! The loop of an event's push hub (see [`crate::push`]): one stats read
//! per tick while the event has streams on this node.

use std::sync::Arc;

use anteroom_store::EventId;

use crate::metrics::timed_store;
use crate::push::{Hub, Subscription, TICK};
use crate::state::AppState;

/// Subscribes a stream to `event`'s hub, starting the hub's loop if it is
/// the event's first stream on this node.
pub fn subscribe(state: &Arc<AppState>, event: &EventId) -> Subscription {
    let (subscription, started) = state.push.subscribe(event, || {
        let stats = state
            .event(event)
            .map(|rt| rt.live.snapshot().stats)
            .unwrap_or_default();
        (stats.admitted_total, stats.waiting)
    });
    if let Some(hub) = started {
        tokio::spawn(run(state.clone(), event.clone(), hub));
    }
    subscription
}

/// Wakes this node's hubs when another node admits (the shared store's
/// admission news, see [`anteroom_store::QueueStore::admissions_elsewhere`]):
/// without it, a visitor streamed here heard of an admission made elsewhere
/// only at the hub's next tick, holding a slot nobody used meanwhile. The
/// ticks stay, for news lost on the way.
pub fn listen_to_other_nodes(state: &Arc<AppState>) {
    let Some(mut news) = state.store.admissions_elsewhere() else {
        return;
    };
    let st = state.clone();
    crate::locks::lock(&state.tasks).spawn(async move {
        let mut closing = st.push.closing();
        loop {
            tokio::select! {
                heard = news.recv() => match heard {
                    Ok(event) => {
                        metrics::counter!("anteroom_admission_news_total").increment(1);
                        st.push.kick(&event);
                    }
                    // Fell behind: the next news (or tick) wakes the hubs.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = closing.wait_for(|c| *c) => return,
            }
        }
    });
}

/// A hub's loop: one stats read per tick while the event has streams here.
async fn run(state: Arc<AppState>, event: EventId, hub: Arc<Hub>) {
    let mut every = tokio::time::interval(TICK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = state.push.closing();
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = hub.kick.notified() => {
                // The read below stands for this tick too.
                every.reset();
            }
            _ = closing.wait_for(|c| *c) => return,
        }
        if state.push.retire_if_idle(&event, &hub) {
            return;
        }
        let Some(rt) = state.event(&event) else {
            state.push.retire(&event, &hub);
            return;
        };
        let phase = state.phase_of(&rt);
        let read = timed_store("stream_tick", state.store.stats(&event)).await;
        metrics::counter!("anteroom_stream_fanout_reads_total").increment(1);
        match read {
            Ok(stats) => hub.publish(stats.admitted_total, stats.waiting, phase),
            // A store that does not answer: the streams' own reads say
            // DRAINING; nothing is woken for admissions meanwhile.
            Err(_) => continue,
        }
    }
}
