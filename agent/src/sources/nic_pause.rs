//! The NIC's own pause counters, for hosts whose PFC frames never reach the kernel (the NIC
//! generates and consumes them in hardware): per-priority PFC requests and indications from
//! the kernel's DCB interface (rtnetlink `RTM_GETDCB` / `DCB_CMD_IEEE_GET`, the source of
//! iproute2's `dcb pfc show`), and the driver's ethtool statistics where it has them (mlx5
//! `rx_prio3_pause`, bnxt `rx_pfc_ena_frames_pri3`, ice `rx_priority_3_xoff.nic`, and pause
//! durations and storm events by their own names). A device with neither (veth, most virtual
//! NICs) gives nothing: no series.
//!
//! The decoding is split from the I/O (`decode_dcb_reply`, `classify_ethtool`), so tests feed
//! recorded netlink answers and recorded driver name lists.

/// Where a NIC counter comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Dcb,
    Ethtool,
}

impl Origin {
    pub fn name(self) -> &'static str {
        match self {
            Origin::Dcb => "dcb",
            Origin::Ethtool => "ethtool",
        }
    }
}

/// PFC frames of one priority: received (rx: DCB indications) and sent (tx: DCB requests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcCounter {
    pub priority: u8,
    pub rx: Option<u64>,
    pub tx: Option<u64>,
    pub origin: Origin,
}

/// The time one priority was paused, by the NIC's own clock (mlx5 `rx_prio3_pause_duration`,
/// microseconds): rx, the peer paused this port (its sending on the priority stood still);
/// tx, this port paused the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseDuration {
    pub priority: u8,
    pub rx_micros: Option<u64>,
    pub tx_micros: Option<u64>,
}

/// Everything one interface's NIC says about pausing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NicPause {
    pub pfc: Vec<PfcCounter>,
    /// Pause time per priority, where the driver counts it.
    pub durations: Vec<PauseDuration>,
    /// Other pause statistics by the driver's name (storms, transitions, link PAUSE).
    pub other: Vec<(String, u64)>,
}

impl NicPause {
    pub fn is_empty(&self) -> bool {
        self.pfc.is_empty() && self.durations.is_empty() && self.other.is_empty()
    }

    /// Microseconds the peer paused priority `p` of this port, where the driver counts it.
    pub fn rx_paused_micros(&self, p: usize) -> Option<u64> {
        self.durations
            .iter()
            .find(|d| usize::from(d.priority) == p)
            .and_then(|d| d.rx_micros)
    }
}

/// Reads both sources for `iface`; a source the device lacks contributes nothing.
pub fn read(iface: &str) -> NicPause {
    let mut n = NicPause::default();
    if let Ok(Some(pfc)) = dcb::query(iface) {
        n.pfc.extend(pfc);
    }
    if let Ok((names, values)) = ethtool::stats(iface) {
        let e = classify_ethtool(&names, &values);
        n.pfc.extend(e.pfc);
        n.durations.extend(e.durations);
        n.other.extend(e.other);
    }
    n
}

/// Splits a driver's ethtool statistics into per-priority PFC counters and other pause
/// statistics; names that are not about pausing are dropped.
pub fn classify_ethtool(names: &[String], values: &[u64]) -> NicPause {
    let mut by_prio: std::collections::BTreeMap<u8, PfcCounter> = Default::default();
    let mut durations: std::collections::BTreeMap<u8, PauseDuration> = Default::default();
    let mut other = Vec::new();
    for (name, &v) in names.iter().zip(values) {
        if let Some((dir, p)) = duration_stat(name) {
            let d = durations.entry(p).or_insert(PauseDuration {
                priority: p,
                rx_micros: None,
                tx_micros: None,
            });
            match dir {
                Dir::Rx => d.rx_micros = Some(v),
                Dir::Tx => d.tx_micros = Some(v),
            }
        } else if let Some((dir, p)) = pfc_stat(name) {
            let c = by_prio.entry(p).or_insert(PfcCounter {
                priority: p,
                rx: None,
                tx: None,
                origin: Origin::Ethtool,
            });
            match dir {
                Dir::Rx => c.rx = Some(v),
                Dir::Tx => c.tx = Some(v),
            }
        } else if name.contains("pause") || name.contains("pfc") || name.contains("xoff") {
            other.push((name.clone(), v));
        }
    }
    NicPause {
        pfc: by_prio.into_values().collect(),
        durations: durations.into_values().collect(),
        other,
    }
}

/// A per-priority pause duration of a known driver (mlx5: `rx_prio3_pause_duration`, in
/// microseconds): (direction, priority).
fn duration_stat(name: &str) -> Option<(Dir, u8)> {
    let (dir, rest) = direction(name)?;
    match rest
        .strip_prefix("prio")?
        .strip_suffix("_pause_duration")?
        .parse::<u8>()
    {
        Ok(p) if p < 8 => Some((dir, p)),
        _ => None,
    }
}

enum Dir {
    Rx,
    Tx,
}

/// A driver statistic's direction (`rx_`, `tx_`) and the rest of its name.
fn direction(name: &str) -> Option<(Dir, &str)> {
    if let Some(r) = name.strip_prefix("rx_") {
        Some((Dir::Rx, r))
    } else {
        name.strip_prefix("tx_").map(|r| (Dir::Tx, r))
    }
}

/// A per-priority PFC frame counter of a known driver: (direction, priority).
fn pfc_stat(name: &str) -> Option<(Dir, u8)> {
    let (dir, rest) = direction(name)?;
    // mlx5: rx_prio3_pause; bnxt: rx_pfc_ena_frames_pri3; ice: rx_priority_3_xoff.nic
    let digit = rest
        .strip_prefix("prio")
        .and_then(|r| r.strip_suffix("_pause"))
        .or_else(|| rest.strip_prefix("pfc_ena_frames_pri"))
        .or_else(|| {
            rest.strip_prefix("priority_")
                .and_then(|r| r.strip_suffix("_xoff.nic"))
        })?;
    match digit.parse::<u8>() {
        Ok(p) if p < 8 => Some((dir, p)),
        _ => None,
    }
}

/// The DCB netlink protocol (`linux/dcbnl.h`).
pub mod dcb {
    use super::{Origin, PfcCounter};
    use std::io;

    const RTM_GETDCB: u16 = 78;
    const DCB_CMD_IEEE_GET: u8 = 21;
    const DCB_ATTR_IFNAME: u16 = 1;
    const DCB_ATTR_IEEE: u16 = 13;
    const DCB_ATTR_IEEE_PFC: u16 = 2;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST: u16 = 1;
    const NLA_F_MASK: u16 = 0x3FFF;
    /// `struct ieee_pfc`: pfc_cap, pfc_en, mbc, (pad), delay u16, (pad), requests[8] at 8,
    /// indications[8] at 72.
    const IEEE_PFC_LEN: usize = 136;

    /// The request `dcb pfc show dev IF` sends: nlmsghdr, dcbmsg, DCB_ATTR_IFNAME.
    pub fn request(iface: &str, seq: u32) -> Vec<u8> {
        let name = iface.as_bytes();
        let attr_len = 4 + name.len() + 1;
        let len = 16 + 4 + align4(attr_len);
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
        m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[0 /* AF_UNSPEC */, DCB_CMD_IEEE_GET, 0, 0]);
        m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
        m.extend_from_slice(&DCB_ATTR_IFNAME.to_ne_bytes());
        m.extend_from_slice(name);
        m.push(0);
        m.resize(len, 0);
        m
    }

    fn align4(n: usize) -> usize {
        (n + 3) & !3
    }

    /// Attributes of a buffer: (type, payload).
    fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
        std::iter::from_fn(move || {
            if b.len() < 4 {
                return None;
            }
            let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
            let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_F_MASK;
            if len < 4 || len > b.len() {
                return None;
            }
            let payload = &b[4..len];
            b = &b[align4(len).min(b.len())..];
            Some((ty, payload))
        })
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_ne_bytes(x)
    }

    /// Decodes the kernel's answer: `Ok(None)` when the device has no DCB (EOPNOTSUPP and
    /// friends, or an answer without PFC), per-priority counters otherwise.
    pub fn decode_reply(msg: &[u8]) -> io::Result<Option<Vec<PfcCounter>>> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if msg.len() < 16 {
            return Err(bad("netlink answer shorter than its header"));
        }
        let len = (u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]) as usize).min(msg.len());
        let ty = u16::from_ne_bytes([msg[4], msg[5]]);
        if ty == NLMSG_ERROR {
            if msg.len() < 20 {
                return Err(bad("netlink error without its code"));
            }
            let code = i32::from_ne_bytes([msg[16], msg[17], msg[18], msg[19]]);
            return match -code {
                0 => Ok(None),
                libc::EOPNOTSUPP | libc::EINVAL | libc::ENODEV => Ok(None),
                e => Err(io::Error::from_raw_os_error(e)),
            };
        }
        if ty != RTM_GETDCB || len < 20 {
            return Err(bad("netlink answer is not a DCB message"));
        }
        for (t, nested) in attrs(&msg[20..len]) {
            if t != DCB_ATTR_IEEE {
                continue;
            }
            for (t, p) in attrs(nested) {
                if t == DCB_ATTR_IEEE_PFC && p.len() >= IEEE_PFC_LEN {
                    return Ok(Some(
                        (0..8)
                            .map(|i| PfcCounter {
                                priority: i as u8,
                                rx: Some(u64_at(p, 72 + 8 * i)),
                                tx: Some(u64_at(p, 8 + 8 * i)),
                                origin: Origin::Dcb,
                            })
                            .collect(),
                    ));
                }
            }
        }
        Ok(None)
    }

    /// Asks the kernel (one request, one answer on a fresh NETLINK_ROUTE socket).
    pub fn query(iface: &str) -> io::Result<Option<Vec<PfcCounter>>> {
        decode_reply(&exchange(&request(iface, 1))?)
    }

    /// Sends one netlink request and returns the first answer.
    pub fn exchange(req: &[u8]) -> io::Result<Vec<u8>> {
        // SAFETY: plain socket calls on a descriptor this function owns and closes.
        unsafe {
            let fd = libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let tv = libc::timeval {
                tv_sec: 1,
                tv_usec: 0,
            };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            );
            let mut sa: libc::sockaddr_nl = std::mem::zeroed();
            sa.nl_family = libc::AF_NETLINK as u16;
            let sent = libc::sendto(
                fd,
                req.as_ptr().cast(),
                req.len(),
                0,
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            );
            if sent < 0 {
                let e = io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            let mut buf = vec![0u8; 8192];
            let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
            let e = io::Error::last_os_error();
            libc::close(fd);
            if n < 0 {
                return Err(e);
            }
            buf.truncate(n as usize);
            Ok(buf)
        }
    }
}

/// The ethtool statistics ioctl (`ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS`).
pub mod ethtool {
    use std::io;

    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GSTRINGS: u32 = 0x1b;
    const ETHTOOL_GSTATS: u32 = 0x1d;
    const ETHTOOL_GSSET_INFO: u32 = 0x37;
    const ETH_SS_STATS: u32 = 1;
    const ETH_GSTRING_LEN: usize = 32;
    /// More statistics than any driver has; a bound on what a bad answer can allocate.
    const MAX_STATS: usize = 1 << 16;

    fn ioctl(fd: i32, iface: &str, data: &mut [u8]) -> io::Result<()> {
        // SAFETY: `ifreq` is zeroed, its name filled within bounds, and its data pointer
        // points at `data`, which outlives the call.
        unsafe {
            let mut ifr: libc::ifreq = std::mem::zeroed();
            for (d, s) in ifr.ifr_name.iter_mut().zip(iface.bytes().take(15)) {
                *d = s as libc::c_char;
            }
            ifr.ifr_ifru.ifru_data = data.as_mut_ptr().cast();
            if libc::ioctl(fd, SIOCETHTOOL as _, &mut ifr) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The driver's statistic names and values.
    pub fn stats(iface: &str) -> io::Result<(Vec<String>, Vec<u64>)> {
        // SAFETY: a datagram socket for the ioctl, closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = stats_on(fd, iface);
        // SAFETY: the descriptor opened above.
        unsafe { libc::close(fd) };
        r
    }

    fn stats_on(fd: i32, iface: &str) -> io::Result<(Vec<String>, Vec<u64>)> {
        // struct ethtool_sset_info { cmd, reserved, sset_mask u64, data[] u32 }
        let mut info = vec![0u8; 4 + 4 + 8 + 4];
        info[0..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
        info[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
        ioctl(fd, iface, &mut info)?;
        let mask = u64::from_ne_bytes(info[8..16].try_into().unwrap_or([0; 8]));
        if mask & (1 << ETH_SS_STATS) == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let n =
            (u32::from_ne_bytes(info[16..20].try_into().unwrap_or([0; 4])) as usize).min(MAX_STATS);
        // struct ethtool_gstrings { cmd, string_set, len, data[len * 32] }
        let mut strings = vec![0u8; 12 + n * ETH_GSTRING_LEN];
        strings[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        strings[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        strings[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
        ioctl(fd, iface, &mut strings)?;
        // struct ethtool_stats { cmd, n_stats, data[n] u64 }
        let mut values = vec![0u8; 8 + n * 8];
        values[0..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
        values[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
        ioctl(fd, iface, &mut values)?;
        let names = strings[12..]
            .chunks(ETH_GSTRING_LEN)
            .map(|c| {
                let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect();
        let values = values[8..]
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        Ok((names, values))
    }
}

#[cfg(test)]
#[path = "nic_pause_tests.rs"]
mod tests;
