//! A child process's output read as it comes, by threads of its own: a child that writes more
//! than a pipe holds (64 KiB) would otherwise block in its write, stop doing its work, and
//! never exit for a `wait`. Its stderr is kept (the agent's log, for `stop` and for an early
//! exit's message); its stdout is read and dropped.

use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub struct ChildOutput {
    log: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

impl ChildOutput {
    /// Takes the child's piped stdout and stderr and reads them from now on.
    pub fn read(child: &mut Child) -> ChildOutput {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        if let Some(mut err) = child.stderr.take() {
            let log = log.clone();
            readers.push(std::thread::spawn(move || {
                use std::io::Read;
                let mut buf = [0u8; 8192];
                while let Ok(n) = err.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut l) = log.lock() {
                        l.extend_from_slice(&buf[..n]);
                    }
                }
            }));
        }
        if let Some(mut out) = child.stdout.take() {
            readers.push(std::thread::spawn(move || {
                let _ = std::io::copy(&mut out, &mut std::io::sink());
            }));
        }
        ChildOutput { log, readers }
    }

    /// Waits for the readers (the child has exited: its pipes closed) and returns its stderr.
    pub fn finish(&mut self) -> String {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.log
            .lock()
            .map(|l| String::from_utf8_lossy(&l).into_owned())
            .unwrap_or_default()
    }
}
