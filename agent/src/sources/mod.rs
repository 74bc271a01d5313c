//! Where frames and counts come from: kernel maps (see [`crate::loader`]), capture files, and
//! the RDMA NIC counters and queue pairs of hosts whose RoCE traffic bypasses the kernel; and
//! the link events that say when a watched interface comes or goes.
pub mod afxdp;
pub mod capture;
pub mod input;
pub mod links;
pub mod nic_pause;
pub mod rdma;
pub mod tally;
