//! Where frames and counts come from: kernel maps ([`maps`]; the loader owns the object),
//! capture files, the RDMA NIC counters and queue pairs of hosts whose RoCE traffic bypasses
//! the kernel, the NIC's own pause counters ([`nic_pause`]), the kernel's PFC and PAUSE
//! frames with their times ([`pause_ring`]), and the link events that say when
//! a watched interface comes or goes. [`prog_run`] runs loaded programs on demand (the flow
//! cache's flush before each read of the flow maps).
pub mod afxdp;
pub mod batch;
pub mod capture;
mod capture_legacy;
pub mod capture_types;
pub mod flow_pressure;
pub mod input;
pub mod links;
pub mod maps;
pub mod nic_pause;
pub mod pause_ring;
pub mod prog_run;
pub mod rdma;
pub mod tally;
