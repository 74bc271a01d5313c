//! A fleet on one machine: one namespace for the agents and their Prometheus servers (they
//! reach each other on its loopback), one for the senders, and a veth pair per host between
//! them (the host's end in the first). Both namespaces are deleted on drop, which deletes the
//! pairs.

use crate::netns::{run, unique_tag};
use anyhow::Result;
use std::process::Command;

pub struct Fleet {
    /// Where the agents and Prometheus run.
    pub ns: String,
    /// Where the traffic comes from.
    pub senders: String,
    /// Per host: (the agent's interface, the sender's interface).
    pub links: Vec<(String, String)>,
}

impl Fleet {
    pub fn new(hosts: usize) -> Result<Fleet> {
        let tag = unique_tag();
        let f = Fleet {
            ns: format!("rfl-a-{tag}"),
            senders: format!("rfl-b-{tag}"),
            links: (0..hosts)
                .map(|i| (format!("rfa{i}{tag}"), format!("rfb{i}{tag}")))
                .collect(),
        };
        run("ip", &["netns", "add", &f.ns])?;
        run("ip", &["netns", "add", &f.senders])?;
        run("ip", &["-n", &f.ns, "link", "set", "lo", "up"])?;
        run("ip", &["-n", &f.senders, "link", "set", "lo", "up"])?;
        for (a, b) in &f.links {
            run(
                "ip",
                &[
                    "link", "add", a, "netns", &f.ns, "type", "veth", "peer", "name", b, "netns",
                    &f.senders,
                ],
            )?;
            run("ip", &["-n", &f.ns, "link", "set", a, "mtu", "9000", "up"])?;
            run(
                "ip",
                &["-n", &f.senders, "link", "set", b, "mtu", "9000", "up"],
            )?;
        }
        Ok(f)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for ns in [&self.ns, &self.senders] {
            let _ = Command::new("ip").args(["netns", "delete", ns]).output();
        }
    }
}
