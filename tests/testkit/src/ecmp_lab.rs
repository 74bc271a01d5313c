//! A real ECMP router in namespaces for the ECMP tests.

use crate::netns::{run, unique_tag};
use anyhow::{Context, Result};
use std::process::Command;

/// A real ECMP router in namespaces: a sender `s`, a router `r` with an equal-cost multipath
/// route over `uplinks` veth uplinks hashed on L4 (`fib_multipath_hash_policy=1`), and a
/// receiver `d`. Frames replayed from the sender (destination MAC = the router's, destination
/// IP [`EcmpLab::DST`]) are forwarded over the uplinks. Removed on drop.
pub struct EcmpLab {
    pub s: String,
    pub r: String,
    pub d: String,
    pub s_if: String,
    pub r_in: String,
    pub ups: Vec<String>,
}

/// Gives `dev` in namespace `ns` the address `cidr`, a 9000-byte MTU, and brings it up.
fn jumbo_up(ns: &str, dev: &str, cidr: &str) -> Result<()> {
    run("ip", &["-n", ns, "addr", "add", cidr, "dev", dev])?;
    run("ip", &["-n", ns, "link", "set", dev, "mtu", "9000", "up"])?;
    Ok(())
}

impl EcmpLab {
    /// Where the traffic goes (an address of the receiver).
    pub const DST: &'static str = "10.99.0.1";
    /// The sender's address.
    pub const SRC: &'static str = "10.88.0.1";

    pub fn new(uplinks: usize) -> Result<EcmpLab> {
        let tag = unique_tag();
        let lab = EcmpLab {
            s: format!("rcx-s-{tag}"),
            r: format!("rcx-r-{tag}"),
            d: format!("rcx-d-{tag}"),
            s_if: format!("xs{tag}"),
            r_in: format!("xr{tag}"),
            ups: (0..uplinks).map(|i| format!("u{i}{tag}")).collect(),
        };
        for ns in [&lab.s, &lab.r, &lab.d] {
            run("ip", &["netns", "add", ns])?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        let (s, r, d) = (&lab.s, &lab.r, &lab.d);
        run(
            "ip",
            &[
                "link", "add", &lab.s_if, "netns", s, "type", "veth", "peer", "name", &lab.r_in,
                "netns", r,
            ],
        )?;
        // The router's ingress MAC is the fixtures' destination MAC, so replayed frames are
        // addressed to it.
        let mac = crate::frames::DST_MAC
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        run("ip", &["-n", r, "link", "set", &lab.r_in, "address", &mac])?;
        jumbo_up(s, &lab.s_if, "10.88.0.1/24")?;
        jumbo_up(r, &lab.r_in, "10.88.0.2/24")?;
        let mut nexthops: Vec<String> = Vec::new();
        for (i, up) in lab.ups.iter().enumerate() {
            let dn = format!("d{i}{}", &up[2..]);
            run(
                "ip",
                &[
                    "link", "add", up, "netns", r, "type", "veth", "peer", "name", &dn, "netns", d,
                ],
            )?;
            jumbo_up(r, up, &format!("10.89.{i}.1/24"))?;
            jumbo_up(d, &dn, &format!("10.89.{i}.2/24"))?;
            let out = run(
                "ip",
                &[
                    "netns",
                    "exec",
                    d,
                    "cat",
                    &format!("/sys/class/net/{dn}/address"),
                ],
            )?;
            let dmac = String::from_utf8_lossy(&out.stdout).trim().to_string();
            run(
                "ip",
                &[
                    "-n",
                    r,
                    "neigh",
                    "replace",
                    &format!("10.89.{i}.2"),
                    "lladdr",
                    &dmac,
                    "dev",
                    up,
                    "nud",
                    "permanent",
                ],
            )?;
            nexthops.extend([
                "nexthop".into(),
                "via".into(),
                format!("10.89.{i}.2"),
                "dev".into(),
                up.clone(),
                "weight".into(),
                "1".into(),
            ]);
        }
        run(
            "ip",
            &[
                "-n",
                d,
                "addr",
                "add",
                &format!("{}/32", Self::DST),
                "dev",
                "lo",
            ],
        )?;
        for (k, v) in [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.fib_multipath_hash_policy", "1"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
        ] {
            run(
                "ip",
                &["netns", "exec", r, "sysctl", "-qw", &format!("{k}={v}")],
            )?;
        }
        let mut route: Vec<&str> = vec!["-n", r, "route", "add", "10.99.0.0/24"];
        route.extend(nexthops.iter().map(String::as_str));
        run("ip", &route)?;
        Ok(lab)
    }

    /// The uplinks' transmit counters (packets, bytes), as the kernel counts them.
    pub fn uplink_tx(&self) -> Result<Vec<(u64, u64)>> {
        self.ups
            .iter()
            .map(|up| {
                let read = |f: &str| -> Result<u64> {
                    let out = run(
                        "ip",
                        &[
                            "netns",
                            "exec",
                            &self.r,
                            "cat",
                            &format!("/sys/class/net/{up}/statistics/{f}"),
                        ],
                    )?;
                    String::from_utf8_lossy(&out.stdout)
                        .trim()
                        .parse()
                        .context("counter")
                };
                Ok((read("tx_packets")?, read("tx_bytes")?))
            })
            .collect()
    }

    /// Replays a capture from the sender at full speed.
    pub fn send(&self, pcap: &std::path::Path) -> Result<()> {
        let p = pcap.to_str().context("path")?;
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.s,
                "tcpreplay",
                "-q",
                "--topspeed",
                "-i",
                &self.s_if,
                p,
            ],
        )?;
        Ok(())
    }
}

impl Drop for EcmpLab {
    fn drop(&mut self) {
        for ns in [&self.s, &self.r, &self.d] {
            let _ = Command::new("ip").args(["netns", "delete", ns]).output();
        }
    }
}
