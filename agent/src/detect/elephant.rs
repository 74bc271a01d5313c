//! Elephant flows: a flow becomes an elephant when its smoothed rate stays at or above the
//! entry threshold for a minimum duration, and stops being one only after its rate stays below
//! a lower exit threshold for the release duration (hysteresis, so a flow near the threshold
//! does not flap).

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

/// The link speed of an interface in Mbit/s, when the driver reports one.
pub fn link_speed_mbps(sysfs_net: &std::path::Path, iface: &str) -> Option<f64> {
    let s = std::fs::read_to_string(sysfs_net.join(iface).join("speed")).ok()?;
    let v: f64 = s.trim().parse().ok()?;
    (v > 0.0).then_some(v)
}

/// Per-flow elephant state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ElephantState {
    pub elephant: bool,
    /// Seconds the rate has stayed at or above the entry threshold (while not an elephant).
    pub above_s: f64,
    /// Seconds the rate has stayed below the exit threshold (while an elephant).
    pub below_s: f64,
    /// When it last became an elephant (seconds on the table's clock).
    pub since_s: Option<f64>,
}

/// A change of state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Started,
    Ended,
}

/// A flow that became, or stopped being, an elephant.
#[derive(Clone, Copy, Debug)]
pub struct ElephantEvent {
    /// Index into the flow table's interfaces.
    pub iface: usize,
    pub key: agent_common::FlowKey,
    pub transition: Transition,
    /// Seconds on the table's clock.
    pub at_s: f64,
    pub rate_bytes: f64,
}

impl ElephantState {
    /// Advances by `dt` seconds at smoothed rate `rate` (bytes/s) against `enter` bytes/s.
    pub fn step(
        &mut self,
        cfg: &ElephantConfig,
        enter: f64,
        rate: f64,
        dt: f64,
        now_s: f64,
    ) -> Option<Transition> {
        if !self.elephant {
            if rate >= enter {
                self.above_s += dt;
                if self.above_s + 1e-9 >= cfg.min_duration_seconds {
                    self.elephant = true;
                    self.below_s = 0.0;
                    self.since_s = Some(now_s);
                    return Some(Transition::Started);
                }
            } else {
                self.above_s = 0.0;
            }
        } else if rate < enter * cfg.exit_ratio {
            self.below_s += dt;
            if self.below_s + 1e-9 >= cfg.release_seconds {
                self.elephant = false;
                self.above_s = 0.0;
                return Some(Transition::Ended);
            }
        } else {
            self.below_s = 0.0;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ElephantConfig {
        ElephantConfig {
            threshold_bytes_per_second: 1000.0,
            min_duration_seconds: 3.0,
            release_seconds: 2.0,
            ..Default::default()
        }
    }

    #[test]
    fn flagged_after_min_duration_released_after_hysteresis() {
        let c = cfg();
        let mut s = ElephantState::default();
        let mut t = 0.0;
        let mut events = vec![];
        let rates = [2000.0; 5].into_iter().chain([700.0; 4]).chain([100.0; 4]);
        for r in rates {
            t += 1.0;
            if let Some(e) = s.step(&c, 1000.0, r, 1.0, t) {
                events.push((e, t));
            }
        }
        // started after 3 s above; 700 is between exit (500) and entry: stays; released after
        // 2 s below 500.
        assert_eq!(
            events,
            vec![(Transition::Started, 3.0), (Transition::Ended, 11.0)]
        );
    }

    #[test]
    fn light_or_bursty_flows_never() {
        let c = cfg();
        let mut s = ElephantState::default();
        for (i, r) in [
            2000.0, 2000.0, 10.0, 2000.0, 2000.0, 10.0, 999.0, 999.0, 999.0, 999.0,
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(s.step(&c, 1000.0, *r, 1.0, i as f64), None);
        }
        assert!(!s.elephant);
    }

    #[test]
    fn link_share_thresholds() {
        let mut c = cfg();
        assert_eq!(c.enter_bps(Some(100_000.0)), 1000.0);
        c.threshold_link_share = Some(0.1);
        assert_eq!(c.enter_bps(Some(100_000.0)), 0.1 * 100e9 / 8.0);
        assert_eq!(c.enter_bps(None), 1000.0);
        c.link_speed_mbps = Some(8.0);
        assert_eq!(c.enter_bps(None), 100_000.0);
        assert!(c.validate().is_ok());
        c.threshold_link_share = Some(1.5);
        assert!(c.validate().unwrap_err().contains("threshold_link_share"));
    }
}
