//! IPFIX messages (RFC 7011): the header, the template set, data sets of records.
//!
//! A message holds as many records as fit in the configured size (a UDP datagram must not be
//! fragmented, RFC 7011 10.3.3), so a batch of records becomes several messages. The sequence
//! number a message carries counts the data records sent before it in its transport session
//! (section 3.1); the caller advances it for what was really sent.

use super::elements::{self, Element, TEMPLATE_IPV4, TEMPLATE_IPV6};
pub use crate::config::ipfix::MIN_MESSAGE_BYTES;
use crate::pipeline::flow_records::FlowRecord;

/// IPFIX's version number.
pub const VERSION: u16 = 10;
/// The message header: version, length, export time, sequence number, observation domain.
pub const HEADER_LEN: usize = 16;
const SET_HEADER_LEN: usize = 4;
/// Set id of a template set.
const TEMPLATE_SET: u16 = 2;
/// The enterprise bit of an element number.
const ENTERPRISE_BIT: u16 = 0x8000;

/// What every message of one exporter carries.
#[derive(Clone, Debug)]
pub struct Encoder {
    pub observation_domain: u32,
    /// Private Enterprise Number of the RoCE elements.
    pub enterprise: u32,
    /// Bytes a message may take at most.
    pub max_message_bytes: usize,
    /// Interface index of each of the table's interfaces (0: unknown).
    pub ifindex: Vec<u32>,
    templates: Vec<u8>,
    elements: [Vec<Element>; 2],
}

impl Encoder {
    pub fn new(
        observation_domain: u32,
        enterprise: u32,
        max_message_bytes: usize,
        ifindex: Vec<u32>,
    ) -> Encoder {
        let elements = [elements::elements(false), elements::elements(true)];
        let mut templates = Vec::new();
        let start = set_header(&mut templates, TEMPLATE_SET);
        for (id, els) in [(TEMPLATE_IPV4, &elements[0]), (TEMPLATE_IPV6, &elements[1])] {
            templates.extend_from_slice(&id.to_be_bytes());
            templates.extend_from_slice(&(els.len() as u16).to_be_bytes());
            for e in els {
                let id = if e.enterprise {
                    e.id | ENTERPRISE_BIT
                } else {
                    e.id
                };
                templates.extend_from_slice(&id.to_be_bytes());
                templates.extend_from_slice(&e.len.to_be_bytes());
                if e.enterprise {
                    templates.extend_from_slice(&enterprise.to_be_bytes());
                }
            }
        }
        close_set(&mut templates, start);
        Encoder {
            observation_domain,
            enterprise,
            max_message_bytes: max_message_bytes.max(MIN_MESSAGE_BYTES),
            ifindex,
            templates,
            elements,
        }
    }

    /// A message of the templates alone.
    pub fn templates_message(&self, export_time: u32, seq: u32) -> Vec<u8> {
        let mut m = self.header(export_time, seq);
        m.extend_from_slice(&self.templates);
        close_message(&mut m);
        m
    }

    /// The next message: the templates first when `templates`, then as many of `records` as
    /// fit. Returns the message and how many records it holds (at least one when there are
    /// records: a record always fits in [`MIN_MESSAGE_BYTES`]).
    pub fn message(
        &self,
        records: &[FlowRecord],
        export_time: u32,
        seq: u32,
        templates: bool,
    ) -> (Vec<u8>, usize) {
        let mut m = self.header(export_time, seq);
        if templates {
            m.extend_from_slice(&self.templates);
        }
        let mut used = 0;
        let mut set: Option<(usize, bool)> = None;
        for r in records {
            let ipv6 = r.key.ip_version == 6;
            let els = &self.elements[ipv6 as usize];
            let len: usize = els.iter().map(|e| e.len as usize).sum();
            let opens = set.is_none_or(|(_, v6)| v6 != ipv6);
            let need = len + if opens { SET_HEADER_LEN } else { 0 };
            if m.len() + need > self.max_message_bytes && used > 0 {
                break;
            }
            if opens {
                if let Some((start, _)) = set {
                    close_set(&mut m, start);
                }
                let id = if ipv6 { TEMPLATE_IPV6 } else { TEMPLATE_IPV4 };
                set = Some((set_header(&mut m, id), ipv6));
            }
            let ifindex = self.ifindex.get(r.iface).copied().unwrap_or(0);
            for e in els {
                elements::write(e, r, ifindex, &mut m);
            }
            used += 1;
        }
        if let Some((start, _)) = set {
            close_set(&mut m, start);
        }
        close_message(&mut m);
        (m, used)
    }

    fn header(&self, export_time: u32, seq: u32) -> Vec<u8> {
        let mut m = Vec::with_capacity(self.max_message_bytes);
        m.extend_from_slice(&VERSION.to_be_bytes());
        m.extend_from_slice(&[0, 0]); // length, written when the message is closed
        m.extend_from_slice(&export_time.to_be_bytes());
        m.extend_from_slice(&seq.to_be_bytes());
        m.extend_from_slice(&self.observation_domain.to_be_bytes());
        m
    }
}

fn set_header(m: &mut Vec<u8>, id: u16) -> usize {
    let start = m.len();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0, 0]);
    start
}

fn close_set(m: &mut [u8], start: usize) {
    let len = (m.len() - start) as u16;
    m[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
}

fn close_message(m: &mut [u8]) {
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
#[path = "message_tests.rs"]
pub(crate) mod tests;
