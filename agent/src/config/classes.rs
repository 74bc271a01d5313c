//! The `[classes]` section: which DSCPs and 802.1p priority RoCE is expected in, and which
//! DSCPs CNPs are (shared by `run`, whose kernel programs get it at load time, and `analyze`).
//!
//! ```toml
//! [classes]
//! roce_dscp = [26]      # DSCPs of the lossless (PFC-protected) RoCE class
//! roce_priority = 3     # 802.1p priority of tagged RoCE; "any" for DSCP-only fabrics
//! cnp_dscp = [48]       # DSCPs of CNPs
//! ```

use agent_common::classes::{TrafficClasses, ANY_PRIORITY};
use serde::Deserialize;

/// The section as written (all keys optional; the defaults are the common NIC defaults).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassesSection {
    pub roce_dscp: Option<Vec<u8>>,
    pub roce_priority: Option<Priority>,
    pub cnp_dscp: Option<Vec<u8>>,
}

/// An 802.1p priority, or "any".
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Priority {
    Value(i64),
    Word(String),
}

fn dscp_set(key: &str, list: &[u8]) -> Result<u64, String> {
    if list.is_empty() {
        return Err(format!(
            "classes.{key} is empty; list at least one DSCP (0 to 63), e.g. {key} = [26]"
        ));
    }
    let mut set = 0u64;
    for &d in list {
        if d > 63 {
            return Err(format!(
                "classes.{key} has DSCP {d}; a DSCP is 0 to 63 (the six high bits of the TOS)"
            ));
        }
        set |= 1 << d;
    }
    Ok(set)
}

impl ClassesSection {
    /// The validated expectation; errors name the key and the fix.
    pub fn resolve(&self) -> Result<TrafficClasses, String> {
        let d = TrafficClasses::DEFAULT;
        let roce_dscp = match &self.roce_dscp {
            Some(l) => dscp_set("roce_dscp", l)?,
            None => d.roce_dscp,
        };
        let cnp_dscp = match &self.cnp_dscp {
            Some(l) => dscp_set("cnp_dscp", l)?,
            None => d.cnp_dscp,
        };
        let roce_priority = match &self.roce_priority {
            None => d.roce_priority,
            Some(Priority::Value(p)) if (0..=7).contains(p) => *p as u8,
            Some(Priority::Word(w)) if w == "any" => ANY_PRIORITY,
            Some(other) => {
                let shown = match other {
                    Priority::Value(v) => v.to_string(),
                    Priority::Word(w) => format!("{w:?}"),
                };
                return Err(format!(
                    "classes.roce_priority {shown} is not a priority; use 0 to 7, or \"any\" to check the DSCP only"
                ));
            }
        };
        Ok(TrafficClasses {
            roce_dscp,
            roce_priority,
            cnp_dscp,
        })
    }
}

/// DSCPs of a set, as "26" or "24,26".
pub fn dscp_list(set: u64) -> String {
    (0..64)
        .filter(|d| set & (1u64 << d) != 0)
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// One line for `check-config` and the startup log.
pub fn summary(c: &TrafficClasses) -> String {
    format!(
        "classes: RoCE DSCP {} priority {}, CNP DSCP {}",
        dscp_list(c.roce_dscp),
        if c.roce_priority == ANY_PRIORITY {
            "any".to_string()
        } else {
            c.roce_priority.to_string()
        },
        dscp_list(c.cnp_dscp)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> Result<TrafficClasses, String> {
        toml::from_str::<ClassesSection>(text)
            .map_err(|e| e.to_string())?
            .resolve()
    }

    #[test]
    fn empty_section_is_the_default() {
        assert_eq!(section("").unwrap(), TrafficClasses::DEFAULT);
    }

    #[test]
    fn sets_and_any_priority() {
        let c = section("roce_dscp = [24, 26]\nroce_priority = \"any\"\ncnp_dscp = [46]").unwrap();
        assert_eq!(c.roce_dscp, (1 << 24) | (1 << 26));
        assert_eq!(c.roce_priority, ANY_PRIORITY);
        assert_eq!(c.cnp_dscp, 1 << 46);
        assert_eq!(
            summary(&c),
            "classes: RoCE DSCP 24,26 priority any, CNP DSCP 46"
        );
    }

    #[test]
    fn a_dscp_above_63_names_the_key_and_range() {
        let e = section("roce_dscp = [64]").unwrap_err();
        assert!(
            e.contains("classes.roce_dscp") && e.contains("0 to 63"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_set_names_the_fix() {
        let e = section("cnp_dscp = []").unwrap_err();
        assert!(
            e.contains("cnp_dscp = [26]") || e.contains("at least one"),
            "{e}"
        );
    }

    #[test]
    fn a_priority_above_7_names_the_range() {
        let e = section("roce_priority = 8").unwrap_err();
        assert!(e.contains("0 to 7") && e.contains("\"any\""), "{e}");
        let e = section("roce_priority = \"three\"").unwrap_err();
        assert!(e.contains("roce_priority"), "{e}");
    }
}
