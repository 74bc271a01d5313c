//! The BTH opcode table: names, transports, operation classes and extension headers.
//!
//! Bits 7-5 select the transport, bits 4-0 the operation (IBA vol. 1, table 38; RoCEv2 CNP
//! from Annex A17). Reserved and vendor-specific values are valid input: they get no name and
//! are counted like every other opcode.

use crate::headers::ext::*;

/// The RoCEv2 Congestion Notification Packet opcode.
pub const OPCODE_CNP: u8 = 0x81;

/// The General Services Interface's queue pair (IBA vol. 1, 3.5.2): connection management
/// MADs (REQ, REP, RTU, DREQ) go to QP 1, on the 5-tuple of the connection they set up.
pub const GSI_QP: u32 = 1;

/// Whether a destination QP is connection management, not a data connection.
pub const fn is_connection_management(dest_qp: u32) -> bool {
    dest_qp == GSI_QP
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Rc,
    Uc,
    Rd,
    Ud,
    Cnp,
    Xrc,
    Vendor,
    Reserved,
}

/// What an opcode does, for per-flow counts by class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OpClass {
    Send = 0,
    Write = 1,
    ReadRequest = 2,
    ReadResponse = 3,
    /// ACKNOWLEDGE and ATOMIC_ACKNOWLEDGE (positive or negative).
    Ack = 4,
    Atomic = 5,
    /// CNPs, RESYNC, FLUSH, reserved and vendor opcodes.
    Other = 6,
}

impl OpClass {
    pub const COUNT: usize = 7;
    pub const ALL: [OpClass; Self::COUNT] = [
        OpClass::Send,
        OpClass::Write,
        OpClass::ReadRequest,
        OpClass::ReadResponse,
        OpClass::Ack,
        OpClass::Atomic,
        OpClass::Other,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            OpClass::Send => "send",
            OpClass::Write => "write",
            OpClass::ReadRequest => "read_request",
            OpClass::ReadResponse => "read_response",
            OpClass::Ack => "ack",
            OpClass::Atomic => "atomic",
            OpClass::Other => "other",
        }
    }
}

/// Operation names by the low five bits (None: reserved in every transport).
const OPERATION_NAMES: [Option<&str>; 32] = [
    Some("SEND_FIRST"),
    Some("SEND_MIDDLE"),
    Some("SEND_LAST"),
    Some("SEND_LAST_WITH_IMMEDIATE"),
    Some("SEND_ONLY"),
    Some("SEND_ONLY_WITH_IMMEDIATE"),
    Some("RDMA_WRITE_FIRST"),
    Some("RDMA_WRITE_MIDDLE"),
    Some("RDMA_WRITE_LAST"),
    Some("RDMA_WRITE_LAST_WITH_IMMEDIATE"),
    Some("RDMA_WRITE_ONLY"),
    Some("RDMA_WRITE_ONLY_WITH_IMMEDIATE"),
    Some("RDMA_READ_REQUEST"),
    Some("RDMA_READ_RESPONSE_FIRST"),
    Some("RDMA_READ_RESPONSE_MIDDLE"),
    Some("RDMA_READ_RESPONSE_LAST"),
    Some("RDMA_READ_RESPONSE_ONLY"),
    Some("ACKNOWLEDGE"),
    Some("ATOMIC_ACKNOWLEDGE"),
    Some("COMPARE_SWAP"),
    Some("FETCH_ADD"),
    Some("RESYNC"),
    Some("SEND_LAST_WITH_INVALIDATE"),
    Some("SEND_ONLY_WITH_INVALIDATE"),
    None,
    None,
    None,
    None,
    Some("FLUSH"),
    Some("ATOMIC_WRITE"),
    None,
    None,
];

/// The transport of an opcode, `Reserved` when the transport does not define the operation.
#[inline(always)]
const fn compute_transport(opcode: u8) -> Transport {
    let op = opcode & 0x1F;
    match opcode >> 5 {
        0 if op <= 0x17 || op == 0x1C || op == 0x1D => Transport::Rc,
        1 if op <= 0x0B => Transport::Uc,
        2 if op <= 0x15 || op == 0x1C || op == 0x1D => Transport::Rd,
        3 if op == 0x04 || op == 0x05 => Transport::Ud,
        4 if op == 0x01 => Transport::Cnp,
        5 if op <= 0x14 || op == 0x16 || op == 0x17 => Transport::Xrc,
        7 => Transport::Vendor,
        _ => Transport::Reserved,
    }
}

#[inline(always)]
const fn transport_prefix(t: Transport) -> &'static str {
    match t {
        Transport::Rc => "RC_",
        Transport::Uc => "UC_",
        Transport::Rd => "RD_",
        Transport::Ud => "UD_",
        Transport::Xrc => "XRC_",
        Transport::Cnp | Transport::Vendor | Transport::Reserved => "",
    }
}

/// The transport prefix and the operation name, e.g. `("RC_", "SEND_ONLY")`; `("", "CNP")` for
/// the CNP; `None` for reserved and vendor opcodes. Kept as two parts so that `no_std` code
/// never formats strings; [`name`] joins them on the host.
#[inline(always)]
pub fn name_parts(opcode: u8) -> Option<(&'static str, &'static str)> {
    let t = transport(opcode);
    match t {
        Transport::Cnp => Some(("", "CNP")),
        Transport::Vendor | Transport::Reserved => None,
        _ => match OPERATION_NAMES[(opcode & 0x1F) as usize] {
            Some(op) => Some((transport_prefix(t), op)),
            None => None,
        },
    }
}

/// The opcode's name, `RC_SEND_ONLY` style; reserved and vendor values get
/// `RESERVED_0xNN` and `VENDOR_0xNN` (256 values at most: a bounded label).
#[cfg(feature = "std")]
pub fn name(opcode: u8) -> String {
    match name_parts(opcode) {
        Some((prefix, op)) => format!("{prefix}{op}"),
        None if transport(opcode) == Transport::Vendor => format!("VENDOR_0x{opcode:02X}"),
        None => format!("RESERVED_0x{opcode:02X}"),
    }
}

/// The operation class of an opcode.
#[inline(always)]
const fn compute_class(opcode: u8) -> OpClass {
    match compute_transport(opcode) {
        Transport::Cnp | Transport::Vendor | Transport::Reserved => OpClass::Other,
        _ => match opcode & 0x1F {
            0x00..=0x05 | 0x16 | 0x17 => OpClass::Send,
            0x06..=0x0B | 0x1D => OpClass::Write,
            0x0C => OpClass::ReadRequest,
            0x0D..=0x10 => OpClass::ReadResponse,
            0x11 | 0x12 => OpClass::Ack,
            0x13 | 0x14 => OpClass::Atomic,
            _ => OpClass::Other,
        },
    }
}

/// Where the extension headers of an opcode lie, relative to the end of the BTH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtLayout {
    /// Offset of the DETH, if present.
    pub deth: Option<u8>,
    /// Offset of the RETH, if present.
    pub reth: Option<u8>,
    /// Offset of the AETH, if present.
    pub aeth: Option<u8>,
    /// Total length of all extension headers.
    pub len: u8,
}

/// Whether the operation is a request (requests carry DETH in RD and XRCETH in XRC).
#[inline(always)]
const fn is_request(op: u8) -> bool {
    !matches!(op, 0x0D..=0x12)
}

/// The extension headers of an opcode, in wire order: [RDETH] [DETH] [XRCETH] [RETH]
/// [AtomicETH] [AETH] [AtomicAckETH] [ImmDt] [IETH]. Reserved, vendor and CNP opcodes have
/// none (the CNP's 16 reserved bytes are payload).
#[inline(always)]
const fn compute_ext_layout(opcode: u8) -> ExtLayout {
    let t = compute_transport(opcode);
    let op = opcode & 0x1F;
    let mut l = ExtLayout {
        deth: None,
        reth: None,
        aeth: None,
        len: 0,
    };
    match t {
        Transport::Cnp | Transport::Vendor | Transport::Reserved => return l,
        Transport::Rd => {
            l.len += RDETH_LEN as u8;
            if is_request(op) {
                l.deth = Some(l.len);
                l.len += DETH_LEN as u8;
            }
        }
        Transport::Ud => {
            l.deth = Some(0);
            l.len += DETH_LEN as u8;
        }
        Transport::Xrc => {
            if is_request(op) {
                l.len += XRCETH_LEN as u8;
            }
        }
        Transport::Rc | Transport::Uc => {}
    }
    if matches!(op, 0x06 | 0x0A | 0x0B | 0x0C) {
        l.reth = Some(l.len);
        l.len += RETH_LEN as u8;
    }
    if matches!(op, 0x13 | 0x14) {
        l.len += ATOMICETH_LEN as u8;
    }
    if matches!(op, 0x0D | 0x0F | 0x10 | 0x11 | 0x12) {
        l.aeth = Some(l.len);
        l.len += AETH_LEN as u8;
    }
    if op == 0x12 {
        l.len += ATOMICACKETH_LEN as u8;
    }
    if matches!(op, 0x03 | 0x05 | 0x09 | 0x0B) {
        l.len += IMMDT_LEN as u8;
    }
    if matches!(op, 0x16 | 0x17) {
        l.len += IETH_LEN as u8;
    }
    l
}

/// Everything the packet path needs about an opcode, one byte each, computed at compile time
/// from the rules above: one table load per question instead of the chains of compares the
/// rules compile to (BPF has no jump tables), which the kernel programs ask several times per
/// packet (class, transport, sequencing, extension headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// [`OpClass`] discriminant.
    pub class: u8,
    /// [`Transport`] index (as in [`TRANSPORTS`]).
    pub transport: u8,
    /// Offsets of the DETH, RETH and AETH after the BTH, [`NO_EXT`] when absent.
    pub deth: u8,
    pub reth: u8,
    pub aeth: u8,
    /// Total length of the extension headers.
    pub len: u8,
}

/// "No such extension header" in [`OpInfo`].
pub const NO_EXT: u8 = 0xFF;

/// The transports in [`OpInfo::transport`] order.
pub const TRANSPORTS: [Transport; 8] = [
    Transport::Rc,
    Transport::Uc,
    Transport::Rd,
    Transport::Ud,
    Transport::Cnp,
    Transport::Xrc,
    Transport::Vendor,
    Transport::Reserved,
];

const fn transport_index(t: Transport) -> u8 {
    match t {
        Transport::Rc => 0,
        Transport::Uc => 1,
        Transport::Rd => 2,
        Transport::Ud => 3,
        Transport::Cnp => 4,
        Transport::Xrc => 5,
        Transport::Vendor => 6,
        Transport::Reserved => 7,
    }
}

const fn ext_offset(o: Option<u8>) -> u8 {
    match o {
        Some(v) => v,
        None => NO_EXT,
    }
}

/// The opcode table.
pub const OP_INFO: [OpInfo; 256] = {
    let mut t = [OpInfo {
        class: 0,
        transport: 0,
        deth: NO_EXT,
        reth: NO_EXT,
        aeth: NO_EXT,
        len: 0,
    }; 256];
    let mut i = 0;
    while i < 256 {
        let op = i as u8;
        let l = compute_ext_layout(op);
        t[i] = OpInfo {
            class: compute_class(op) as u8,
            transport: transport_index(compute_transport(op)),
            deth: ext_offset(l.deth),
            reth: ext_offset(l.reth),
            aeth: ext_offset(l.aeth),
            len: l.len,
        };
        i += 1;
    }
    t
};

/// One entry of the table, read as memory LLVM may not look into: otherwise it folds the
/// range checks below away (it knows every value of a constant table), and the BPF verifier,
/// which does not, sees an unbounded index.
#[inline(always)]
fn field(b: &u8) -> u8 {
    // SAFETY: a valid reference into a constant table.
    unsafe { core::ptr::read_volatile(b) }
}

/// The transport of an opcode.
#[inline(always)]
pub fn transport(opcode: u8) -> Transport {
    TRANSPORTS[(field(&OP_INFO[opcode as usize].transport) & 7) as usize]
}

/// The operation class of an opcode, rebuilt with a compare (see [`field`]).
#[inline(always)]
pub fn class(opcode: u8) -> OpClass {
    let c = field(&OP_INFO[opcode as usize].class);
    if (c as usize) < OpClass::COUNT {
        // SAFETY: `OpClass` is `#[repr(u8)]` with the discriminants 0..COUNT (tested).
        unsafe { core::mem::transmute::<u8, OpClass>(c) }
    } else {
        OpClass::Other
    }
}

/// The extension headers of an opcode (see the rules in `compute_ext_layout`).
#[inline(always)]
pub fn ext_layout(opcode: u8) -> ExtLayout {
    let i = &OP_INFO[opcode as usize];
    ExtLayout {
        deth: ext_at(field(&i.deth)),
        reth: ext_at(field(&i.reth)),
        aeth: ext_at(field(&i.aeth)),
        len: field(&i.len),
    }
}

#[inline(always)]
const fn ext_at(v: u8) -> Option<u8> {
    if v == NO_EXT {
        None
    } else {
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_answers_as_the_rules() {
        for (i, c) in OpClass::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "i {i:?}, c {c:?}");
        }
        for op in 0..=255u8 {
            assert_eq!(transport(op), compute_transport(op), "{op:#x}");
            assert_eq!(class(op), compute_class(op), "{op:#x}");
            assert_eq!(ext_layout(op), compute_ext_layout(op), "{op:#x}");
        }
    }

    #[test]
    fn ranges_per_transport_match_protocol_md() {
        // PROTOCOL.md: RC 0x00-0x17 and 0x1C-0x1D; UC 0x20-0x2B; UD 0x64-0x65;
        // XRC 0xA0-0xB4 and 0xB6-0xB7; CNP 0x81.
        for op in 0u16..=255 {
            let op = op as u8;
            let expect = match op {
                0x00..=0x17 | 0x1C | 0x1D => Transport::Rc,
                0x20..=0x2B => Transport::Uc,
                0x40..=0x55 | 0x5C | 0x5D => Transport::Rd,
                0x64 | 0x65 => Transport::Ud,
                0x81 => Transport::Cnp,
                0xA0..=0xB4 | 0xB6 | 0xB7 => Transport::Xrc,
                0xE0..=0xFF => Transport::Vendor,
                _ => Transport::Reserved,
            };
            assert_eq!(transport(op), expect, "opcode {op:#04x}");
            assert_eq!(
                name_parts(op).is_some(),
                !matches!(expect, Transport::Vendor | Transport::Reserved),
                "op {op:?}"
            );
        }
    }

    #[test]
    fn names() {
        assert_eq!(name(0x04), "RC_SEND_ONLY");
        assert_eq!(name(0x0A), "RC_RDMA_WRITE_ONLY");
        assert_eq!(name(0x2B), "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
        assert_eq!(name(0x64), "UD_SEND_ONLY");
        assert_eq!(name(0x81), "CNP");
        assert_eq!(name(0xB7), "XRC_SEND_ONLY_WITH_INVALIDATE");
        assert_eq!(name(0x1D), "RC_ATOMIC_WRITE");
        assert_eq!(name(0x80), "RESERVED_0x80");
        assert_eq!(name(0x18), "RESERVED_0x18");
        assert_eq!(name(0x2C), "RESERVED_0x2C");
        assert_eq!(name(0xF3), "VENDOR_0xF3");
    }

    #[test]
    fn classes() {
        assert_eq!(class(0x04), OpClass::Send);
        assert_eq!(class(0x17), OpClass::Send);
        assert_eq!(class(0x06), OpClass::Write);
        assert_eq!(class(0x0C), OpClass::ReadRequest);
        assert_eq!(class(0x10), OpClass::ReadResponse);
        assert_eq!(class(0x11), OpClass::Ack);
        assert_eq!(class(0x14), OpClass::Atomic);
        assert_eq!(class(0x81), OpClass::Other);
        assert_eq!(class(0xE5), OpClass::Other);
        assert_eq!(class(0x65), OpClass::Send);
    }

    #[test]
    fn extension_layouts() {
        // (opcode, deth, reth, aeth, total)
        type Row = (u8, Option<u8>, Option<u8>, Option<u8>, u8);
        let table: &[Row] = &[
            (0x04, None, None, None, 0),         // RC SEND_ONLY
            (0x05, None, None, None, 4),         // RC SEND_ONLY_WITH_IMMEDIATE
            (0x06, None, Some(0), None, 16),     // RC WRITE_FIRST
            (0x07, None, None, None, 0),         // RC WRITE_MIDDLE
            (0x0B, None, Some(0), None, 20),     // RC WRITE_ONLY_WITH_IMMEDIATE
            (0x0C, None, Some(0), None, 16),     // RC READ_REQUEST
            (0x0D, None, None, Some(0), 4),      // RC READ_RESPONSE_FIRST
            (0x0E, None, None, None, 0),         // RC READ_RESPONSE_MIDDLE
            (0x11, None, None, Some(0), 4),      // RC ACK
            (0x12, None, None, Some(0), 12),     // RC ATOMIC_ACK
            (0x13, None, None, None, 28),        // RC COMPARE_SWAP
            (0x17, None, None, None, 4),         // RC SEND_ONLY_WITH_INVALIDATE
            (0x64, Some(0), None, None, 8),      // UD SEND_ONLY
            (0x65, Some(0), None, None, 12),     // UD SEND_ONLY_WITH_IMMEDIATE
            (0x4C, Some(4), Some(12), None, 28), // RD READ_REQUEST
            (0x51, None, None, Some(4), 8),      // RD ACK
            (0x53, Some(4), None, None, 40),     // RD COMPARE_SWAP
            (0xAA, None, Some(4), None, 20),     // XRC WRITE_ONLY
            (0xB1, None, None, Some(0), 4),      // XRC ACK
            (0x81, None, None, None, 0),         // CNP
            (0xE0, None, None, None, 0),         // vendor
        ];
        for &(op, deth, reth, aeth, len) in table {
            let l = ext_layout(op);
            assert_eq!(
                (l.deth, l.reth, l.aeth, l.len),
                (deth, reth, aeth, len),
                "opcode {op:#04x}"
            );
        }
        for op in 0u16..=255 {
            assert!(
                ext_layout(op as u8).len as usize <= MAX_CHAIN_LEN,
                "op {op:?}"
            );
        }
    }
}
