//! How a frame ended in the parser: one [`Outcome`] per frame, which is also its counter
//! index. A leaf of the crate (it imports nothing of it), so the parser, the record and the
//! counters all use it without importing each other.

/// How a frame ended in the parser. The discriminant is the frame's counter index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Outcome {
    /// RoCEv2 with a complete BTH and complete extension headers.
    Roce = 0,
    /// RoCEv2 with a complete BTH whose extension headers are cut short (counted as RoCE).
    RoceExtTruncated = 1,
    /// Not IPv4 or IPv6 (ARP, LLDP, ...).
    NotIp = 2,
    /// IP but not UDP.
    NotUdp = 3,
    /// UDP to a port other than 4791.
    UdpOtherPort = 4,
    /// A fragment other than the first: no UDP header to read.
    IpFragment = 5,
    /// More VLAN tags than the parser walks.
    VlanDepthExceeded = 6,
    /// An IPv6 extension header chain longer than the parser walks, or ESP/AH.
    Ipv6ExtUnsupported = 7,
    /// Frame shorter than its link-layer header or VLAN tags.
    TruncatedL2 = 8,
    TruncatedIpv4 = 9,
    /// IP version field disagrees with the EtherType.
    BadIpVersion = 10,
    /// IPv4 IHL below 5.
    BadIhl = 11,
    /// IPv4 total length smaller than its header.
    BadIpv4TotalLength = 12,
    TruncatedIpv6 = 13,
    TruncatedIpv6Ext = 14,
    /// IPv6 payload length smaller than its extension headers.
    BadIpv6PayloadLength = 15,
    TruncatedUdp = 16,
    /// UDP length below 8 (it cannot even hold its own header). A UDP length beyond the IP
    /// payload is clipped to the IP payload, as tshark does, and parsing goes on.
    BadUdpLength = 17,
    /// UDP to port 4791 whose datagram or captured bytes end inside the BTH.
    TruncatedBth = 18,
    /// GRE with a protocol that carries neither Ethernet, ERSPAN nor IP.
    GreOtherProtocol = 19,
    /// A GRE header cut short.
    BadGre = 20,
    /// A VXLAN header cut short.
    BadVxlan = 21,
    /// An ERSPAN header cut short.
    TruncatedErspan = 22,
    /// A MAC control frame (EtherType 0x8808: PFC, PAUSE or another opcode); its fields are
    /// counted by [`crate::HookCounters::record_mac_control`].
    MacControl = 23,
    /// A MAC control frame that ends inside its opcode or pause times.
    TruncatedMacControl = 24,
}

/// Whether an outcome is RoCE, other traffic, or a malformed frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeKind {
    Roce,
    NotRoce,
    Malformed,
}

impl Outcome {
    pub const COUNT: usize = 25;
    pub const ALL: [Outcome; Self::COUNT] = [
        Outcome::Roce,
        Outcome::RoceExtTruncated,
        Outcome::NotIp,
        Outcome::NotUdp,
        Outcome::UdpOtherPort,
        Outcome::IpFragment,
        Outcome::VlanDepthExceeded,
        Outcome::Ipv6ExtUnsupported,
        Outcome::TruncatedL2,
        Outcome::TruncatedIpv4,
        Outcome::BadIpVersion,
        Outcome::BadIhl,
        Outcome::BadIpv4TotalLength,
        Outcome::TruncatedIpv6,
        Outcome::TruncatedIpv6Ext,
        Outcome::BadIpv6PayloadLength,
        Outcome::TruncatedUdp,
        Outcome::BadUdpLength,
        Outcome::TruncatedBth,
        Outcome::GreOtherProtocol,
        Outcome::BadGre,
        Outcome::BadVxlan,
        Outcome::TruncatedErspan,
        Outcome::MacControl,
        Outcome::TruncatedMacControl,
    ];

    /// The snake_case name used as a metric label and JSON key.
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::Roce => "roce",
            Outcome::RoceExtTruncated => "roce_ext_truncated",
            Outcome::NotIp => "not_ip",
            Outcome::NotUdp => "not_udp",
            Outcome::UdpOtherPort => "udp_other_port",
            Outcome::IpFragment => "ip_fragment",
            Outcome::VlanDepthExceeded => "vlan_depth_exceeded",
            Outcome::Ipv6ExtUnsupported => "ipv6_ext_unsupported",
            Outcome::TruncatedL2 => "truncated_l2",
            Outcome::TruncatedIpv4 => "truncated_ipv4",
            Outcome::BadIpVersion => "bad_ip_version",
            Outcome::BadIhl => "bad_ihl",
            Outcome::BadIpv4TotalLength => "bad_ipv4_total_length",
            Outcome::TruncatedIpv6 => "truncated_ipv6",
            Outcome::TruncatedIpv6Ext => "truncated_ipv6_ext",
            Outcome::BadIpv6PayloadLength => "bad_ipv6_payload_length",
            Outcome::TruncatedUdp => "truncated_udp",
            Outcome::BadUdpLength => "bad_udp_length",
            Outcome::TruncatedBth => "truncated_bth",
            Outcome::GreOtherProtocol => "gre_other_protocol",
            Outcome::BadGre => "bad_gre",
            Outcome::BadVxlan => "bad_vxlan",
            Outcome::TruncatedErspan => "truncated_erspan",
            Outcome::MacControl => "mac_control",
            Outcome::TruncatedMacControl => "truncated_mac_control",
        }
    }

    pub const fn kind(self) -> OutcomeKind {
        match self {
            Outcome::Roce | Outcome::RoceExtTruncated => OutcomeKind::Roce,
            Outcome::NotIp
            | Outcome::NotUdp
            | Outcome::UdpOtherPort
            | Outcome::IpFragment
            | Outcome::VlanDepthExceeded
            | Outcome::Ipv6ExtUnsupported
            | Outcome::GreOtherProtocol
            | Outcome::MacControl => OutcomeKind::NotRoce,
            _ => OutcomeKind::Malformed,
        }
    }

    /// Whether the AF_XDP capture mode hands a frame with this outcome to userspace: RoCE,
    /// RoCE cut inside its headers, and broken mirror encapsulations (so their reasons are
    /// counted where the RoCE traffic is). Everything else stays with the kernel.
    pub const fn captured(self) -> bool {
        matches!(
            self,
            Outcome::Roce
                | Outcome::RoceExtTruncated
                | Outcome::TruncatedBth
                | Outcome::BadGre
                | Outcome::BadVxlan
                | Outcome::TruncatedErspan
        )
    }
}
