//! A capture to write: its frames, link-layer framing, container format and snapshot length
//! (the fixtures, the demo's and the tests' generated captures are all written this way).

use crate::frames;
use anyhow::{Context, Result};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, TsResolution};
use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Link-layer framing of a fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Ethernet,
    Sll,
    Sll2,
}

/// Container format of a fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    PcapMicros,
    PcapNanos,
    PcapNg,
}

/// One capture to write.
pub struct Fixture {
    pub name: &'static str,
    pub link: Link,
    pub format: Format,
    /// Records are cut to this many bytes (the snapshot length).
    pub snaplen: u32,
    /// (timestamp ns, Ethernet frame); converted to `link` when written.
    pub frames: Vec<(u64, Vec<u8>)>,
    /// Whether the frames may be replayed onto a veth (Ethernet, not cut short).
    pub replayable: bool,
}

/// An Ethernet fixture recorded whole (no snapshot length cut).
pub fn whole(
    name: &'static str,
    format: Format,
    frames: Vec<(u64, Vec<u8>)>,
    replayable: bool,
) -> Fixture {
    Fixture {
        name,
        link: Link::Ethernet,
        format,
        snaplen: 65535,
        frames,
        replayable,
    }
}

impl Fixture {
    pub fn file_name(&self) -> String {
        let ext = if self.format == Format::PcapNg {
            "pcapng"
        } else {
            "pcap"
        };
        format!("{}.{ext}", self.name)
    }

    fn datalink(&self) -> DataLink {
        match self.link {
            Link::Ethernet => DataLink::ETHERNET,
            Link::Sll => DataLink::LINUX_SLL,
            Link::Sll2 => DataLink::LINUX_SLL2,
        }
    }

    /// The record bytes (framed, cut to the snapshot length) and the original length.
    pub fn records(&self) -> impl Iterator<Item = (u64, u32, Vec<u8>)> + '_ {
        self.frames.iter().map(move |(t, fr)| {
            let data = match self.link {
                Link::Ethernet => fr.clone(),
                Link::Sll => frames::to_sll(fr),
                Link::Sll2 => frames::to_sll2(fr),
            };
            let orig = data.len() as u32;
            let cut = data[..data.len().min(self.snaplen as usize)].to_vec();
            (*t, orig, cut)
        })
    }

    /// Writes the capture into `dir` and returns its path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(self.file_name());
        let file = BufWriter::new(
            File::create(&path).with_context(|| format!("create {}", path.display()))?,
        );
        match self.format {
            Format::PcapMicros | Format::PcapNanos => {
                let header = PcapHeader {
                    datalink: self.datalink(),
                    snaplen: self.snaplen,
                    ts_resolution: if self.format == Format::PcapNanos {
                        TsResolution::NanoSecond
                    } else {
                        TsResolution::MicroSecond
                    },
                    ..PcapHeader::default()
                };
                let mut w = PcapWriter::with_header(file, header)?;
                for (t, orig, data) in self.records() {
                    w.write_packet(&PcapPacket::new(Duration::from_nanos(t), orig, &data))?;
                }
            }
            Format::PcapNg => {
                let mut w = PcapNgWriter::new(file)?;
                // Nanosecond resolution (if_tsresol 9): pcap-file writes the raw unit count.
                let idb = InterfaceDescriptionBlock {
                    linktype: self.datalink(),
                    snaplen: self.snaplen,
                    options: vec![InterfaceDescriptionOption::IfTsResol(9)],
                };
                w.write_pcapng_block(idb)?;
                for (t, orig, data) in self.records() {
                    let epb = EnhancedPacketBlock {
                        interface_id: 0,
                        timestamp: Duration::from_nanos(t),
                        original_len: orig,
                        data: Cow::Owned(data),
                        options: vec![],
                    };
                    w.write_pcapng_block(epb)?;
                }
            }
        }
        Ok(path)
    }
}
