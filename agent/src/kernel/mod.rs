//! The kernel side as the agent sees it: loading and attaching the programs ([`loader`],
//! [`attach`]), their pins on the bpffs ([`pins`], [`pin_object`]), whether they still run
//! ([`liveness`]).

pub mod attach;
pub mod liveness;
pub mod loader;
pub mod pin_object;
pub mod pins;
