//! The open connections of the HTTP endpoint, so that a full server closes an idle one
//! instead of refusing a scraper: 16 addresses x 16 idle connections (re-opened as they are
//! cut) filled a 256-connection bound, and 145 of 150 scrapes got 503. When the bound is
//! reached, the connection idle the longest (no request in flight: between keep-alive
//! requests, or before its first) is asked to close (hyper's graceful shutdown: an idle
//! connection closes at once, a busy one after its response) and the new one waits for its
//! place. The per-client bound and the header timeout stay as they are.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Notify;

/// One connection's state.
struct Conn {
    /// Requests being answered.
    in_flight: usize,
    /// Since when nothing is in flight (None: busy).
    idle_since: Option<Instant>,
    close: Arc<Notify>,
}

/// Every open connection, by id.
#[derive(Clone, Default)]
pub struct Registry(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    next: u64,
    conns: BTreeMap<u64, Conn>,
}

/// A connection's entry, removed when dropped.
pub struct Entry {
    registry: Registry,
    pub id: u64,
    /// Notified when the server wants this connection closed.
    pub close: Arc<Notify>,
}

impl Registry {
    /// Registers a new connection (idle: no request yet).
    pub fn open(&self) -> Entry {
        let close = Arc::new(Notify::new());
        let mut id = 0;
        if let Ok(mut i) = self.0.lock() {
            id = i.next;
            i.next += 1;
            i.conns.insert(
                id,
                Conn {
                    in_flight: 0,
                    idle_since: Some(Instant::now()),
                    close: close.clone(),
                },
            );
        }
        Entry {
            registry: self.clone(),
            id,
            close,
        }
    }

    /// A request of connection `id` starts.
    pub fn begin(&self, id: u64) {
        if let Ok(mut i) = self.0.lock() {
            if let Some(c) = i.conns.get_mut(&id) {
                c.in_flight += 1;
                c.idle_since = None;
            }
        }
    }

    /// A request of connection `id` was answered.
    pub fn end(&self, id: u64) {
        if let Ok(mut i) = self.0.lock() {
            if let Some(c) = i.conns.get_mut(&id) {
                c.in_flight = c.in_flight.saturating_sub(1);
                if c.in_flight == 0 {
                    c.idle_since = Some(Instant::now());
                }
            }
        }
    }

    /// Asks the connection idle the longest to close; false when none is idle. It leaves the
    /// idle set at once, so a second call picks another.
    pub fn close_oldest_idle(&self) -> bool {
        let Ok(mut i) = self.0.lock() else {
            return false;
        };
        let oldest = i
            .conns
            .iter()
            .filter_map(|(id, c)| c.idle_since.map(|t| (t, *id)))
            .min();
        let Some((_, id)) = oldest else {
            return false;
        };
        if let Some(c) = i.conns.get_mut(&id) {
            c.idle_since = None;
            c.close.notify_one();
        }
        true
    }

    /// Open connections.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |i| i.conns.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Ok(mut i) = self.registry.0.lock() {
            i.conns.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_is_closed_first() {
        let r = Registry::default();
        let a = r.open();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = r.open();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let c = r.open();
        r.begin(a.id); // a is busy: not idle
        assert!(r.close_oldest_idle());
        // b was asked: its notification is stored, a's and c's are not.
        let asked = |e: &Entry| {
            let n = e.close.notified();
            futures_lite_poll(n)
        };
        assert!(asked(&b));
        assert!(!asked(&a));
        assert!(!asked(&c));
        assert!(r.close_oldest_idle(), "then c");
        assert!(asked(&c));
        assert!(!r.close_oldest_idle(), "a is busy, none idle is left");
        r.end(a.id);
        assert!(r.close_oldest_idle(), "a is idle again");
        drop((a, b, c));
        assert!(r.is_empty());
    }

    /// Whether a stored notification is ready at once.
    fn futures_lite_poll(n: tokio::sync::futures::Notified<'_>) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_millis(10), n)
                .await
                .is_ok()
        })
    }
}
