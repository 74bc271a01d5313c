//! Linux cooked capture headers (what `tcpdump -i any` writes): SLL (v1) and SLL2.

/// SLL v1 header length; the protocol (an EtherType) is its last two bytes.
pub const SLL_LEN: usize = 16;
pub const SLL_PROTOCOL_OFFSET: usize = 14;
/// SLL2 header length; the protocol is its first two bytes.
pub const SLL2_LEN: usize = 20;
pub const SLL2_PROTOCOL_OFFSET: usize = 0;
