//! One hostile client of the `/metrics` endpoint, from addresses of its own on loopback: many
//! connections that send nothing (re-opened every second, as a timeout cuts them) and many
//! threads of wrong passwords, each one new (no cache helps). Shared by the robustness test
//! and the benchmark, which measure what a scraper on another address still gets.

use crate::netns::{connect_from_in, http_request_in};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `Basic base64(user:password)`.
pub fn basic_auth(user_pass: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

/// The attack, running until dropped (or [`Hostile::stop`]).
pub struct Hostile {
    stop: Arc<AtomicBool>,
    guesses: Arc<AtomicU64>,
    started: Instant,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hostile {
    /// Starts `idle` idle connections from 127.0.0.2 and `guessers` password-guessing threads
    /// from 127.0.0.3 against `addr` inside namespace `ns`.
    pub fn start(ns: &str, addr: &str, idle: usize, guessers: u64) -> Hostile {
        let stop = Arc::new(AtomicBool::new(false));
        let guesses = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        {
            let (ns, addr, stop) = (ns.to_string(), addr.to_string(), stop.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let from = Some(Ipv4Addr::new(127, 0, 0, 2));
                    let held: Vec<_> = (0..idle)
                        .filter_map(|_| connect_from_in(&ns, from, &addr).ok())
                        .collect();
                    std::thread::sleep(Duration::from_secs(1));
                    drop(held);
                }
            }));
        }
        for i in 0..guessers {
            let (ns, addr) = (ns.to_string(), addr.to_string());
            let (stop, guesses) = (stop.clone(), guesses.clone());
            threads.push(std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let h = basic_auth(&format!("prometheus:guess-{i}-{n}"));
                    let from = Some(Ipv4Addr::new(127, 0, 0, 3));
                    let _ = http_request_in(&ns, from, &addr, "/metrics", &[("Authorization", &h)]);
                    guesses.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        Hostile {
            stop,
            guesses,
            started: Instant::now(),
            threads,
        }
    }

    /// Stops the attack; returns the wrong passwords sent per second.
    pub fn stop(mut self) -> f64 {
        self.halt();
        self.guesses.load(Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.halt();
    }
}
