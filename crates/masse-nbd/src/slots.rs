//! Connection slots: admission of new clients, in the acceptor's thread.
//!
//! At most `max_connections` are served at once, handshakes included. When all
//! slots are taken, a new client is admitted in place of one that is idle
//! (nothing in flight, silent for `idle_timeout`) or still silent in its
//! handshake after a second; otherwise it is told why it is refused. Idle
//! connections are never closed while there is room.
//!
//! Separate from the server's run loop because admission is a policy with its own
//! state (the table of live connections, the refusal log and the count of
//! clients being refused) that only the acceptor touches.

use crate::conn::{serve_connection, ConnInfo, HANDSHAKE, TRANSMISSION};
use crate::shared::Shared;
use crate::transport::{Listener, Stream};
use std::collections::HashMap;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A live connection as the acceptor holds it.
struct Slot {
    /// A second handle on the socket, to shut it down from here.
    ctl: Stream,
    thread: JoinHandle<()>,
    info: Arc<ConnInfo>,
    /// Closed to make room; its thread is still finishing.
    closing: bool,
}

/// The acceptor's table of connections and its admission rules.
pub(crate) struct Conns {
    sh: Arc<Shared>,
    live: HashMap<u64, Slot>,
    next_id: u64,
    epoch: Instant,
    last_refusal_note: Option<Instant>,
    refused_since_note: u64,
    /// Connections being told the server is full, now.
    refusing: Arc<AtomicUsize>,
}

/// A client still silent in its handshake after this may be closed to make room.
const HANDSHAKE_GRACE: Duration = Duration::from_secs(1);

/// Clients being told the server is full at once; beyond, they are just closed.
const MAX_REFUSING: usize = 16;

impl Conns {
    pub(crate) fn new(sh: Arc<Shared>) -> Conns {
        Conns {
            sh,
            live: HashMap::new(),
            next_id: 0,
            epoch: Instant::now(),
            last_refusal_note: None,
            refused_since_note: 0,
            refusing: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Admit (or refuse) every client waiting on `l`.
    pub(crate) fn accept_all(&mut self, l: &Listener) {
        loop {
            let s = match l.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    eprintln!("masse-nbd: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            };
            self.live.retain(|_, c| !c.thread.is_finished());
            if !self.make_room() {
                self.refuse(s);
                continue;
            }
            self.start(s);
        }
    }

    /// Whether a new connection fits, closing an idle one to make room if needed:
    /// the one silent longest among those idle for `idle_timeout`, or still silent
    /// in their handshake after `HANDSHAKE_GRACE`.
    fn make_room(&mut self) -> bool {
        let open = self.live.values().filter(|c| !c.closing).count();
        if open < self.sh.cfg.max_connections {
            return true;
        }
        let idle = self.sh.cfg.idle_timeout;
        let victim = self
            .live
            .iter()
            .filter(|(_, c)| !c.closing)
            .filter_map(|(&id, c)| {
                let quiet = c.info.silent_for();
                let evictable = match c.info.phase.load(Relaxed) {
                    HANDSHAKE => quiet >= HANDSHAKE_GRACE,
                    TRANSMISSION => {
                        !idle.is_zero() && quiet >= idle && c.info.busy.load(Relaxed) == 0
                    }
                    _ => false,
                };
                evictable.then_some((quiet, id))
            })
            .max();
        let Some((quiet, id)) = victim else {
            return false;
        };
        if let Some(c) = self.live.get_mut(&id) {
            if self.sh.cfg.verbose {
                eprintln!(
                    "masse-nbd: {}: closing a connection silent for {} s to admit a new client",
                    c.ctl.peer(),
                    quiet.as_secs()
                );
            }
            c.closing = true;
            c.ctl.shutdown(Shutdown::Both);
        }
        self.sh.stats.evicted.fetch_add(1, Relaxed);
        true
    }

    /// Serve `s` on a thread of its own, in a new slot.
    fn start(&mut self, s: Stream) {
        let Ok(ctl) = s.try_clone() else { return };
        self.sh.stats.connections.fetch_add(1, Relaxed);
        let id = self.next_id;
        self.next_id += 1;
        let info = Arc::new(ConnInfo::new(id, self.epoch));
        let (sh, i) = (self.sh.clone(), info.clone());
        match std::thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || serve_connection(sh, s, i))
        {
            Ok(thread) => {
                let slot = Slot {
                    ctl,
                    thread,
                    info,
                    closing: false,
                };
                self.live.insert(id, slot);
            }
            Err(e) => {
                eprintln!("masse-nbd: cannot start a connection thread: {e}");
                ctl.shutdown(Shutdown::Both);
            }
        }
    }

    /// Refuse a client, telling it why when few others are being told.
    fn refuse(&mut self, s: Stream) {
        self.sh.stats.refused.fetch_add(1, Relaxed);
        self.refused_since_note += 1;
        let note_due = self
            .last_refusal_note
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if note_due {
            eprintln!(
                "masse-nbd: all {} connection slots are busy: refused {} new client(s) \
                 (see --max-connections, --idle-timeout)",
                self.sh.cfg.max_connections, self.refused_since_note
            );
            self.last_refusal_note = Some(Instant::now());
            self.refused_since_note = 0;
        }
        if self.refusing.fetch_add(1, SeqCst) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, SeqCst);
            s.shutdown(Shutdown::Both);
            return;
        }
        let refusing = self.refusing.clone();
        let why = format!(
            "server busy: all {} connection slots are in use; try again later",
            self.sh.cfg.max_connections
        );
        let spawned = std::thread::Builder::new()
            .name("nbd-refuse".into())
            .spawn(move || {
                crate::handshake::refuse(s, &why);
                refusing.fetch_sub(1, SeqCst);
            });
        if spawned.is_err() {
            self.refusing.fetch_sub(1, SeqCst);
        }
    }

    /// At stop: shut the read side of every connection (no new requests are
    /// taken), then wait for each to answer what it has read and close.
    pub(crate) fn close_all(mut self) {
        for c in self.live.values() {
            c.ctl.shutdown(Shutdown::Read);
        }
        for (_, c) in self.live.drain() {
            let _ = c.thread.join();
        }
    }
}
