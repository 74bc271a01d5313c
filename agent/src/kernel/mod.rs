//! The kernel side as the agent sees it: loading and attaching the programs ([`loader`]), their pins on the bpffs ([`pins`]).

pub mod attach;
pub mod liveness;
pub mod loader;
pub mod pins;
