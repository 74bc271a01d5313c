//! The information elements of rocemon's flow records, in template order.
//!
//! Standard elements (IANA's IPFIX registry, RFC 7012) for what every collector knows: the
//! 5-tuple, counts, times, interfaces, class of service and why the record was sent. RoCE's
//! own fields have no IANA element and no published vendor definition (IANA's registry has
//! none for RoCEv2 or InfiniBand transport; switch vendors that export RoCEv2-aware records
//! keep theirs undocumented), so they are enterprise-specific elements under a configurable
//! Private Enterprise Number, numbered here and in `docs/ipfix.md`.

use crate::pipeline::flow_records::FlowRecord;
use agent_common::opcode::OpClass;

/// RoCEv2's UDP destination port, for `destinationTransportPort`.
const ROCEV2_PORT: u16 = 4791;
/// UDP, for `protocolIdentifier`.
const UDP: u8 = 17;

/// Template of the IPv4 records.
pub const TEMPLATE_IPV4: u16 = 256;
/// Template of the IPv6 records.
pub const TEMPLATE_IPV6: u16 = 257;

/// One element of the templates: which field of a record it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    SourceIpv4,
    DestinationIpv4,
    SourceIpv6,
    DestinationIpv6,
    SourcePort,
    DestinationPort,
    Protocol,
    ClassOfService,
    DiffServCodePoint,
    IngressInterface,
    EgressInterface,
    Direction,
    Octets,
    Packets,
    Start,
    End,
    EndReason,
    /// Enterprise-specific from here on.
    DestQp,
    ClassPackets(OpClass),
    EcnCe,
    Cnp,
    Becn,
    PsnGaps,
    Retransmits,
    Naks,
    EcmpPath,
}

/// An element's number, whether it is enterprise-specific, its length in bytes and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Element {
    pub field: Field,
    pub id: u16,
    pub enterprise: bool,
    pub len: u16,
    pub name: &'static str,
}

const fn std(field: Field, id: u16, len: u16, name: &'static str) -> Element {
    Element {
        field,
        id,
        enterprise: false,
        len,
        name,
    }
}

const fn ent(field: Field, id: u16, len: u16, name: &'static str) -> Element {
    Element {
        field,
        id,
        enterprise: true,
        len,
        name,
    }
}

/// The elements after the addresses, shared by both families.
const COMMON: [Element; 28] = [
    std(Field::SourcePort, 7, 2, "sourceTransportPort"),
    std(Field::DestinationPort, 11, 2, "destinationTransportPort"),
    std(Field::Protocol, 4, 1, "protocolIdentifier"),
    std(Field::ClassOfService, 5, 1, "ipClassOfService"),
    std(Field::DiffServCodePoint, 195, 1, "ipDiffServCodePoint"),
    std(Field::IngressInterface, 10, 4, "ingressInterface"),
    std(Field::EgressInterface, 14, 4, "egressInterface"),
    std(Field::Direction, 61, 1, "flowDirection"),
    std(Field::Octets, 1, 8, "octetDeltaCount"),
    std(Field::Packets, 2, 8, "packetDeltaCount"),
    std(Field::Start, 152, 8, "flowStartMilliseconds"),
    std(Field::End, 153, 8, "flowEndMilliseconds"),
    std(Field::EndReason, 136, 1, "flowEndReason"),
    ent(Field::DestQp, 1, 4, "roceDestinationQueuePair"),
    ent(
        Field::ClassPackets(OpClass::Send),
        2,
        8,
        "roceSendPacketDeltaCount",
    ),
    ent(
        Field::ClassPackets(OpClass::Write),
        3,
        8,
        "roceWritePacketDeltaCount",
    ),
    ent(
        Field::ClassPackets(OpClass::ReadRequest),
        4,
        8,
        "roceReadRequestPacketDeltaCount",
    ),
    ent(
        Field::ClassPackets(OpClass::ReadResponse),
        5,
        8,
        "roceReadResponsePacketDeltaCount",
    ),
    ent(
        Field::ClassPackets(OpClass::Ack),
        6,
        8,
        "roceAckPacketDeltaCount",
    ),
    ent(
        Field::ClassPackets(OpClass::Atomic),
        7,
        8,
        "roceAtomicPacketDeltaCount",
    ),
    ent(
        Field::ClassPackets(OpClass::Other),
        8,
        8,
        "roceOtherPacketDeltaCount",
    ),
    ent(Field::EcnCe, 9, 8, "roceEcnCePacketDeltaCount"),
    ent(Field::Cnp, 10, 8, "roceCnpPacketDeltaCount"),
    ent(Field::Becn, 11, 8, "roceBecnPacketDeltaCount"),
    ent(Field::PsnGaps, 12, 8, "rocePsnGapDeltaCount"),
    ent(
        Field::Retransmits,
        13,
        8,
        "roceRetransmittedPacketDeltaCount",
    ),
    ent(Field::Naks, 14, 8, "roceNakDeltaCount"),
    ent(Field::EcmpPath, 15, 4, "rocePredictedEcmpPath"),
];

/// The elements of a template: the family's addresses, then the common ones.
pub fn elements(ipv6: bool) -> Vec<Element> {
    let addrs = if ipv6 {
        [
            std(Field::SourceIpv6, 27, 16, "sourceIPv6Address"),
            std(Field::DestinationIpv6, 28, 16, "destinationIPv6Address"),
        ]
    } else {
        [
            std(Field::SourceIpv4, 8, 4, "sourceIPv4Address"),
            std(Field::DestinationIpv4, 12, 4, "destinationIPv4Address"),
        ]
    };
    addrs.into_iter().chain(COMMON).collect()
}

/// Bytes of one data record of the family.
pub fn record_len(ipv6: bool) -> usize {
    elements(ipv6).iter().map(|e| e.len as usize).sum()
}

/// `ecmpPath` when no hash model is configured.
pub const NO_PATH: u32 = u32::MAX;

/// Appends `r`'s value of `e` (big-endian, `e.len` bytes). `ifindex` is the flow's
/// interface's index (0 when unknown: a capture).
pub fn write(e: &Element, r: &FlowRecord, ifindex: u32, out: &mut Vec<u8>) {
    let egress = r.key.hook == agent_common::Hook::TcEgress as u8;
    let c = &r.counts;
    match e.field {
        Field::SourceIpv4 => out.extend_from_slice(&r.key.src[..4]),
        Field::DestinationIpv4 => out.extend_from_slice(&r.key.dst[..4]),
        Field::SourceIpv6 => out.extend_from_slice(&r.key.src),
        Field::DestinationIpv6 => out.extend_from_slice(&r.key.dst),
        Field::SourcePort => out.extend_from_slice(&r.key.sport.to_be_bytes()),
        Field::DestinationPort => out.extend_from_slice(&ROCEV2_PORT.to_be_bytes()),
        Field::Protocol => out.push(UDP),
        // The traffic class octet with the ECN bits left out: they change packet by packet
        // (CE marks are counted in roceEcnCePacketDeltaCount).
        Field::ClassOfService => out.push(r.dscp << 2),
        Field::DiffServCodePoint => out.push(r.dscp & 0x3f),
        Field::IngressInterface => {
            out.extend_from_slice(&(if egress { 0 } else { ifindex }).to_be_bytes())
        }
        Field::EgressInterface => {
            out.extend_from_slice(&(if egress { ifindex } else { 0 }).to_be_bytes())
        }
        Field::Direction => out.push(egress as u8),
        Field::Octets => out.extend_from_slice(&c.bytes.to_be_bytes()),
        Field::Packets => out.extend_from_slice(&c.packets.to_be_bytes()),
        Field::Start => out.extend_from_slice(&r.start_ms.to_be_bytes()),
        Field::End => out.extend_from_slice(&r.end_ms.to_be_bytes()),
        Field::EndReason => out.push(r.reason as u8),
        Field::DestQp => out.extend_from_slice(&r.key.dest_qp.to_be_bytes()),
        Field::ClassPackets(k) => out.extend_from_slice(&c.class_packets[k as usize].to_be_bytes()),
        Field::EcnCe => out.extend_from_slice(&c.ecn_ce.to_be_bytes()),
        Field::Cnp => out.extend_from_slice(&c.cnp.to_be_bytes()),
        Field::Becn => out.extend_from_slice(&c.becn.to_be_bytes()),
        Field::PsnGaps => out.extend_from_slice(&c.psn_gaps.to_be_bytes()),
        Field::Retransmits => out.extend_from_slice(&c.retransmits.to_be_bytes()),
        Field::Naks => out.extend_from_slice(&c.naks.to_be_bytes()),
        Field::EcmpPath => out.extend_from_slice(&r.ecmp_path.unwrap_or(NO_PATH).to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_writes_its_length() {
        let r = FlowRecord {
            iface: 0,
            key: Default::default(),
            dscp: 26,
            start_ms: 1,
            end_ms: 2,
            reason: crate::pipeline::flow_counts::EndReason::IdleTimeout,
            counts: Default::default(),
            ecmp_path: Some(3),
        };
        for ipv6 in [false, true] {
            for e in elements(ipv6) {
                let mut out = Vec::new();
                write(&e, &r, 7, &mut out);
                assert_eq!(out.len(), e.len as usize, "{}", e.name);
            }
        }
    }

    #[test]
    fn numbers_are_unique_per_space() {
        for ipv6 in [false, true] {
            let els = elements(ipv6);
            for (i, a) in els.iter().enumerate() {
                for b in &els[i + 1..] {
                    assert!(
                        (a.id, a.enterprise) != (b.id, b.enterprise),
                        "{} and {}",
                        a.name,
                        b.name
                    );
                }
            }
        }
    }

    #[test]
    fn records_are_a_fixed_size_per_family() {
        assert_eq!(record_len(false), 4 + 4 + 49 + 112);
        assert_eq!(record_len(true), 16 + 16 + 49 + 112);
    }
}
