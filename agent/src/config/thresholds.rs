//! Detector thresholds `run` and `analyze` both take (flag, file key, one check, one
//! default): the same setting gives the same findings live and offline.

use super::{bad, setting};
use crate::error::UsageError;

/// The PFC storm threshold, `run` and `analyze` alike: the flag over the file's
/// `pfc_storm_seconds`, 0.2 s by default (SONiC's PFC watchdog), 1 ms to an hour.
pub fn pfc_storm_seconds(flag: Option<f64>, file: Option<f64>) -> Result<f64, UsageError> {
    let (v, name) = setting(flag, "--pfc-storm-seconds", file, "pfc_storm_seconds")
        .unwrap_or((DEFAULT_PFC_STORM_S, "pfc_storm_seconds"));
    if !(v.is_finite() && (0.001..=3600.0).contains(&v)) {
        return Err(bad(format!(
            "{name} {v} is out of range; use 0.001 to 3600 (e.g. 0.2, as SONiC's PFC watchdog)"
        )));
    }
    Ok(v)
}

/// A link speed given in Gb/s (`--link-speed`, `run` and `analyze` alike): above 0, at most
/// 10 Tb/s; in bits per second.
pub fn link_speed_bps(gbps: f64) -> Result<u64, UsageError> {
    if !(gbps.is_finite() && gbps > 0.0 && gbps <= 10_000.0) {
        return Err(bad(format!(
            "--link-speed {gbps} is not a link speed; give Gb/s above 0, e.g. --link-speed 400"
        )));
    }
    Ok((gbps * 1e9) as u64)
}

/// The PFC storm threshold's default, seconds.
pub const DEFAULT_PFC_STORM_S: f64 = DEFAULT_PFC_STORM_NS as f64 / 1e9;
/// The same in nanoseconds: a priority paused continuously this long is a storm.
pub const DEFAULT_PFC_STORM_NS: u64 = 200_000_000;

/// Default time constant of the exponentially weighted flow rates, in seconds.
pub const RATE_TAU_SECONDS: f64 = 2.0;
