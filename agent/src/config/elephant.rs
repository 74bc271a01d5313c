//! `[elephant]` of the configuration: when a flow is an elephant (the entry threshold in
//! bytes per second or as a share of the link, the exit ratio, the durations), checked, and
//! the entry threshold of a link (`detect/elephant.rs` applies it).

use serde::Deserialize;

/// Thresholds as configured.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElephantConfig {
    /// Entry threshold in bytes per second (wire bytes); used when no link share is given
    /// or the link speed is unknown.
    #[serde(default = "default_bps")]
    pub threshold_bytes_per_second: f64,
    /// Entry threshold as a share of the interface's link speed (0 < share <= 1), read from
    /// /sys/class/net/IF/speed where the driver reports it.
    #[serde(default)]
    pub threshold_link_share: Option<f64>,
    /// Link speed in Mbit/s for interfaces whose driver reports none (veth, some VFs).
    #[serde(default)]
    pub link_speed_mbps: Option<f64>,
    /// The exit threshold as a fraction of the entry threshold.
    #[serde(default = "default_exit")]
    pub exit_ratio: f64,
    /// How long the rate must stay at or above the threshold.
    #[serde(default = "default_min")]
    pub min_duration_seconds: f64,
    /// How long the rate must stay below the exit threshold to release an elephant.
    #[serde(default = "default_min")]
    pub release_seconds: f64,
}

fn default_bps() -> f64 {
    12_500_000.0 // 100 Mbit/s
}
fn default_exit() -> f64 {
    0.5
}
fn default_min() -> f64 {
    3.0
}

impl Default for ElephantConfig {
    fn default() -> Self {
        ElephantConfig {
            threshold_bytes_per_second: default_bps(),
            threshold_link_share: None,
            link_speed_mbps: None,
            exit_ratio: default_exit(),
            min_duration_seconds: default_min(),
            release_seconds: default_min(),
        }
    }
}

impl ElephantConfig {
    /// Checks the values; the message names the key and the fix.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.threshold_bytes_per_second) {
            return Err("elephant.threshold_bytes_per_second must be above 0".into());
        }
        if let Some(s) = self.threshold_link_share {
            if !(positive(s) && s <= 1.0) {
                return Err(format!("elephant.threshold_link_share {s} must be in (0, 1], e.g. 0.1 for 10% of the link"));
            }
        }
        if !(positive(self.exit_ratio) && self.exit_ratio <= 1.0) {
            return Err(format!(
                "elephant.exit_ratio {} must be in (0, 1]",
                self.exit_ratio
            ));
        }
        if !(self.min_duration_seconds.is_finite()
            && self.release_seconds.is_finite()
            && self.min_duration_seconds >= 0.0
            && self.release_seconds >= 0.0)
        {
            return Err("elephant.min_duration_seconds and release_seconds must be >= 0".into());
        }
        Ok(())
    }

    /// The entry threshold in bytes/s for a link of `speed_mbps` (if known).
    pub fn enter_bps(&self, speed_mbps: Option<f64>) -> f64 {
        match (
            self.threshold_link_share,
            speed_mbps.or(self.link_speed_mbps),
        ) {
            (Some(share), Some(mbps)) if mbps > 0.0 => share * mbps * 1e6 / 8.0,
            _ => self.threshold_bytes_per_second,
        }
    }
}
