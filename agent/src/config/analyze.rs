//! `analyze`'s settings' defaults (the flags show them; `pipeline::analyze_options` runs with them).

/// Defaults of `analyze`'s options (the flags show them).
pub mod defaults {
    /// `analyze --max-flows`: about 120 MB of flow table.
    pub const MAX_FLOWS: usize = 262_144;
    /// `analyze --link-speed`: 100 Gb/s, the common RoCE back-end port.
    pub const LINK_SPEED_GBPS: f64 = 100.0;
    pub const LINK_SPEED_BPS: u64 = 100_000_000_000;
}
