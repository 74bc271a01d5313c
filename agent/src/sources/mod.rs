//! Where frames and counts come from: kernel maps (see [`crate::loader`]), capture files, and
//! the RDMA NIC counters and queue pairs of hosts whose RoCE traffic bypasses the kernel.
pub mod afxdp;
pub mod capture;
pub mod rdma;
pub mod tally;
