//! What both capture readers (pcapng and legacy pcap: `capture`, `capture_legacy`) hand out
//! and share: the frame, the errors, the summary, the link types and the record bound.

use agent_common::LinkType;
use pcap_parser::PcapError;
use thiserror::Error;

/// The largest record (block) the reader accepts. Real frames are at most 64 KiB (jumbo GSO
/// frames in captures), so a larger claimed length is corruption, and refusing it keeps a bad
/// file from making the reader allocate hundreds of megabytes.
pub(crate) const MAX_RECORD: usize = 16 << 20;

/// One record of a capture.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub link: LinkType,
    /// Nanoseconds since the epoch.
    pub ts_ns: u64,
    /// Length on the wire (may exceed `data.len()` when the snapshot length cut it).
    pub orig_len: u32,
    pub data: &'a [u8],
}

#[derive(Debug, Error)]
pub enum CaptureError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a pcap or pcapng file (unrecognised header)")]
    NotACapture,
    #[error("the file is empty")]
    Empty,
    #[error("link type {0} is not supported; rocemon reads Ethernet (1), Linux cooked SLL (113) and SLL2 (276) captures")]
    UnsupportedLinkType(i32),
    #[error("corrupt capture: {0}")]
    Corrupt(String),
}

/// What reading the file met besides frames.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptureSummary {
    /// The file ended inside a record (for example a capture that was cut off); everything
    /// before it was read.
    pub truncated_tail: bool,
}

/// A reader error in words, never with the buffer it carries (a corrupt block's bytes would
/// make a line of megabytes).
pub(crate) fn describe<I>(e: &PcapError<I>) -> String {
    match e {
        PcapError::Eof => "end of file".into(),
        PcapError::BufferTooSmall => "a block larger than the read buffer".into(),
        PcapError::UnexpectedEof => "the file ends inside a block".into(),
        PcapError::ReadError => "read error".into(),
        PcapError::Incomplete(n) => format!("incomplete block ({n} more bytes needed)"),
        PcapError::HeaderNotRecognized => "not a pcap or pcapng header".into(),
        PcapError::NomError(_, kind) | PcapError::OwnedNomError(_, kind) => {
            format!("malformed block ({})", kind.description())
        }
    }
}

/// The link type of a pcap/pcapng link-layer header type number.
pub fn link_type(linktype: i32) -> Result<LinkType, CaptureError> {
    match linktype {
        1 => Ok(LinkType::Ethernet),
        113 => Ok(LinkType::LinuxSll),
        276 => Ok(LinkType::LinuxSll2),
        other => Err(CaptureError::UnsupportedLinkType(other)),
    }
}
