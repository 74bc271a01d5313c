//! What hosts with hardware RDMA NICs expose when their RoCE traffic bypasses the kernel:
//!
//! - port counters under `<sysfs>/class/infiniband/<dev>/ports/<port>/counters/` and
//!   `hw_counters/` (CNPs sent and handled, ECN-marked packets, sequence errors, ...), with the
//!   netdev of the port from `gid_attrs/ndevs/0`;
//! - the RC queue pairs of `rdma -j res show qp` (iproute2), joined with the addresses of
//!   `rdma -j res show cm_id`, from which each connection's UDP source port follows by the
//!   drivers' formula ([`udp_sport`]), so the predicted ECMP model covers these hosts too.

use crate::config::rdma::RdmaConfig;
use serde::Deserialize;
use std::path::Path;

/// One counter of one RDMA port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortCounter {
    pub device: String,
    pub port: String,
    /// The netdev of the port (RoCE), empty when the driver names none.
    pub netdev: String,
    /// `counters` or `hw_counters`.
    pub group: &'static str,
    pub name: String,
    pub value: u64,
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn sorted_dir(p: &Path) -> Vec<(String, std::path::PathBuf)> {
    let mut v: Vec<_> = std::fs::read_dir(p)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().to_string(), e.path()))
        .collect();
    v.sort();
    v
}

/// Every readable counter of every RDMA port under `sysfs_root` (normally `/sys`). No RDMA
/// device means an empty list, not an error; unreadable or non-numeric files are skipped.
pub fn port_counters(sysfs_root: &Path) -> Vec<PortCounter> {
    let mut out = Vec::new();
    for (device, dev_path) in sorted_dir(&sysfs_root.join("class/infiniband")) {
        for (port, port_path) in sorted_dir(&dev_path.join("ports")) {
            let netdev = read_trim(&port_path.join("gid_attrs/ndevs/0")).unwrap_or_default();
            for group in ["counters", "hw_counters"] {
                for (name, file) in sorted_dir(&port_path.join(group)) {
                    if let Some(value) = read_trim(&file).and_then(|s| s.parse::<u64>().ok()) {
                        out.push(PortCounter {
                            device: device.clone(),
                            port: port.clone(),
                            netdev: netdev.clone(),
                            group,
                            name,
                            value,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The UDP source port Linux RDMA drivers (mlx5, rxe, irdma, hns) derive from a connection's
/// two QP numbers when no flow label is set (`rdma_calc_flow_label` and
/// `rdma_flow_label_to_udp_sport`): the same on both sides, always in 0xC000-0xFFFF.
pub fn udp_sport(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xF_FFFF) as u32;
    (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) | 0xC000) as u16
}

/// A queue pair as `rdma -j res show qp` prints it (the fields rocemon uses).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ResQp {
    #[serde(default)]
    pub ifname: String,
    #[serde(default)]
    pub port: Option<u32>,
    pub lqpn: u32,
    #[serde(default)]
    pub rqpn: Option<u32>,
    #[serde(rename = "type", default)]
    pub qp_type: String,
    #[serde(default)]
    pub state: String,
}

/// A connection manager id as `rdma -j res show cm_id` prints it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ResCmId {
    #[serde(default)]
    pub lqpn: Option<u32>,
    #[serde(rename = "src-addr", default)]
    pub src_addr: Option<String>,
    #[serde(rename = "dst-addr", default)]
    pub dst_addr: Option<String>,
}

/// An RC connection of this host, with the UDP source port its packets carry.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Connection {
    pub device: String,
    pub lqpn: u32,
    pub rqpn: u32,
    pub state: String,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub sport: u16,
}

impl Connection {
    /// The connection's outgoing flow key (destination QP = the remote QP), when its addresses
    /// are known.
    pub fn flow_key(&self) -> Option<agent_common::FlowKey> {
        let src: std::net::IpAddr = self.src.as_deref()?.parse().ok()?;
        let dst: std::net::IpAddr = self.dst.as_deref()?.parse().ok()?;
        let mut k = agent_common::FlowKey {
            sport: self.sport,
            dest_qp: self.rqpn,
            ..Default::default()
        };
        match (src, dst) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
                k.ip_version = 4;
                k.src[..4].copy_from_slice(&s.octets());
                k.dst[..4].copy_from_slice(&d.octets());
            }
            (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
                k.ip_version = 6;
                k.src = s.octets();
                k.dst = d.octets();
            }
            _ => return None,
        }
        Some(k)
    }
}

/// Runs `rdma -j res show <what>`; `None` when iproute2's `rdma` tool is not installed or the
/// kernel has no RDMA resources to show.
pub fn rdma_res(what: &str) -> Option<String> {
    let out = std::process::Command::new("rdma")
        .args(["-j", "res", "show", what])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Parses `rdma -j res show qp` and `rdma -j res show cm_id` output and derives the RC
/// connections (QPs with a remote QP). Addresses come from the cm_id of the same local QP.
pub fn connections(
    qp_json: &str,
    cm_id_json: Option<&str>,
) -> Result<Vec<Connection>, serde_json::Error> {
    let qps: Vec<ResQp> = serde_json::from_str(qp_json)?;
    let cms: Vec<ResCmId> = match cm_id_json {
        Some(j) => serde_json::from_str(j)?,
        None => Vec::new(),
    };
    let strip_port = |a: &String| {
        // "10.0.0.1:4791" or "[fd00::1]:4791" -> the address
        match a.rsplit_once(':') {
            Some((h, p))
                if p.chars().all(|c| c.is_ascii_digit())
                    && (h.starts_with('[') || !h.contains(':')) =>
            {
                h.trim_start_matches('[').trim_end_matches(']').to_string()
            }
            _ => a.clone(),
        }
    };
    Ok(qps
        .into_iter()
        .filter(|q| q.qp_type == "RC")
        .filter_map(|q| {
            let rqpn = q.rqpn?;
            let cm = cms.iter().find(|c| c.lqpn == Some(q.lqpn));
            Some(Connection {
                device: q.ifname.clone(),
                lqpn: q.lqpn,
                rqpn,
                state: q.state.clone(),
                src: cm.and_then(|c| c.src_addr.as_ref().map(strip_port)),
                dst: cm.and_then(|c| c.dst_addr.as_ref().map(strip_port)),
                sport: udp_sport(q.lqpn, rqpn),
            })
        })
        .collect())
}

/// The host's RC connections from the RDMA resource view, for the predicted ECMP view.
#[derive(Default)]
pub struct RdmaView {
    pub connections: Vec<Connection>,
    /// When `rdma res` was last read (`None`: read at the next refresh).
    pub read_at: Option<std::time::Instant>,
}

/// How often `rdma res` is read (connections of a training job live for minutes to days).
const RDMA_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

impl RdmaView {
    /// Reads the connections again when the refresh interval has passed.
    pub fn refresh(&mut self, config: &RdmaConfig) {
        if !config.enabled() || self.read_at.is_some_and(|t| t.elapsed() < RDMA_REFRESH) {
            return;
        }
        self.read_at = Some(std::time::Instant::now());
        match load_connections(config.qp_json.as_deref(), config.cm_id_json.as_deref()) {
            Ok(c) => self.connections = c,
            Err(e) => log::warn!("RDMA connections: {e}"),
        }
    }
}

/// Reads the host's RC connections: from the recorded files when given (a missing file is an
/// error naming it), else from `rdma res` (absent tool or no RDMA devices: none).
pub fn load_connections(
    qp_json: Option<&Path>,
    cm_id_json: Option<&Path>,
) -> Result<Vec<Connection>, crate::error::UsageError> {
    use crate::error::UsageError;
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map_err(|e| UsageError::BadConfig(format!("cannot read {}: {e}", p.display())))
    };
    let qp = match qp_json {
        Some(p) => Some(read(p)?),
        None => rdma_res("qp"),
    };
    let cm = match cm_id_json {
        Some(p) => Some(read(p)?),
        None => rdma_res("cm_id"),
    };
    match &qp {
        Some(q) => connections(q, cm.as_deref())
            .map_err(|e| UsageError::BadConfig(format!("cannot parse `rdma -j res` output: {e}"))),
        None => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_port_formula_known_pairs() {
        // 0x11 * 0x12 = 0x132: no high bits to fold; 0x132 | 0xC000.
        assert_eq!(udp_sport(0x11, 0x12), 0xC132);
        // 0x1234 * 0x5678 = 0x6260060: v ^= v >> 20 -> 0x6260060 ^ 0x62 = 0x6260002;
        // fl = 0x60002; (0x0002 ^ (0x60000 >> 14 = 0x18)) | 0xC000 = 0xC01A.
        assert_eq!(udp_sport(0x1234, 0x5678), 0xC01A);
        // 24-bit QPNs: the product needs the 40-bit fold too.
        let v = 0xFF_FFFFu64 * 0xFF_FFFE;
        let v = v ^ (v >> 20);
        let v = v ^ (v >> 40);
        let fl = (v & 0xF_FFFF) as u32;
        assert_eq!(
            udp_sport(0xFF_FFFF, 0xFF_FFFE),
            (((fl & 0x3FFF) ^ (fl >> 14)) | 0xC000) as u16
        );
        for (a, b) in [(1u32, 2u32), (0x1f, 0x2e1), (0x80_0001, 0x3), (0, 7)] {
            assert_eq!(udp_sport(a, b), udp_sport(b, a), "the same on both sides");
            assert!(udp_sport(a, b) >= 0xC000, "a {a:?}, b {b:?}");
        }
    }

    #[test]
    fn parses_recorded_rdma_res_output() {
        // Recorded from `rdma -j res show qp` / `rdma -j res show cm_id` (iproute2 6.1, rxe).
        let qp = r#"[{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"[ib_core]"},
{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":17,"rqpn":18,"type":"RC","state":"RTS","rq-psn":10318838,"sq-psn":3817290,"path-mig-state":"MIGRATED","pdn":3,"pid":2412,"comm":"ib_write_bw"},
{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":19,"rqpn":20,"type":"RC","state":"RTS","rq-psn":1,"sq-psn":1,"path-mig-state":"MIGRATED","pdn":4,"pid":2413,"comm":"ib_send_bw"},
{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":21,"type":"UD","state":"RTS","sq-psn":0,"pdn":5,"pid":2414,"comm":"ud_app"}]"#;
        let cm = r#"[{"ifindex":0,"ifname":"rxe0","port":1,"ps":"TCP","lqpn":17,"qp-type":"RC","state":"CONNECT","src-addr":"10.0.0.1:39541","dst-addr":"10.0.0.2:18515","pid":2412,"comm":"ib_write_bw"}]"#;
        let c = connections(qp, Some(cm)).unwrap();
        assert_eq!(c.len(), 2, "RC QPs with a remote QP only");
        assert_eq!(
            (c[0].lqpn, c[0].rqpn, c[0].sport),
            (17, 18, udp_sport(17, 18))
        );
        assert_eq!(c[0].src.as_deref(), Some("10.0.0.1"));
        assert_eq!(c[0].dst.as_deref(), Some("10.0.0.2"));
        assert_eq!(c[1].src, None);
        assert!(connections("not json", None).is_err());
        assert_eq!(connections("[]", None).unwrap(), vec![]);
    }

    fn write(root: &Path, rel: &str, v: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    }

    #[test]
    fn fake_sysfs_trees_of_mlx5_and_rxe() {
        let root = std::env::temp_dir().join(format!("rocemon-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // mlx5: counters and hw_counters, netdev via gid_attrs
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data",
            "123456\n",
        );
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data",
            "654321\n",
        );
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent",
            "42\n",
        );
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/rp_cnp_handled",
            "40\n",
        );
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/np_ecn_marked_roce_packets",
            "99\n",
        );
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence",
            "3\n",
        );
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/lifespan",
            "10\n",
        );
        write(
            &root,
            "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0",
            "ens1f0np0\n",
        );
        // rxe: hw_counters only, different names
        write(
            &root,
            "class/infiniband/rxe0/ports/1/hw_counters/sent_pkts",
            "1000\n",
        );
        write(
            &root,
            "class/infiniband/rxe0/ports/1/hw_counters/rcvd_seq_err",
            "2\n",
        );
        write(
            &root,
            "class/infiniband/rxe0/ports/1/hw_counters/garbage",
            "n/a\n",
        );
        write(
            &root,
            "class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0",
            "eth0\n",
        );
        let c = port_counters(&root);
        assert_eq!(c.len(), 9, "{c:?}");
        let find = |d: &str, n: &str| {
            c.iter()
                .find(|x| x.device == d && x.name == n)
                .unwrap()
                .clone()
        };
        let cnp = find("mlx5_0", "np_cnp_sent");
        assert_eq!(
            (cnp.value, cnp.group, cnp.netdev.as_str(), cnp.port.as_str()),
            (42, "hw_counters", "ens1f0np0", "1")
        );
        assert_eq!(find("mlx5_0", "port_rcv_data").group, "counters");
        assert_eq!(find("rxe0", "rcvd_seq_err").value, 2);
        assert!(
            port_counters(&root.join("nothing-here")).is_empty(),
            "no RDMA device: no error, no series"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
