//! Models of fabric-switch ECMP hashes, for hosts that see their own flows but not the switch.
//!
//! Real switch hash layouts vary by vendor, ASIC and configuration (which fields, in which
//! order, which polynomial, seed, and how the result is folded onto the members of a group).
//! These models are common building blocks; configure the one that matches your switches, and
//! treat predicted paths as a model, not an observation.

pub use crate::config::ecmp::{default_fields, Field, HashFn, HashModel};

impl HashFn {
    /// The 16-bit hash of `data`; `seed`, when given, replaces the initial value (CRCs) or is
    /// XORed in (XOR fold), as switch "hash seed" settings do.
    pub fn hash(self, data: &[u8], seed: Option<u32>) -> u16 {
        match self {
            HashFn::Crc16_8005 => {
                crc16_reflected(0xA001, seed.map(|s| s as u16).unwrap_or(0), data)
            }
            HashFn::Crc16_8005Msb => crc16_msb(0x8005, seed.map(|s| s as u16).unwrap_or(0), data),
            HashFn::Crc16_1021 => crc16_msb(0x1021, seed.map(|s| s as u16).unwrap_or(0), data),
            HashFn::Crc16_1021Ffff => {
                crc16_msb(0x1021, seed.map(|s| s as u16).unwrap_or(0xFFFF), data)
            }
            HashFn::Crc32Upper => (crc32(seed.unwrap_or(0xFFFF_FFFF), data) >> 16) as u16,
            HashFn::Crc32Lower => crc32(seed.unwrap_or(0xFFFF_FFFF), data) as u16,
            HashFn::XorFold => {
                let mut h = seed.map(|s| s as u16).unwrap_or(0);
                for c in data.chunks(2) {
                    h ^= u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]);
                }
                h
            }
        }
    }
}

fn crc16_msb(poly: u16, init: u16, data: &[u8]) -> u16 {
    let mut crc = init;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ poly
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// `poly_reflected` is the bit-reversed polynomial (0xA001 for 0x8005).
fn crc16_reflected(poly_reflected: u16, init: u16, data: &[u8]) -> u16 {
    let mut crc = init;
    for &b in data {
        crc ^= b as u16;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ poly_reflected
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// CRC-32 (IEEE, reflected polynomial 0xEDB88320, final XOR).
fn crc32(init: u32, data: &[u8]) -> u32 {
    let mut crc = init;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Where a flow goes: the fields a switch hashes.
#[derive(Clone, Copy, Debug)]
pub struct FlowFields<'a> {
    pub src: &'a [u8],
    pub dst: &'a [u8],
    pub sport: u16,
    pub dport: u16,
    pub dest_qp: u32,
}

impl HashModel {
    /// The bytes hashed for a flow, fields in the configured order.
    pub fn key(&self, f: &FlowFields<'_>) -> Vec<u8> {
        let mut k = Vec::with_capacity(40);
        for field in &self.fields {
            match field {
                Field::SrcIp => k.extend_from_slice(f.src),
                Field::DstIp => k.extend_from_slice(f.dst),
                Field::Protocol => k.push(17),
                Field::SrcPort => k.extend_from_slice(&f.sport.to_be_bytes()),
                Field::DstPort => k.extend_from_slice(&f.dport.to_be_bytes()),
                Field::DestQp => k.extend_from_slice(&f.dest_qp.to_be_bytes()[1..]),
            }
        }
        k
    }

    /// The predicted path (0..paths) of a flow.
    pub fn path(&self, f: &FlowFields<'_>) -> u32 {
        self.function.hash(&self.key(f), self.seed) as u32 % self.paths.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers_on_the_standard_check_string() {
        let d = b"123456789";
        assert_eq!(HashFn::Crc16_8005.hash(d, None), 0xBB3D);
        assert_eq!(HashFn::Crc16_8005Msb.hash(d, None), 0xFEE8);
        assert_eq!(HashFn::Crc16_1021.hash(d, None), 0x31C3);
        assert_eq!(HashFn::Crc16_1021Ffff.hash(d, None), 0x29B1);
        assert_eq!(HashFn::Crc32Upper.hash(d, None), 0xCBF4);
        assert_eq!(HashFn::Crc32Lower.hash(d, None), 0x3926);
        assert_eq!(
            HashFn::XorFold.hash(d, None),
            0x3132 ^ 0x3334 ^ 0x3536 ^ 0x3738 ^ 0x3900
        );
        // a seed changes the result
        assert_ne!(HashFn::Crc16_1021.hash(d, Some(0x1234)), 0x31C3);
        assert_eq!(HashFn::Crc16_1021.hash(d, Some(0xFFFF)), 0x29B1);
    }

    #[test]
    fn destination_qp_separates_flows_that_share_a_5tuple() {
        let src = [10, 0, 0, 1];
        let dst = [10, 0, 0, 2];
        let flows: Vec<FlowFields> = (0..16u32)
            .map(|qp| FlowFields {
                src: &src,
                dst: &dst,
                sport: 0xC001,
                dport: 4791,
                dest_qp: 0x100 + qp,
            })
            .collect();
        for function in [
            HashFn::Crc16_8005,
            HashFn::Crc16_8005Msb,
            HashFn::Crc16_1021,
            HashFn::Crc16_1021Ffff,
            HashFn::Crc32Upper,
            HashFn::Crc32Lower,
            HashFn::XorFold,
        ] {
            let mut m = HashModel {
                function,
                seed: Some(0x5A5A),
                fields: default_fields(),
                paths: 8,
            };
            let paths = |m: &HashModel| {
                flows
                    .iter()
                    .map(|f| m.path(f))
                    .collect::<std::collections::BTreeSet<_>>()
            };
            // One 5-tuple: every QP on one path, whatever the hash.
            assert_eq!(paths(&m).len(), 1, "{function:?}");
            m.fields.push(Field::DestQp);
            // With the destination QP hashed (enhanced ECMP) they spread over several paths.
            assert!(paths(&m).len() >= 2, "{function:?}: {:?}", paths(&m));
        }
    }
}
