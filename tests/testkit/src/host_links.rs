//! Veth pairs between the host's own network namespace and one traffic namespace: a program
//! on the host end (rocemon in the demo) serves on the host's localhost, traffic comes from
//! the namespace. Removed on drop (deleting the namespace deletes every pair with it).

use crate::netns::{run, unique_tag};
use anyhow::Result;

pub struct HostLinks {
    /// The traffic namespace.
    pub ns: String,
    /// (host end, namespace end) of each pair.
    pub links: Vec<(String, String)>,
}

impl HostLinks {
    /// A namespace `{prefix}-{tag}` and one pair per name in `names` (host end
    /// `{prefix}{tag}{name}`, at most 15 bytes), up, jumbo MTU.
    pub fn new(prefix: &str, names: &[&str]) -> Result<HostLinks> {
        let tag = unique_tag();
        let mut h = HostLinks {
            ns: format!("{prefix}-{tag}"),
            links: Vec::new(),
        };
        run("ip", &["netns", "add", &h.ns])?;
        run("ip", &["-n", &h.ns, "link", "set", "lo", "up"])?;
        for name in names {
            let host = format!("{prefix}{tag}{name}");
            let peer = format!("{host}p");
            run(
                "ip",
                &[
                    "link", "add", &host, "type", "veth", "peer", "name", &peer, "netns", &h.ns,
                ],
            )?;
            h.links.push((host.clone(), peer.clone()));
            run("ip", &["link", "set", &host, "mtu", "9000", "up"])?;
            run(
                "ip",
                &["-n", &h.ns, "link", "set", &peer, "mtu", "9000", "up"],
            )?;
        }
        Ok(h)
    }

    /// Whether anything of these links is left (after drop: nothing must be).
    pub fn leftovers(ns: &str, hosts: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        if run("ip", &["netns", "list"])
            .map(|o| String::from_utf8_lossy(&o.stdout).contains(ns))
            .unwrap_or(false)
        {
            out.push(format!("namespace {ns}"));
        }
        for h in hosts {
            if run("ip", &["link", "show", h]).is_ok() {
                out.push(format!("link {h}"));
            }
        }
        out
    }
}

impl Drop for HostLinks {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", &self.ns])
            .output();
        // A host end whose peer went with the namespace is gone too; make sure.
        for (host, _) in &self.links {
            let _ = std::process::Command::new("ip")
                .args(["link", "del", host])
                .output();
        }
    }
}
