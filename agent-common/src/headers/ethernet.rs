//! Ethernet II and 802.1Q / 802.1ad (QinQ) tags.

/// Ethernet header length (destination, source, EtherType).
pub const LEN: usize = 14;
/// Offset of the EtherType in the Ethernet header.
pub const ETHERTYPE_OFFSET: usize = 12;
/// One VLAN tag (TCI + inner EtherType).
pub const VLAN_TAG_LEN: usize = 4;
/// How many stacked tags the parser walks (single tag and QinQ).
pub const MAX_VLAN_TAGS: usize = 2;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// 802.1Q customer tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// 802.1ad service tag (QinQ outer tag).
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
/// Pre-standard QinQ outer tag still used by some switches.
pub const ETHERTYPE_QINQ_OLD: u16 = 0x9100;

/// Whether an EtherType announces a VLAN tag.
#[inline(always)]
pub const fn is_vlan(ethertype: u16) -> bool {
    matches!(
        ethertype,
        ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_ethertypes() {
        assert!(is_vlan(0x8100));
        assert!(is_vlan(0x88A8));
        assert!(is_vlan(0x9100));
        assert!(!is_vlan(ETHERTYPE_IPV4));
        assert!(!is_vlan(ETHERTYPE_IPV6));
    }
}
