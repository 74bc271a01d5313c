//! Logs for a daemon: plain text on a terminal, syslog priority prefixes when stderr goes to
//! the systemd journal (so `journalctl -p warning` works and the journal adds the time), or
//! one JSON object per line for log shippers. The level comes from the configuration
//! (`log_level`, `--log-level`), `RUST_LOG` overriding it, and a reload can change it.

use serde::Deserialize;
use std::io::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Journal when stderr is the systemd journal (JOURNAL_STREAM), else text.
    Auto,
    Text,
    Journal,
    Json,
}

/// The syslog priority of a level (sd-daemon(3) prefixes).
fn priority(l: log::Level) -> u8 {
    match l {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Installs the logger. Records of other crates below `warn` are kept out at `info`, so the
/// agent's own lines are not drowned by its dependencies.
pub fn init(format: LogFormat, level: log::LevelFilter) {
    let format = match format {
        LogFormat::Auto if std::env::var_os("JOURNAL_STREAM").is_some() => LogFormat::Journal,
        LogFormat::Auto => LogFormat::Text,
        f => f,
    };
    let mut b = env_logger::Builder::new();
    b.filter_level(log::LevelFilter::Trace);
    if level <= log::LevelFilter::Info {
        b.filter_module("aya", log::LevelFilter::Warn)
            .filter_module("hyper", log::LevelFilter::Warn);
    }
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
    }
    match format {
        LogFormat::Journal => {
            b.format(|f, r| writeln!(f, "<{}>{}: {}", priority(r.level()), r.target(), r.args()));
        }
        LogFormat::Json => {
            b.format(|f, r| {
                let ts = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                let line = serde_json::json!({
                    "ts": ts,
                    "level": r.level().as_str(),
                    "target": r.target(),
                    "msg": r.args().to_string(),
                });
                writeln!(f, "{line}")
            });
        }
        _ => {
            b.format_timestamp_millis();
        }
    }
    // A second init (tests) keeps the first logger.
    let _ = b.try_init();
    log::set_max_level(if std::env::var_os("RUST_LOG").is_some() {
        log::LevelFilter::Trace
    } else {
        level
    });
}

/// Parses a level name as written in the configuration.
pub fn parse_level(s: &str) -> Result<log::LevelFilter, String> {
    s.parse::<log::LevelFilter>().map_err(|_| {
        format!(
            "log_level {} is not a level; use error, warn, info, debug or trace",
            crate::error::quote(s)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_map_to_syslog_priorities() {
        assert_eq!(parse_level("debug"), Ok(log::LevelFilter::Debug));
        assert!(parse_level("loud").unwrap_err().contains("use error, warn"));
        assert_eq!(priority(log::Level::Error), 3);
        assert_eq!(priority(log::Level::Info), 6);
    }
}
