//! The traffic classes RoCE and CNPs are expected in, and whether a packet is in its class.
//!
//! A lossless fabric protects RDMA only when every RoCE packet carries the DSCP (and, when
//! tagged, the 802.1p priority) that the switches map to the PFC-enabled queue; CNPs travel
//! in their own, usually strict-priority, class. A RoCE packet outside the expected class is
//! "lossy RoCE": a misconfigured host whose RDMA is not protected by PFC. The defaults are the
//! common NIC defaults (RoCE on DSCP 26 / priority 3, CNPs on DSCP 48).

/// The expectation, as bit sets so the kernel tests it with a shift and a mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrafficClasses {
    /// Bit `d` set: DSCP `d` is a RoCE class.
    pub roce_dscp: u64,
    /// The 802.1p priority of tagged RoCE packets; [`ANY_PRIORITY`] accepts every priority.
    pub roce_priority: u8,
    /// Bit `d` set: DSCP `d` is a CNP class.
    pub cnp_dscp: u64,
}

/// [`TrafficClasses::roce_priority`] that accepts any priority (DSCP-only fabrics).
pub const ANY_PRIORITY: u8 = 0xFF;

impl Default for TrafficClasses {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TrafficClasses {
    /// RoCE on DSCP 26 and priority 3, CNPs on DSCP 48.
    pub const DEFAULT: TrafficClasses = TrafficClasses {
        roce_dscp: 1 << 26,
        roce_priority: 3,
        cnp_dscp: 1 << 48,
    };

    /// Whether a (non-CNP) RoCE packet with this DSCP and priority is in the RoCE class.
    #[inline(always)]
    pub fn roce_in_class(&self, dscp: u8, pcp: Option<u8>) -> bool {
        if self.roce_dscp & (1u64 << (dscp & 63)) == 0 {
            return false;
        }
        match pcp {
            Some(p) => self.roce_priority == ANY_PRIORITY || p == self.roce_priority,
            None => true,
        }
    }

    /// Whether a CNP with this DSCP is in the CNP class.
    #[inline(always)]
    pub fn cnp_in_class(&self, dscp: u8) -> bool {
        self.cnp_dscp & (1u64 << (dscp & 63)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_common_nic_defaults() {
        let c = TrafficClasses::DEFAULT;
        assert!(c.roce_in_class(26, None));
        assert!(c.roce_in_class(26, Some(3)));
        assert!(!c.roce_in_class(26, Some(0)));
        assert!(!c.roce_in_class(0, None));
        assert!(!c.roce_in_class(48, Some(3)));
        assert!(c.cnp_in_class(48));
        assert!(!c.cnp_in_class(26));
    }

    #[test]
    fn any_priority_checks_the_dscp_only() {
        let c = TrafficClasses {
            roce_priority: ANY_PRIORITY,
            ..TrafficClasses::DEFAULT
        };
        assert!(c.roce_in_class(26, Some(5)));
        assert!(!c.roce_in_class(24, Some(3)));
    }
}
