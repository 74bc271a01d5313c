//! sFlow version 5 datagrams (sflow.org, "sFlow Version 5", XDR encoded): the header with its
//! agent (IPv4 or IPv6) and sequence number, flow samples and expanded flow samples with
//! their raw packet header and extended switch records, counter samples and expanded counter
//! samples with the generic interface and Ethernet counters. Everything else is skipped by
//! its length. Bounded: every length is checked against what is left, nothing is allocated
//! from a length field.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a datagram, a sample or a record could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum Malformed {
    #[error("not sFlow version 5")]
    Version,
    #[error("unknown agent address type")]
    AgentAddressType,
    #[error("the datagram ends inside its header")]
    TruncatedHeader,
    #[error("a sample's length runs past the datagram")]
    SampleLength,
    #[error("a sample ends inside its fixed fields")]
    TruncatedSample,
    #[error("a record's length runs past its sample")]
    RecordLength,
    #[error("a record ends inside its fields")]
    TruncatedRecord,
    #[error("a flow sample with sampling rate 0")]
    ZeroSamplingRate,
    #[error("fewer samples than the header announces")]
    MissingSamples,
}

impl Malformed {
    pub const ALL: [Malformed; 9] = [
        Malformed::Version,
        Malformed::AgentAddressType,
        Malformed::TruncatedHeader,
        Malformed::SampleLength,
        Malformed::TruncatedSample,
        Malformed::RecordLength,
        Malformed::TruncatedRecord,
        Malformed::ZeroSamplingRate,
        Malformed::MissingSamples,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Malformed::Version => "version",
            Malformed::AgentAddressType => "agent_address_type",
            Malformed::TruncatedHeader => "truncated_header",
            Malformed::SampleLength => "sample_length",
            Malformed::TruncatedSample => "truncated_sample",
            Malformed::RecordLength => "record_length",
            Malformed::TruncatedRecord => "truncated_record",
            Malformed::ZeroSamplingRate => "zero_sampling_rate",
            Malformed::MissingSamples => "missing_samples",
        }
    }
}

/// An XDR reader over a byte slice.
#[derive(Clone, Copy)]
struct Xdr<'a> {
    b: &'a [u8],
}

impl<'a> Xdr<'a> {
    fn u32(&mut self) -> Option<u32> {
        let (h, t) = self.b.split_first_chunk::<4>()?;
        self.b = t;
        Some(u32::from_be_bytes(*h))
    }
    fn u64(&mut self) -> Option<u64> {
        let (h, t) = self.b.split_first_chunk::<8>()?;
        self.b = t;
        Some(u64::from_be_bytes(*h))
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    /// An opaque of `n` bytes padded to four.
    fn opaque(&mut self, n: usize) -> Option<&'a [u8]> {
        let padded = n.checked_add(3)? & !3;
        let v = self.bytes(padded)?;
        Some(&v[..n])
    }
}

/// The datagram header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub agent: IpAddr,
    pub sub_agent: u32,
    pub sequence: u32,
    pub uptime_ms: u32,
    pub num_samples: u32,
}

/// An interface of a sample: a single ifIndex, or something else (dropped, several, unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    IfIndex(u32),
    Other,
}

impl Port {
    /// From the compact encoding (2 bits of format, 30 of value).
    fn compact(v: u32) -> Port {
        Port::expanded(v >> 30, v & 0x3FFF_FFFF)
    }
    /// From the expanded encoding. Format 0 with 0x3FFFFFFF is "internal / unknown".
    fn expanded(format: u32, value: u32) -> Port {
        if format == 0 && value != 0x3FFF_FFFF {
            Port::IfIndex(value)
        } else {
            Port::Other
        }
    }
}

/// A sampled packet header (record 0:1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawHeader<'a> {
    /// 1: Ethernet (the only protocol rocemon parses).
    pub protocol: u32,
    /// The original frame's length as the agent reports it.
    pub frame_length: u32,
    pub stripped: u32,
    pub header: &'a [u8],
}

/// Extended switch data (record 0:1001).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    pub src_vlan: u32,
    pub src_priority: u32,
    pub dst_vlan: u32,
    pub dst_priority: u32,
}

/// A flow sample or expanded flow sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSample<'a> {
    pub sequence: u32,
    /// The data source (type 0: an interface's ifIndex).
    pub source_type: u32,
    pub source_index: u32,
    pub sampling_rate: u32,
    pub sample_pool: u32,
    pub drops: u32,
    pub input: Port,
    pub output: Port,
    pub header: Option<RawHeader<'a>>,
    pub switch: Option<Switch>,
}

/// Generic interface counters (record 0:1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IfCounters {
    pub if_index: u32,
    pub if_type: u32,
    /// Bits per second.
    pub speed: u64,
    pub direction: u32,
    pub status: u32,
    pub in_octets: u64,
    pub in_packets: u64,
    pub in_discards: u32,
    pub in_errors: u32,
    pub out_octets: u64,
    pub out_packets: u64,
    pub out_discards: u32,
    pub out_errors: u32,
}

/// A counter sample or expanded counter sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterSample {
    pub sequence: u32,
    pub source_type: u32,
    pub source_index: u32,
    pub generic: Option<IfCounters>,
    /// Ethernet counters (record 0:2) were present (their fields are not exported).
    pub ethernet: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sample<'a> {
    Flow(FlowSample<'a>),
    Counters(CounterSample),
    /// A sample format rocemon does not read (skipped by its length).
    Unknown(u32),
}

/// A decoded datagram: its header, the samples read, and what was wrong in the rest (a bad
/// sample or record is counted and skipped; the samples around it are kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub header: Header,
    pub samples: Vec<Sample<'a>>,
    pub problems: Vec<Malformed>,
}

/// Decodes one datagram. `Err` when even the header cannot be read.
pub fn decode(buf: &[u8]) -> Result<Datagram<'_>, Malformed> {
    let mut x = Xdr { b: buf };
    let version = x.u32().ok_or(Malformed::TruncatedHeader)?;
    if version != 5 {
        return Err(Malformed::Version);
    }
    let agent = match x.u32().ok_or(Malformed::TruncatedHeader)? {
        1 => {
            let a = x.bytes(4).ok_or(Malformed::TruncatedHeader)?;
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        }
        2 => {
            let a: [u8; 16] = x
                .bytes(16)
                .ok_or(Malformed::TruncatedHeader)?
                .try_into()
                .map_err(|_| Malformed::TruncatedHeader)?;
            IpAddr::V6(Ipv6Addr::from(a))
        }
        _ => return Err(Malformed::AgentAddressType),
    };
    let mut field = || x.u32().ok_or(Malformed::TruncatedHeader);
    let header = Header {
        agent,
        sub_agent: field()?,
        sequence: field()?,
        uptime_ms: field()?,
        num_samples: field()?,
    };
    let mut d = Datagram {
        header,
        // Room for a datagram's usual samples in one allocation (bounded: the count is the
        // sender's word).
        samples: Vec::with_capacity(header.num_samples.min(16) as usize),
        problems: Vec::new(),
    };
    for _ in 0..header.num_samples {
        let (Some(format), Some(len)) = (x.u32(), x.u32()) else {
            d.problems.push(Malformed::MissingSamples);
            break;
        };
        let Some(body) = x.bytes(len as usize) else {
            d.problems.push(Malformed::SampleLength);
            break;
        };
        match sample(format, body) {
            Ok(Some(s)) => d.samples.push(s),
            Ok(None) => {}
            Err(m) => d.problems.push(m),
        }
    }
    Ok(d)
}

fn sample(format: u32, body: &[u8]) -> Result<Option<Sample<'_>>, Malformed> {
    let mut x = Xdr { b: body };
    let t = Malformed::TruncatedSample;
    match format {
        // enterprise 0: 1 flow sample, 2 counter sample, 3 expanded flow, 4 expanded counter
        1 | 3 => {
            let (sequence, source_type, source_index) = source(&mut x, format == 3).ok_or(t)?;
            let sampling_rate = x.u32().ok_or(t)?;
            let sample_pool = x.u32().ok_or(t)?;
            let drops = x.u32().ok_or(t)?;
            let (input, output) = if format == 1 {
                (
                    Port::compact(x.u32().ok_or(t)?),
                    Port::compact(x.u32().ok_or(t)?),
                )
            } else {
                let (f_in, v_in) = (x.u32().ok_or(t)?, x.u32().ok_or(t)?);
                let (f_out, v_out) = (x.u32().ok_or(t)?, x.u32().ok_or(t)?);
                (Port::expanded(f_in, v_in), Port::expanded(f_out, v_out))
            };
            let records = x.u32().ok_or(t)?;
            if sampling_rate == 0 {
                return Err(Malformed::ZeroSamplingRate);
            }
            let mut s = FlowSample {
                sequence,
                source_type,
                source_index,
                sampling_rate,
                sample_pool,
                drops,
                input,
                output,
                header: None,
                switch: None,
            };
            each_record(&mut x, records, |fmt, r| {
                let tr = Malformed::TruncatedRecord;
                match fmt {
                    1 => {
                        let protocol = r.u32().ok_or(tr)?;
                        let frame_length = r.u32().ok_or(tr)?;
                        let stripped = r.u32().ok_or(tr)?;
                        let n = r.u32().ok_or(tr)? as usize;
                        let header = r.opaque(n).ok_or(tr)?;
                        s.header = Some(RawHeader {
                            protocol,
                            frame_length,
                            stripped,
                            header,
                        });
                    }
                    1001 => {
                        s.switch = Some(Switch {
                            src_vlan: r.u32().ok_or(tr)?,
                            src_priority: r.u32().ok_or(tr)?,
                            dst_vlan: r.u32().ok_or(tr)?,
                            dst_priority: r.u32().ok_or(tr)?,
                        });
                    }
                    _ => {}
                }
                Ok(())
            })?;
            Ok(Some(Sample::Flow(s)))
        }
        2 | 4 => {
            let (sequence, source_type, source_index) = source(&mut x, format == 4).ok_or(t)?;
            let records = x.u32().ok_or(t)?;
            let mut c = CounterSample {
                sequence,
                source_type,
                source_index,
                generic: None,
                ethernet: false,
            };
            each_record(&mut x, records, |fmt, r| {
                let tr = Malformed::TruncatedRecord;
                match fmt {
                    1 => {
                        let mut g = IfCounters {
                            if_index: r.u32().ok_or(tr)?,
                            if_type: r.u32().ok_or(tr)?,
                            speed: r.u64().ok_or(tr)?,
                            direction: r.u32().ok_or(tr)?,
                            status: r.u32().ok_or(tr)?,
                            in_octets: r.u64().ok_or(tr)?,
                            ..IfCounters::default()
                        };
                        let (uc, mc, bc) =
                            (r.u32().ok_or(tr)?, r.u32().ok_or(tr)?, r.u32().ok_or(tr)?);
                        g.in_packets = u64::from(uc) + u64::from(mc) + u64::from(bc);
                        g.in_discards = r.u32().ok_or(tr)?;
                        g.in_errors = r.u32().ok_or(tr)?;
                        let _unknown_protos = r.u32().ok_or(tr)?;
                        g.out_octets = r.u64().ok_or(tr)?;
                        let (uc, mc, bc) =
                            (r.u32().ok_or(tr)?, r.u32().ok_or(tr)?, r.u32().ok_or(tr)?);
                        g.out_packets = u64::from(uc) + u64::from(mc) + u64::from(bc);
                        g.out_discards = r.u32().ok_or(tr)?;
                        g.out_errors = r.u32().ok_or(tr)?;
                        c.generic = Some(g);
                    }
                    2 => c.ethernet = true,
                    _ => {}
                }
                Ok(())
            })?;
            Ok(Some(Sample::Counters(c)))
        }
        other => Ok(Some(Sample::Unknown(other))),
    }
}

/// A sample's sequence number, source type and source index: packed into one word in the
/// compact formats, two words in the expanded ones.
fn source(x: &mut Xdr<'_>, expanded: bool) -> Option<(u32, u32, u32)> {
    let sequence = x.u32()?;
    if expanded {
        Some((sequence, x.u32()?, x.u32()?))
    } else {
        let s = x.u32()?;
        Some((sequence, s >> 24, s & 0x00FF_FFFF))
    }
}

/// Hands each of a sample's `n` records to `each` as (format, a reader over its body).
fn each_record<'a>(
    x: &mut Xdr<'a>,
    n: u32,
    mut each: impl FnMut(u32, &mut Xdr<'a>) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    for _ in 0..n {
        let (fmt, body) = record(x)?;
        each(fmt, &mut Xdr { b: body })?;
    }
    Ok(())
}

/// One record of a sample: (format, body).
fn record<'a>(x: &mut Xdr<'a>) -> Result<(u32, &'a [u8]), Malformed> {
    let fmt = x.u32().ok_or(Malformed::RecordLength)?;
    let len = x.u32().ok_or(Malformed::RecordLength)? as usize;
    let body = x.bytes(len).ok_or(Malformed::RecordLength)?;
    Ok((fmt, body))
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
