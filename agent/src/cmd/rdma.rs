//! `rocemon rdma`: the RDMA NIC's port counters and the host's RC connections with their
//! derived UDP source ports (and predicted ECMP paths with a hash model), for hosts whose
//! RoCE bypasses the kernel.

use crate::config::cli::{OutputFormat, RdmaArgs};
use anyhow::Result;

pub fn rdma(args: RdmaArgs) -> Result<()> {
    use crate::sources::rdma;
    let connections = rdma::load_connections(args.qp_json.as_deref(), args.cm_id_json.as_deref())?;
    let model = match &args.config {
        Some(p) => {
            crate::config::detectors(&crate::config::load_file(p)?)?
                .2
                .hash
        }
        None => None,
    };
    let path_of = |c: &rdma::Connection| {
        let k = c.flow_key()?;
        model
            .as_ref()
            .map(|m| m.path(&crate::detect::ecmp::fields(&k)))
    };
    let counters = rdma::port_counters(&args.sysfs_root);
    match args.format {
        OutputFormat::Json => {
            let conns: Vec<serde_json::Value> = connections
                .iter()
                .map(|c| {
                    let mut v = serde_json::to_value(c).unwrap_or_default();
                    v["predicted_path"] =
                        path_of(c).map(serde_json::Value::from).unwrap_or_default();
                    v
                })
                .collect();
            let ctrs: Vec<serde_json::Value> = counters
                .iter()
                .map(|c| serde_json::json!({"device": c.device, "port": c.port, "netdev": c.netdev, "group": c.group, "counter": c.name, "value": c.value}))
                .collect();
            println!(
                "{}",
                serde_json::json!({"port_counters": ctrs, "connections": conns})
            );
        }
        OutputFormat::Table => {
            println!("RDMA PORT COUNTERS {}", counters.len());
            for c in &counters {
                println!(
                    "  {}/{} ({}) {}/{} {}",
                    c.device, c.port, c.netdev, c.group, c.name, c.value
                );
            }
            println!("\nRC CONNECTIONS {}", connections.len());
            for c in &connections {
                let path = path_of(c)
                    .map(|p| format!("  predicted path {p}"))
                    .unwrap_or_default();
                println!(
                    "  {} qp 0x{:x} -> 0x{:x} {} -> {} udp sport {}{path}",
                    c.device,
                    c.lqpn,
                    c.rqpn,
                    c.src.as_deref().unwrap_or("?"),
                    c.dst.as_deref().unwrap_or("?"),
                    c.sport
                );
            }
        }
    }
    Ok(())
}
