//! The commands that wire the pipeline: `rocemon run` ([`run`]: its links, reloads, rhythm,
//! flows, findings and flow records in files of their own), `rocemon analyze` ([`analyze`],
//! its report written by [`report_out`]) and `rocemon top` ([`top`]: rows read from the API,
//! drawn as a terminal UI or plain text).

pub mod admin;
pub mod analyze;
pub mod rdma;
pub mod report_out;
pub mod run;
pub mod start;
pub mod top;
