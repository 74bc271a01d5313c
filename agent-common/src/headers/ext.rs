//! Extension headers after the BTH (lengths and the fields rocemon reads).

/// Reliable Datagram ETH.
pub const RDETH_LEN: usize = 4;
/// Datagram ETH: Q_Key (4), reserved (1), source QP (3).
pub const DETH_LEN: usize = 8;
/// XRC ETH: XRC SRQ number.
pub const XRCETH_LEN: usize = 4;
/// RDMA ETH: virtual address (8), R_Key (4), DMA length (4).
pub const RETH_LEN: usize = 16;
/// Atomic ETH: VA (8), R_Key (4), swap/add (8), compare (8).
pub const ATOMICETH_LEN: usize = 28;
/// ACK ETH: syndrome (1), MSN (3).
pub const AETH_LEN: usize = 4;
/// Atomic ACK ETH: original remote data (8).
pub const ATOMICACKETH_LEN: usize = 8;
/// Immediate data.
pub const IMMDT_LEN: usize = 4;
/// Invalidate ETH: R_Key.
pub const IETH_LEN: usize = 4;
/// The longest extension chain of any opcode: RDETH + DETH + AtomicETH (RD atomics).
pub const MAX_CHAIN_LEN: usize = RDETH_LEN + DETH_LEN + ATOMICETH_LEN;

/// What an AETH syndrome says (bits 6-5 select the kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AethKind {
    /// Positive ACK; the low bits are the credit count.
    Ack,
    /// Receiver not ready; the low bits are the RNR timer.
    RnrNak,
    Reserved,
    /// Negative ACK; the low bits are the NAK code (see [`NakCode`]).
    Nak,
}

/// NAK codes (syndrome bits 4-0 when the kind is NAK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

#[inline(always)]
pub const fn aeth_kind(syndrome: u8) -> AethKind {
    match (syndrome >> 5) & 0x03 {
        0 => AethKind::Ack,
        1 => AethKind::RnrNak,
        2 => AethKind::Reserved,
        _ => AethKind::Nak,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes() {
        assert_eq!(aeth_kind(0x1F), AethKind::Ack);
        assert_eq!(aeth_kind(0x20 | 0x0E), AethKind::RnrNak);
        assert_eq!(aeth_kind(0x40), AethKind::Reserved);
        assert_eq!(aeth_kind(0x60), AethKind::Nak);
        assert_eq!(
            aeth_kind(0x60 | NakCode::RemoteAccessError as u8),
            AethKind::Nak
        );
        assert_eq!(MAX_CHAIN_LEN, 40);
    }
}
