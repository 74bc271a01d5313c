//! Elephant flows: a flow becomes an elephant when its smoothed rate stays at or above the
//! entry threshold for a minimum duration, and stops being one only after its rate stays below
//! a lower exit threshold for the release duration (hysteresis, so a flow near the threshold
//! does not flap).

use crate::config::elephant::ElephantConfig;

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
