//! `[rdma]` of the configuration: whether and from where the live agent (and `rocemon rdma`)
//! reads the host's RC connections (`sources/rdma.rs` reads them).

/// Where the live agent (and `rocemon rdma`) reads the host's queue pairs from.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RdmaConfig {
    /// Read the host's RC connections (`rdma res`) into the predicted ECMP view; default true.
    #[serde(default)]
    pub connections: Option<bool>,
    /// Recorded `rdma -j res show qp` output to read instead of running `rdma`.
    #[serde(default)]
    pub qp_json: Option<std::path::PathBuf>,
    /// Recorded `rdma -j res show cm_id` output.
    #[serde(default)]
    pub cm_id_json: Option<std::path::PathBuf>,
    /// Count every RC connection as an elephant in the predicted view (their rates are not
    /// visible when the NIC bypasses the kernel; on training hosts each RC connection of a
    /// collective carries bulk data). Default true.
    #[serde(default)]
    pub assume_elephants: Option<bool>,
}

impl RdmaConfig {
    pub fn enabled(&self) -> bool {
        self.connections.unwrap_or(true)
    }
    pub fn elephants(&self) -> bool {
        self.assume_elephants.unwrap_or(true)
    }
}
