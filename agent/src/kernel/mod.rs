//! The kernel side as the agent sees it: loading and attaching the programs ([`loader`]), their pins on the bpffs ([`pins`]), and BPF_PROG_TEST_RUN for tests and benchmarks ([`testrun`]).

pub mod loader;
pub mod pins;
pub mod testrun;
