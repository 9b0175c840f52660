//! A TCP proxy between one `anteroom` node and Redis that the test can cut
//! and heal, so that one node loses the store while the others keep it.
//! Cut: every open connection is closed and new ones are closed as soon as
//! they are accepted (the client sees a reset store, not a slow one).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct CutProxy {
    pub port: u16,
    open: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl CutProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (o, c) = (open.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !o.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                let mut list = c.lock().unwrap();
                list.retain(|h| !h.is_finished());
                list.push(task.abort_handle());
            }
        })
        .abort_handle();
        Self {
            port,
            open,
            conns,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Closes every connection and refuses new ones until [`Self::heal`].
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    pub fn heal(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
