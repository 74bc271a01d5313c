//! Mirror and tunnel encapsulations removed before the RoCEv2 parse: VXLAN (UDP 4789), GRE
//! carrying Ethernet (0x6558) or IP, and ERSPAN type II (0x88BE, type I without sequence
//! number) and type III (0x22EB, with its optional platform subheader), what switch port
//! mirroring uses to ship fabric traffic to a collector.
//!
//! One encapsulation is removed, by a cheap look at the outer headers ([`locate`]) before the
//! single full parse of the inner frame: a bounded amount of work the verifier accepts. The
//! outer IPv6 header must not carry extension headers.

use crate::headers::ethernet::{self, is_vlan};
use crate::headers::{be16, ipv4, ipv6};
use crate::outcome::Outcome;
use crate::reader::PacketReader;

pub const PROTO_GRE: u8 = 47;
pub const VXLAN_PORT: u16 = 4789;
pub const VXLAN_LEN: usize = 8;
pub const GRE_PROTO_TEB: u16 = 0x6558;
pub const GRE_PROTO_ERSPAN2: u16 = 0x88BE;
pub const GRE_PROTO_ERSPAN3: u16 = 0x22EB;
pub const ERSPAN2_LEN: usize = 8;
pub const ERSPAN3_LEN: usize = 12;
pub const ERSPAN3_SUBHEADER_LEN: usize = 8;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum TunnelKind {
    #[default]
    None = 0,
    Vxlan = 1,
    Gre = 2,
    ErspanII = 3,
    ErspanIII = 4,
}

impl TunnelKind {
    pub const ALL: [TunnelKind; 5] = [
        TunnelKind::None,
        TunnelKind::Vxlan,
        TunnelKind::Gre,
        TunnelKind::ErspanII,
        TunnelKind::ErspanIII,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            TunnelKind::None => "none",
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::Gre => "gre",
            TunnelKind::ErspanII => "erspan2",
            TunnelKind::ErspanIII => "erspan3",
        }
    }
}

/// The encapsulation a packet arrived in: kind and id (VXLAN VNI, ERSPAN session id, GRE key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tunnel {
    pub kind: TunnelKind,
    pub id: u32,
}

pub struct Inner {
    pub tunnel: Tunnel,
    pub inner_off: usize,
    pub inner_ethertype: Option<u16>,
}

#[inline(always)]
pub fn vxlan<R: PacketReader>(r: &R, off: usize) -> Result<Inner, Outcome> {
    // The VNI is read whatever the I flag says, as Wireshark does.
    let h = r.read::<VXLAN_LEN>(off).ok_or(Outcome::BadVxlan)?;
    Ok(Inner {
        tunnel: Tunnel {
            kind: TunnelKind::Vxlan,
            id: ((h[4] as u32) << 16) | ((h[5] as u32) << 8) | h[6] as u32,
        },
        inner_off: off + VXLAN_LEN,
        inner_ethertype: None,
    })
}

#[inline(always)]
pub fn gre<R: PacketReader>(r: &R, off: usize) -> Result<Inner, Outcome> {
    let h = r.read::<4>(off).ok_or(Outcome::BadGre)?;
    // Flags C, K, S decide the header length; the version bits are not checked (Wireshark
    // decodes the payload of any version by its protocol type).
    let flags = u16::from_be_bytes([h[0], h[1]]);
    let proto = u16::from_be_bytes([h[2], h[3]]);
    let has_seq = flags & 0x1000 != 0;
    let mut len = 4;
    if flags & 0x8000 != 0 {
        len += 4;
    }
    let mut key = 0u32;
    if flags & 0x2000 != 0 {
        key = u32::from_be_bytes(r.read::<4>(off + len).ok_or(Outcome::BadGre)?);
        len += 4;
    }
    if has_seq {
        len += 4;
    }
    let body = off + len;
    match proto {
        GRE_PROTO_TEB => Ok(Inner {
            tunnel: Tunnel {
                kind: TunnelKind::Gre,
                id: key,
            },
            inner_off: body,
            inner_ethertype: None,
        }),
        0x0800 | 0x86DD => Ok(Inner {
            tunnel: Tunnel {
                kind: TunnelKind::Gre,
                id: key,
            },
            inner_off: body,
            inner_ethertype: Some(proto),
        }),
        GRE_PROTO_ERSPAN2 => {
            if !has_seq {
                return Ok(Inner {
                    tunnel: Tunnel {
                        kind: TunnelKind::ErspanII,
                        id: 0,
                    },
                    inner_off: body,
                    inner_ethertype: None,
                });
            }
            let e = r
                .read::<ERSPAN2_LEN>(body)
                .ok_or(Outcome::TruncatedErspan)?;
            let session = (((e[2] & 0x03) as u32) << 8) | e[3] as u32;
            Ok(Inner {
                tunnel: Tunnel {
                    kind: TunnelKind::ErspanII,
                    id: session,
                },
                inner_off: body + ERSPAN2_LEN,
                inner_ethertype: None,
            })
        }
        GRE_PROTO_ERSPAN3 => {
            let e = r
                .read::<ERSPAN3_LEN>(body)
                .ok_or(Outcome::TruncatedErspan)?;
            let session = (((e[2] & 0x03) as u32) << 8) | e[3] as u32;
            let inner = body
                + ERSPAN3_LEN
                + if e[11] & 0x01 != 0 {
                    ERSPAN3_SUBHEADER_LEN
                } else {
                    0
                };
            Ok(Inner {
                tunnel: Tunnel {
                    kind: TunnelKind::ErspanIII,
                    id: session,
                },
                inner_off: inner,
                inner_ethertype: None,
            })
        }
        _ => Err(Outcome::GreOtherProtocol),
    }
}

/// What the look-ahead found: the inner frame of a mirror session or tunnel, or, for a plain
/// frame, the headers it already read (so the parse does not read them twice: in the kernel
/// each read is a helper call).
///
/// Plain arrays with flags rather than `Option<[u8; N]>`: a `None` leaves its bytes
/// uninitialised, and BPF code moving them through registers is refused by the verifier.
#[derive(Default)]
pub struct Lookahead {
    pub inner: Option<Inner>,
    /// The outer IPv4 header (20 bytes), valid when `has_ipv4` (the frame is plain IPv4).
    pub ipv4: [u8; ipv4::MIN_LEN],
    pub has_ipv4: bool,
    /// The outer UDP header, valid when `udp_off` is not 0 (the frame is plain UDP).
    pub udp: [u8; 8],
    pub udp_off: usize,
}

#[inline(always)]
pub fn locate<R: PacketReader>(
    r: &R,
    mut ethertype: u16,
    mut off: usize,
) -> Result<Lookahead, Outcome> {
    let mut look = Lookahead {
        inner: None,
        ipv4: [0; ipv4::MIN_LEN],
        has_ipv4: false,
        udp: [0; 8],
        udp_off: 0,
    };
    let mut i = 0;
    while i < ethernet::MAX_VLAN_TAGS {
        if is_vlan(ethertype) {
            match r.read::<2>(off + 2) {
                Some(t) => ethertype = be16(t),
                None => return Ok(look),
            }
            off += ethernet::VLAN_TAG_LEN;
        }
        i += 1;
    }
    let (proto, l4) = match ethertype {
        ethernet::ETHERTYPE_IPV4 => {
            let Some(h) = r.read::<{ ipv4::MIN_LEN }>(off) else {
                return Ok(look);
            };
            look.ipv4 = h;
            look.has_ipv4 = true;
            let h = ipv4::Ipv4Header(h);
            if h.version() != 4 || h.header_len() < ipv4::MIN_LEN || h.fragment_offset() != 0 {
                return Ok(look);
            }
            (h.protocol(), off + h.header_len())
        }
        ethernet::ETHERTYPE_IPV6 => {
            let Some(h) = r.read::<8>(off) else {
                return Ok(look);
            };
            if h[0] >> 4 != 6 {
                return Ok(look);
            }
            (h[6], off + ipv6::LEN)
        }
        _ => return Ok(look),
    };
    match proto {
        PROTO_GRE => {
            look.has_ipv4 = false;
            look.inner = Some(gre(r, l4)?);
        }
        ipv4::PROTO_UDP => {
            if let Some(u) = r.read::<8>(l4) {
                if be16([u[2], u[3]]) == VXLAN_PORT {
                    look.has_ipv4 = false;
                    look.inner = Some(vxlan(r, l4 + 8)?);
                } else {
                    look.udp = u;
                    look.udp_off = l4;
                }
            }
        }
        _ => {}
    }
    Ok(look)
}
