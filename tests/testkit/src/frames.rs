//! An independent RoCEv2 frame builder, written from the IBA / RoCEv2 annex tables.
//!
//! It shares no code with `agent-common` on purpose: the fixtures it builds are decoded by
//! tshark for the expected numbers, and by our parser for the numbers under test.

use std::net::IpAddr;

pub const ETH_IPV4: u16 = 0x0800;
pub const ETH_IPV6: u16 = 0x86DD;
pub const ETH_ARP: u16 = 0x0806;
pub const TPID_8021Q: u16 = 0x8100;
pub const TPID_8021AD: u16 = 0x88A8;
pub const ROCE_PORT: u16 = 4791;
/// MAC control (IEEE 802.3 Annex 31B PAUSE, 802.1Qbb PFC).
pub const ETH_MAC_CONTROL: u16 = 0x8808;
/// The reserved multicast address MAC control frames are sent to.
pub const MAC_CONTROL_DST: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];

/// A PFC frame (opcode 0x0101): class-enable vector and eight pause times (quanta).
pub fn pfc(class_enable: u8, times: [u16; 8]) -> Vec<u8> {
    let mut b = vec![0x01, 0x01, 0x00, class_enable];
    for t in times {
        b.extend_from_slice(&t.to_be_bytes());
    }
    ethernet_to(MAC_CONTROL_DST, &[], ETH_MAC_CONTROL, &b)
}

/// An 802.3x PAUSE frame (opcode 0x0001) with one pause time (quanta).
pub fn pause(time: u16) -> Vec<u8> {
    let mut b = vec![0x00, 0x01];
    b.extend_from_slice(&time.to_be_bytes());
    ethernet_to(MAC_CONTROL_DST, &[], ETH_MAC_CONTROL, &b)
}

/// A MAC control frame with another opcode and body.
pub fn mac_control(opcode: u16, body: &[u8]) -> Vec<u8> {
    let mut b = opcode.to_be_bytes().to_vec();
    b.extend_from_slice(body);
    ethernet_to(MAC_CONTROL_DST, &[], ETH_MAC_CONTROL, &b)
}

/// A RoCEv2 packet to build.
#[derive(Clone, Debug)]
pub struct Roce {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// (TPID, TCI), outermost first: the TCI is the VLAN id, or [`tci`] for a priority.
    pub vlans: Vec<(u16, u16)>,
    /// Two ECN bits.
    pub ecn: u8,
    /// DSCP (six bits).
    pub dscp: u8,
    pub sport: u16,
    pub dport: u16,
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    pub becn: bool,
    pub fecn: bool,
    pub ack_req: bool,
    /// AETH syndrome for opcodes that carry one.
    pub syndrome: u8,
    pub msn: u32,
    /// RETH DMA length.
    pub dma_len: u32,
    /// Payload bytes after the extension headers (before pad and ICRC).
    pub payload: usize,
    /// IPv4 options bytes (multiple of 4, at most 40).
    pub ipv4_options: usize,
}

impl Roce {
    /// The `i`-th jumbo RDMA WRITE_ONLY of the jumbo tests from `src` to `dst`: 4 KiB to
    /// 5.5 KiB payloads (a frame of a page or more: several buffers in XDP, headers outside
    /// a raw socket's linear part), two ports and `qps` destination QPs taken in turn, each
    /// ECN codepoint in turn.
    pub fn jumbo(src: &str, dst: &str, i: u32, qps: u32) -> Roce {
        let mut r = Roce::new(
            src.parse().expect("an IP address"),
            dst.parse().expect("an IP address"),
            0xD000 + (i % 2) as u16,
            0x90 + i % qps,
            0x0A,
        );
        r.psn = i;
        r.payload = 4096 + 512 * (i as usize % 4);
        r.dma_len = r.payload as u32;
        r.ecn = (i % 4) as u8;
        r
    }

    pub fn new(src: IpAddr, dst: IpAddr, sport: u16, dest_qp: u32, opcode: u8) -> Roce {
        Roce {
            src,
            dst,
            vlans: Vec::new(),
            ecn: 0b10,
            dscp: 26,
            sport,
            dport: ROCE_PORT,
            opcode,
            dest_qp,
            psn: 0,
            becn: false,
            fecn: false,
            ack_req: false,
            syndrome: 0x1F,
            msn: 0,
            dma_len: 0,
            payload: 0,
            ipv4_options: 0,
        }
    }

    /// A RoCEv2 CNP as a notification point sends it.
    pub fn cnp(src: IpAddr, dst: IpAddr, sport: u16, dest_qp: u32) -> Roce {
        let mut r = Roce::new(src, dst, sport, dest_qp, 0x81);
        r.becn = true;
        r.ecn = 0b01;
        r.payload = 16;
        r
    }

    /// The UDP payload: BTH, extension headers, payload, pad, ICRC.
    pub fn udp_payload(&self) -> Vec<u8> {
        let pad = (4 - self.payload % 4) % 4;
        let mut v = Vec::with_capacity(12 + 48 + self.payload + pad + 4);
        v.push(self.opcode);
        v.push((pad as u8) << 4); // SE 0, M 0, PadCnt, TVer 0
        v.extend_from_slice(&0xFFFFu16.to_be_bytes());
        v.push(((self.fecn as u8) << 7) | ((self.becn as u8) << 6));
        v.extend_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        v.push((self.ack_req as u8) << 7);
        v.extend_from_slice(&self.psn.to_be_bytes()[1..]);
        v.extend(self.extension_headers());
        v.extend((0..self.payload).map(|i| (i as u8).wrapping_mul(31)));
        v.extend(std::iter::repeat_n(0u8, pad));
        // ICRC: not computed (rocemon never checks it; tshark 4.0 does not validate it).
        v.extend_from_slice(&[0, 0, 0, 0]);
        v
    }

    fn extension_headers(&self) -> Vec<u8> {
        let transport = self.opcode >> 5;
        let op = self.opcode & 0x1F;
        let mut v = Vec::new();
        if self.opcode == 0x81 || transport == 7 {
            return v;
        }
        let request = !(0x0D..=0x12).contains(&op);
        if transport == 2 {
            v.extend_from_slice(&[0, 0, 0, 7]); // RDETH: EE context 7
        }
        if transport == 3 || (transport == 2 && request) {
            v.extend_from_slice(&0x1111_2222u32.to_be_bytes()); // Q_Key
            v.push(0);
            v.extend_from_slice(&0xABCD_u32.to_be_bytes()[1..]); // source QP
        }
        if transport == 5 && request {
            v.extend_from_slice(&[0, 0, 0, 9]); // XRCETH: XRC SRQ 9
        }
        if matches!(op, 0x06 | 0x0A | 0x0B | 0x0C) {
            v.extend_from_slice(&0x7f00_0000_1000u64.to_be_bytes()); // VA
            v.extend_from_slice(&0x1234u32.to_be_bytes()); // R_Key
            v.extend_from_slice(&self.dma_len.to_be_bytes());
        }
        if matches!(op, 0x13 | 0x14) {
            v.extend_from_slice(&[0x5A; 28]);
        }
        if matches!(op, 0x0D | 0x0F | 0x10 | 0x11 | 0x12) {
            v.push(self.syndrome);
            v.extend_from_slice(&self.msn.to_be_bytes()[1..]);
        }
        if op == 0x12 {
            v.extend_from_slice(&[0x33; 8]);
        }
        if matches!(op, 0x03 | 0x05 | 0x09 | 0x0B) {
            v.extend_from_slice(&0xCAFEu32.to_be_bytes());
        }
        if matches!(op, 0x16 | 0x17) {
            v.extend_from_slice(&0xBEEFu32.to_be_bytes());
        }
        v
    }

    /// The whole Ethernet frame.
    pub fn frame(&self) -> Vec<u8> {
        let udp = udp(self.sport, self.dport, &self.udp_payload());
        let tos = (self.dscp << 2) | (self.ecn & 3);
        let (ethertype, l3) = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (
                ETH_IPV4,
                ipv4(s.octets(), d.octets(), tos, 17, self.ipv4_options, &udp),
            ),
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                (ETH_IPV6, ipv6(s.octets(), d.octets(), tos, 17, &udp))
            }
            _ => panic!("mixed address families"),
        };
        ethernet(&self.vlans, ethertype, &l3)
    }
}

/// Source MAC of every fixture frame (locally administered).
pub const SRC_MAC: [u8; 6] = [0x02, 0x52, 0x4F, 0x43, 0x45, 0x01];
/// Destination MAC of every fixture frame.
pub const DST_MAC: [u8; 6] = [0x02, 0x52, 0x4F, 0x43, 0x45, 0x02];

/// RDMA WRITE ONLY frames of one flow (`src -> dst`, UDP source port and destination QP
/// `(sport, qp)`), one per PSN of `psns`, each `payload` bytes long.
pub fn writes(
    src: &str,
    dst: &str,
    (sport, qp): (u16, u32),
    psns: impl IntoIterator<Item = u32>,
    payload: usize,
) -> Vec<Vec<u8>> {
    let (a, b): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    psns.into_iter()
        .map(|psn| {
            let mut r = Roce::new(a, b, sport, qp, 0x0A);
            r.psn = psn;
            r.payload = payload;
            r.dma_len = payload as u32;
            r.frame()
        })
        .collect()
}

/// A VLAN tag's TCI: 802.1p priority (PCP, three bits), DEI 0, VLAN id (twelve bits).
pub fn tci(pcp: u8, vid: u16) -> u16 {
    (u16::from(pcp & 7) << 13) | (vid & 0x0FFF)
}

/// Ethernet II with optional VLAN tags (TPID, TCI).
pub fn ethernet(vlans: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    ethernet_to(DST_MAC, vlans, ethertype, payload)
}

/// Ethernet II to a given destination MAC.
pub fn ethernet_to(dst: [u8; 6], vlans: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(14 + 4 * vlans.len() + payload.len());
    v.extend_from_slice(&dst);
    v.extend_from_slice(&SRC_MAC);
    for &(tpid, tci) in vlans {
        v.extend_from_slice(&tpid.to_be_bytes());
        v.extend_from_slice(&tci.to_be_bytes());
    }
    v.extend_from_slice(&ethertype.to_be_bytes());
    v.extend_from_slice(payload);
    // Pad to the 60-byte Ethernet minimum (without FCS) as a NIC would.
    while v.len() < 60 {
        v.push(0);
    }
    v
}

/// IPv4 header with a correct checksum, `options` bytes of NOPs (plus End) before the payload.
pub fn ipv4(
    src: [u8; 4],
    dst: [u8; 4],
    tos: u8,
    proto: u8,
    options: usize,
    payload: &[u8],
) -> Vec<u8> {
    assert!(options.is_multiple_of(4) && options <= 40);
    let hl = 20 + options;
    let total = hl + payload.len();
    let mut h = vec![0u8; hl];
    h[0] = 0x40 | (hl / 4) as u8;
    h[1] = tos;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    h[6] = 0x40; // DF
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    for b in h.iter_mut().skip(20) {
        *b = 1; // NOP
    }
    if options > 0 {
        h[hl - 1] = 0; // End of options list
    }
    let csum = checksum(&h);
    h[10..12].copy_from_slice(&csum.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// IPv6 fixed header.
pub fn ipv6(src: [u8; 16], dst: [u8; 16], tclass: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60 | (tclass >> 4);
    h[1] = tclass << 4;
    h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    h[6] = next;
    h[7] = 64;
    h[8..24].copy_from_slice(&src);
    h[24..40].copy_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

/// UDP header (checksum 0: allowed for IPv4; RoCEv2 over IPv6 relies on the ICRC).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

/// The Internet checksum (RFC 1071).
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in b.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Offset of the IP header in an Ethernet frame built by [`ethernet`].
pub fn l3_offset(frame: &[u8]) -> usize {
    let mut off = 12;
    while off + 2 <= frame.len()
        && matches!(
            u16::from_be_bytes([frame[off], frame[off + 1]]),
            0x8100 | 0x88A8 | 0x9100
        )
    {
        off += 4;
    }
    off + 2
}

/// The frame's bytes in Linux cooked capture v1 form (pcap linktype 113).
pub fn to_sll(frame: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(frame.len() + 2);
    v.extend_from_slice(&0u16.to_be_bytes()); // packet type: to us
    v.extend_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
    v.extend_from_slice(&6u16.to_be_bytes());
    v.extend_from_slice(&frame[6..12]);
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&frame[12..]); // protocol (EtherType or TPID) and the rest
    v
}

/// The frame's bytes in Linux cooked capture v2 form (pcap linktype 276).
pub fn to_sll2(frame: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(frame.len() + 6);
    v.extend_from_slice(&frame[12..14]); // protocol
    v.extend_from_slice(&[0, 0]); // reserved
    v.extend_from_slice(&3u32.to_be_bytes()); // interface index
    v.extend_from_slice(&1u16.to_be_bytes()); // ARPHRD_ETHER
    v.push(0); // packet type
    v.push(6);
    v.extend_from_slice(&frame[6..12]);
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&frame[14..]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_verifies() {
        let h = ipv4([10, 0, 0, 1], [10, 0, 0, 2], 2, 17, 8, &[]);
        assert_eq!(checksum(&h[..28]), 0);
    }

    #[test]
    fn lengths() {
        let r = Roce::new(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            0xC000,
            5,
            0x04,
        );
        // BTH + ICRC
        assert_eq!(r.udp_payload().len(), 16);
        let mut w = r.clone();
        w.opcode = 0x0B;
        w.payload = 3;
        // BTH + RETH + ImmDt + 3 payload + 1 pad + ICRC
        assert_eq!(w.udp_payload().len(), 12 + 16 + 4 + 3 + 1 + 4);
        // 14 + 20 + 8 + 16 = 58 bytes, padded to the 60-byte Ethernet minimum
        assert_eq!(r.frame().len(), 60);
        assert_eq!(w.frame().len(), 14 + 20 + 8 + 12 + 16 + 4 + 3 + 1 + 4);
    }
}

/// Mirror and tunnel encapsulations around an Ethernet frame (for the collector fixtures).
pub mod tunnel {
    use super::*;

    fn outer_ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
        ethernet(
            &[],
            ETH_IPV4,
            &ipv4([192, 0, 2, 1], [192, 0, 2, 2], 0, proto, 0, payload),
        )
    }

    /// VXLAN (UDP 4789) with VNI `vni`.
    pub fn vxlan(inner: &[u8], vni: u32) -> Vec<u8> {
        let mut v = vec![0x08, 0, 0, 0];
        v.extend_from_slice(&(vni << 8).to_be_bytes());
        v.extend_from_slice(inner);
        outer_ipv4(17, &udp(0xD123, 4789, &v))
    }

    /// GRE carrying Ethernet (transparent Ethernet bridging), with a key.
    pub fn gre_teb(inner: &[u8], key: u32) -> Vec<u8> {
        let mut v = vec![0x20, 0x00, 0x65, 0x58];
        v.extend_from_slice(&key.to_be_bytes());
        v.extend_from_slice(inner);
        outer_ipv4(47, &v)
    }

    /// GRE carrying the IP packet of `inner` (its Ethernet header dropped).
    pub fn gre_ip(inner: &[u8]) -> Vec<u8> {
        let mut v = vec![0x00, 0x00];
        v.extend_from_slice(&inner[12..14]);
        v.extend_from_slice(&inner[14..]);
        outer_ipv4(47, &v)
    }

    /// ERSPAN type II (GRE 0x88BE with a sequence number) for mirror session `session`.
    pub fn erspan2(inner: &[u8], session: u16, seq: u32) -> Vec<u8> {
        let mut v = vec![0x10, 0x00, 0x88, 0xBE];
        v.extend_from_slice(&seq.to_be_bytes());
        // ver 1, VLAN 0, COS 0, En 0, T 0, session id (10 bits); reserved, index
        v.extend_from_slice(&[0x10, 0x00, ((session >> 8) & 0x03) as u8, session as u8]);
        v.extend_from_slice(&[0x00, 0x00, 0x00, 0x07]);
        v.extend_from_slice(inner);
        outer_ipv4(47, &v)
    }

    /// ERSPAN type III (GRE 0x22EB) for `session`, with the optional platform subheader.
    pub fn erspan3(inner: &[u8], session: u16, seq: u32, subheader: bool) -> Vec<u8> {
        let mut v = vec![0x10, 0x00, 0x22, 0xEB];
        v.extend_from_slice(&seq.to_be_bytes());
        v.extend_from_slice(&[0x20, 0x00, ((session >> 8) & 0x03) as u8, session as u8]);
        v.extend_from_slice(&0x1234_5678u32.to_be_bytes()); // timestamp
        v.extend_from_slice(&[0x00, 0x00, 0x00, 0x00]); // SGT, P, FT, Hw ID, D, Gra
        let last = v.len() - 1;
        if subheader {
            v[last] |= 0x01; // O: platform-specific subheader follows
            v.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 0, 0]);
        }
        v.extend_from_slice(inner);
        outer_ipv4(47, &v)
    }
}
