//! Test helper for the crash test: joins members into an embedded store as
//! fast as it can and prints every acknowledged join (`<task> <seq> <member>`)
//! on stdout, until it is killed. Usage: `crash_writer <data dir> <event>`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anteroom_core::score::JoinScoring;
use anteroom_store::embedded::{EmbeddedOptions, EmbeddedStore};
use anteroom_store::{EventId, QueueStore};

/// Concurrent writers, so acknowledgements come from shared group commits.
const TASKS: usize = 16;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: crash_writer <dir> <event>")?);
    let event = EventId::new(&args.next().ok_or("usage: crash_writer <dir> <event>")?)?;
    let store = Arc::new(EmbeddedStore::open(&dir, EmbeddedOptions::default()).await?);
    let now = store.now_us(&event).await?;
    let scoring = JoinScoring {
        opens_at_us: now,
        prewindow_score: -1,
        tiebreak: 0,
        behind: false,
    };
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (store, event, out) = (store.clone(), event.clone(), out.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0u64.. {
                let m = format!("w{t:02}-{i:09}");
                store.join(&event, &m, &scoring).await?;
                // Printed only after the join was acknowledged (durable).
                let o = out.lock().map_err(|_| "stdout lock poisoned")?;
                writeln!(&*o, "{t} {i} {m}")?;
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    Ok(())
}
