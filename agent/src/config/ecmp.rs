//! `[ecmp]` of the configuration: the observed groups (a host's uplinks) and the switch hash
//! model of the predicted paths, checked. The model's hashing is in `detect/hash.rs`; the
//! views built over them in `detect/ecmp.rs`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A named group of interfaces that are the uplinks of one ECMP group.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: String,
    pub interfaces: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EcmpConfig {
    #[serde(default)]
    pub groups: Vec<GroupConfig>,
    /// The switch hash model for predicted paths.
    #[serde(default)]
    pub hash: Option<HashModel>,
}

impl EcmpConfig {
    pub fn validate(&self, ifaces: Option<&[String]>) -> Result<(), String> {
        let mut names = BTreeSet::new();
        for g in &self.groups {
            if !names.insert(&g.name) {
                return Err(format!(
                    "ecmp group '{}' is defined twice; give each group one name",
                    g.name
                ));
            }
            if g.interfaces.len() < 2 {
                return Err(format!(
                    "ecmp group '{}' needs at least two interfaces (its uplinks)",
                    g.name
                ));
            }
            if let Some(all) = ifaces {
                for i in &g.interfaces {
                    if !all.contains(i) {
                        return Err(format!(
                            "ecmp group '{}' names interface '{i}', which is not watched; add it to interfaces (or --iface)",
                            g.name
                        ));
                    }
                }
            }
        }
        if let Some(h) = &self.hash {
            if h.paths == 0 || h.paths > 4096 {
                return Err(format!(
                    "ecmp.hash.paths {} is out of range; use 1 to 4096",
                    h.paths
                ));
            }
            if h.fields.is_empty() {
                return Err("ecmp.hash.fields is empty; list e.g. [\"src_ip\", \"dst_ip\", \"protocol\", \"src_port\", \"dst_port\"]".into());
            }
        }
        Ok(())
    }
}

/// The hash function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HashFn {
    /// CRC-16/ARC: polynomial 0x8005, reflected, init 0 (check 0xBB3D).
    Crc16_8005,
    /// CRC-16/BUYPASS (UMTS): polynomial 0x8005, not reflected, init 0 (check 0xFEE8).
    Crc16_8005Msb,
    /// CRC-16/XMODEM: polynomial 0x1021, not reflected, init 0 (check 0x31C3).
    Crc16_1021,
    /// CRC-16/CCITT-FALSE: polynomial 0x1021, init 0xFFFF (check 0x29B1).
    Crc16_1021Ffff,
    /// CRC-32 (IEEE 802.3), upper 16 bits (check 0xCBF43926 -> 0xCBF4).
    Crc32Upper,
    /// CRC-32 (IEEE 802.3), lower 16 bits (-> 0x3926).
    Crc32Lower,
    /// XOR of the 16-bit big-endian words of the key.
    XorFold,
}

/// A header field the switch hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    SrcIp,
    DstIp,
    Protocol,
    SrcPort,
    DstPort,
    /// The BTH destination QP (enhanced ECMP, as Meta deployed it).
    DestQp,
}

/// A configured switch hash: function, seed, fields (in order) and the number of paths.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HashModel {
    pub function: HashFn,
    #[serde(default)]
    pub seed: Option<u32>,
    #[serde(default = "default_fields")]
    pub fields: Vec<Field>,
    pub paths: u32,
}

pub fn default_fields() -> Vec<Field> {
    vec![
        Field::SrcIp,
        Field::DstIp,
        Field::Protocol,
        Field::SrcPort,
        Field::DstPort,
    ]
}
