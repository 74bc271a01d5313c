//! Where a frame was seen: the hooks rocemon's programs attach to (a leaf of the shared
//! vocabulary: it imports nothing of this crate but its constants).

/// Where a frame was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Hook {
    Xdp = 0,
    TcIngress = 1,
    TcEgress = 2,
    /// The AF_XDP capture program: frames it keeps in the kernel are counted there, frames it
    /// redirects are counted by the userspace socket reader into the same kind of block.
    AfXdp = 3,
}

impl Hook {
    pub const COUNT: usize = 4;
    pub const ALL: [Hook; Self::COUNT] = [Hook::Xdp, Hook::TcIngress, Hook::TcEgress, Hook::AfXdp];

    /// The hook of a discriminant passed as a scalar (to a BPF global function); anything
    /// out of range is the last hook.
    #[inline(always)]
    pub const fn from_u32(v: u32) -> Hook {
        match v {
            0 => Hook::Xdp,
            1 => Hook::TcIngress,
            2 => Hook::TcEgress,
            _ => Hook::AfXdp,
        }
    }

    /// Whether a flow key's hook byte is the host's sending side (tc egress): such flows live
    /// in their own flow map (`FLOWS_OUT`), a budget no incoming flood reaches.
    #[inline(always)]
    pub const fn sends(hook: u8) -> bool {
        hook == Hook::TcEgress as u8
    }

    pub const fn name(self) -> &'static str {
        match self {
            Hook::Xdp => "xdp",
            Hook::TcIngress => "tc_ingress",
            Hook::TcEgress => "tc_egress",
            Hook::AfXdp => "afxdp",
        }
    }

    /// The kernel program that counts at this hook.
    pub const fn program(self) -> &'static str {
        match self {
            Hook::Xdp => crate::contract::programs::PROG_XDP,
            Hook::TcIngress => crate::contract::programs::PROG_TC_INGRESS,
            Hook::TcEgress => crate::contract::programs::PROG_TC_EGRESS,
            Hook::AfXdp => crate::contract::programs::PROG_AFXDP,
        }
    }

    /// Where this hook's slow program sits: (program array, slot, program name). The kernel
    /// tail-calls the slot as a constant; the loader fills it.
    pub const fn slow_path(self) -> (&'static str, u32, &'static str) {
        match self {
            Hook::Xdp => (
                crate::contract::maps::MAP_XDP_SLOW,
                0,
                crate::contract::programs::PROG_XDP_SLOW,
            ),
            Hook::AfXdp => (
                crate::contract::maps::MAP_XDP_SLOW,
                1,
                crate::contract::programs::PROG_AFXDP_SLOW,
            ),
            Hook::TcIngress => (
                crate::contract::maps::MAP_TC_SLOW,
                0,
                crate::contract::programs::PROG_TC_INGRESS_SLOW,
            ),
            Hook::TcEgress => (
                crate::contract::maps::MAP_TC_SLOW,
                1,
                crate::contract::programs::PROG_TC_EGRESS_SLOW,
            ),
        }
    }

    pub const fn direction(self) -> &'static str {
        match self {
            Hook::Xdp | Hook::TcIngress | Hook::AfXdp => "ingress",
            Hook::TcEgress => "egress",
        }
    }
}
