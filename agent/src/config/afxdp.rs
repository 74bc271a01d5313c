//! AF_XDP capture settings (`--capture afxdp`, `[afxdp]`): how the sockets bind and are read
//! (`sources/afxdp.rs` opens and reads them).

/// How the sockets bind: zero-copy needs driver support; copy works everywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BindMode {
    Auto,
    Copy,
    #[value(name = "zerocopy")]
    #[serde(rename = "zerocopy")]
    ZeroCopy,
}

/// How the sockets are bound and read. The defaults come from the live benchmark
/// (`cargo xtask bench`, AF_XDP rows: batch sizes, pauses and busy polling measured side by
/// side on a veth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfxdpOptions {
    pub mode: BindMode,
    /// Descriptors taken from the receive ring per pass (at most [`MAX_BATCH`], the ring's size).
    pub batch: u32,
    /// How long the receive loop lets frames gather when its ring runs empty, before it
    /// waits for them (0: wait at once).
    pub coalesce_us: u32,
    /// Busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` of this many microseconds, a
    /// budget of `batch`): the receive loop drives the driver's receive queue itself instead
    /// of waiting for its interrupt (0: off).
    pub busy_poll_us: u32,
}

impl Default for AfxdpOptions {
    fn default() -> Self {
        AfxdpOptions {
            mode: BindMode::Auto,
            batch: 64,
            coalesce_us: 200,
            busy_poll_us: 0,
        }
    }
}

/// Receive ring entries (and UMEM frames) per queue: the largest batch (the sockets' ring size,
/// `sources/afxdp.rs` `FRAMES`, is this).
pub const MAX_BATCH: u32 = 2048;
