//! Capture files: pcap (micro- and nanosecond) and pcapng (per-interface link type and
//! timestamp resolution), streamed with `pcap-parser` so memory stays flat on large files.

use super::capture_legacy::{self, Chunks};
use super::capture_types::{describe, MAX_RECORD};
pub use super::capture_types::{link_type, CaptureError, CaptureSummary, Frame};
use agent_common::LinkType;
use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapNGPacketBlock;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};
use std::fs::File;
use std::io::{Cursor, Read};
use std::path::Path;

struct Iface {
    link: Result<LinkType, i32>,
    /// Units per second.
    resolution: u64,
    offset: i64,
}

/// Reads every frame of `path`, calling `on_frame` for each and `on_progress` with the bytes
/// consumed so far.
pub fn read_capture(
    path: &Path,
    on_progress: impl FnMut(u64),
    on_frame: impl FnMut(Frame<'_>),
) -> Result<CaptureSummary, CaptureError> {
    read_capture_from(File::open(path)?, on_progress, on_frame)
}

/// Reads every frame of a capture from any reader (files, pipes): legacy pcap in chunks read
/// by a thread ahead of the walk where the machine has a core for it ([`read_ahead`]), else
/// on this thread in 256 KiB chunks; pcapng through a 128 KiB buffer (the size `cat` reads
/// with: the kernel's copy into it stays in the core's cache).
pub fn read_capture_from(
    mut input: impl std::io::Read + Send + 'static,
    on_progress: impl FnMut(u64),
    on_frame: impl FnMut(Frame<'_>),
) -> Result<CaptureSummary, CaptureError> {
    let first = sniff(&mut input)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunks = |input| {
        if read_ahead(cpus) {
            Chunks::threaded(input)
        } else {
            Chunks::here(input, HERE_CHUNK)
        }
    };
    read_sniffed(first, input, 1 << 17, chunks, on_progress, on_frame)
}

/// The chunk a legacy capture is read in on the walking thread.
const HERE_CHUNK: usize = 1 << 18;

/// Whether a thread reads ahead of the walk on a machine of `cpus` cores: only where it has
/// a core of its own beside `analyze`'s parsing, flow and view threads. On fewer the four
/// share the cores, and the reading thread's hand-overs (each chunk copied on one core and
/// walked on another) cost more than they free: on two CPUs, reading on the walking thread
/// took the bench's mixed capture from 201 to 193 ms and large frames from 282 to 257
/// (CPU 8-10% less), small frames unchanged (interleaved medians of nine to eleven).
pub fn read_ahead(cpus: usize) -> bool {
    cpus >= 4
}

/// A capture whose first bytes were read: legacy pcap in the chunks `chunks` makes of the
/// input, anything else through pcap-parser's reader with a buffer of `cap` bytes.
fn read_sniffed<R: Read>(
    first: Vec<u8>,
    input: R,
    cap: usize,
    chunks: impl FnOnce(R) -> Chunks<R>,
    on_progress: impl FnMut(u64),
    on_frame: impl FnMut(Frame<'_>),
) -> Result<CaptureSummary, CaptureError> {
    if capture_legacy::is_legacy(&first) {
        return capture_legacy::read_legacy(first, chunks(input), on_progress, on_frame);
    }
    // The first read hands the reader everything sniffed (a whole section header block).
    let cap = cap.max(first.len().next_power_of_two());
    read_with_reader(Cursor::new(first).chain(input), cap, on_progress, on_frame)
}

/// The first bytes of an input, from which its format is decided: at least [`SNIFF`] bytes,
/// and a pcapng file's whole section header block (its options, such as a long comment or
/// `shb_userappl`, may make it any size up to [`MAX_RECORD`]): pcap-parser's reader wants
/// that block whole in its first read.
fn sniff(input: &mut impl Read) -> Result<Vec<u8>, CaptureError> {
    let mut first = Vec::with_capacity(SNIFF);
    let read_error = |_| CaptureError::Corrupt("read error".into());
    // The magic number first: input that is no capture is refused as soon as its first four
    // bytes arrive (a pipe of garbage waited for 4 KiB or its end).
    input
        .take(MAGIC_LEN as u64)
        .read_to_end(&mut first)
        .map_err(read_error)?;
    if first.len() == MAGIC_LEN && !is_capture_magic(&first) {
        return Err(CaptureError::NotACapture);
    }
    input
        .take((SNIFF - first.len()) as u64)
        .read_to_end(&mut first)
        .map_err(read_error)?;
    if let Some(len) = section_header_len(&first) {
        if len > first.len() && len <= MAX_RECORD {
            let more = (len - first.len()) as u64;
            input
                .take(more)
                .read_to_end(&mut first)
                .map_err(read_error)?;
        }
    }
    Ok(first)
}

const MAGIC_LEN: usize = 4;

/// Whether `m` (a file's first four bytes) is the magic number of a pcap file (micro- or
/// nanosecond, modified, either byte order) or a pcapng section header block.
fn is_capture_magic(m: &[u8]) -> bool {
    const LEGACY: [u32; 3] = [0xa1b2_c3d4, 0xa1b2_3c4d, 0xa1b2_cd34];
    let Ok(m): Result<[u8; 4], _> = m.try_into() else {
        return false;
    };
    m == [0x0a, 0x0d, 0x0d, 0x0a]
        || LEGACY.contains(&u32::from_le_bytes(m))
        || LEGACY.contains(&u32::from_be_bytes(m))
}

/// The length a pcapng section header block at the start of `b` claims (its byte-order
/// magic says how to read it), or None when `b` does not start with one.
fn section_header_len(b: &[u8]) -> Option<usize> {
    const SHB: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
    let (kind, len, magic) = (b.get(0..4)?, b.get(4..8)?, b.get(8..12)?);
    if kind != SHB {
        return None;
    }
    let len: [u8; 4] = len.try_into().ok()?;
    let len = match magic {
        [0x4d, 0x3c, 0x2b, 0x1a] => u32::from_le_bytes(len),
        [0x1a, 0x2b, 0x3c, 0x4d] => u32::from_be_bytes(len),
        _ => return None,
    };
    usize::try_from(len).ok()
}

/// Bytes read before the format is decided: a legacy file header (24 bytes) or a pcapng
/// section header block with its options.
const SNIFF: usize = 4096;

/// [`read_capture_from`] on this thread, with a first buffer of `buffer` bytes (pcapng: doubled
/// whenever a record needs more, up to 16 MiB): small inputs (fuzzing) need no megabyte and
/// no thread each. Legacy pcap goes through [`capture_legacy`]; pcapng (and anything
/// unrecognised, for its error) through pcap-parser's reader.
pub fn read_capture_buffered(
    mut input: impl std::io::Read,
    buffer: usize,
    on_progress: impl FnMut(u64),
    on_frame: impl FnMut(Frame<'_>),
) -> Result<CaptureSummary, CaptureError> {
    let cap = buffer.max(SNIFF);
    let first = sniff(&mut input)?;
    let here = |input| Chunks::here(input, cap);
    read_sniffed(first, input, cap, here, on_progress, on_frame)
}

/// pcapng (and unrecognised input, for its error) through pcap-parser's reader.
fn read_with_reader(
    input: impl std::io::Read,
    mut cap: usize,
    mut on_progress: impl FnMut(u64),
    mut on_frame: impl FnMut(Frame<'_>),
) -> Result<CaptureSummary, CaptureError> {
    let mut reader = match create_reader(cap, input) {
        Ok(r) => r,
        Err(PcapError::Eof) => return Err(CaptureError::Empty),
        Err(PcapError::HeaderNotRecognized) => return Err(CaptureError::NotACapture),
        Err(PcapError::ReadError) => return Err(CaptureError::Corrupt("read error".into())),
        Err(e) => return Err(CaptureError::Corrupt(describe(&e))),
    };
    let mut ifaces: Vec<Iface> = Vec::new();
    let mut consumed = 0u64;
    let mut summary = CaptureSummary::default();
    loop {
        match reader.next() {
            Ok((offset, block)) => {
                match block {
                    // Legacy files are read by `capture_legacy`: this reader sees pcapng only.
                    PcapBlockOwned::LegacyHeader(_) | PcapBlockOwned::Legacy(_) => {
                        return Err(CaptureError::Corrupt(
                            "a legacy pcap block inside a pcapng file".into(),
                        ))
                    }
                    PcapBlockOwned::NG(Block::SectionHeader(_)) => ifaces.clear(),
                    PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                        ifaces.push(Iface {
                            link: link_type(idb.linktype.0).map_err(|_| idb.linktype.0),
                            resolution: idb.ts_resolution().unwrap_or(1_000_000),
                            offset: idb.ts_offset(),
                        });
                    }
                    PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                        let ifc = ifaces.get(epb.if_id as usize).ok_or_else(|| {
                            CaptureError::Corrupt(format!(
                                "packet of undeclared interface {}",
                                epb.if_id
                            ))
                        })?;
                        let link = ifc.link.map_err(CaptureError::UnsupportedLinkType)?;
                        let units = ((epb.ts_high as u64) << 32) | epb.ts_low as u64;
                        let ns =
                            (units as u128 * 1_000_000_000 / ifc.resolution.max(1) as u128) as u64;
                        let ts_ns =
                            ns.saturating_add_signed(ifc.offset.saturating_mul(1_000_000_000));
                        on_frame(Frame {
                            link,
                            ts_ns,
                            orig_len: epb.origlen,
                            data: epb.packet_data(),
                        });
                    }
                    PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                        let ifc = ifaces.first().ok_or_else(|| {
                            CaptureError::Corrupt("simple packet before any interface".into())
                        })?;
                        let link = ifc.link.map_err(CaptureError::UnsupportedLinkType)?;
                        on_frame(Frame {
                            link,
                            ts_ns: 0,
                            orig_len: spb.origlen,
                            data: spb.packet_data(),
                        });
                    }
                    PcapBlockOwned::NG(_) => {}
                }
                consumed += offset as u64;
                reader.consume(offset);
                on_progress(consumed);
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => {
                reader
                    .refill()
                    .map_err(|e| CaptureError::Corrupt(format!("refill: {}", describe(&e))))?;
            }
            Err(PcapError::UnexpectedEof) => {
                summary.truncated_tail = true;
                break;
            }
            Err(PcapError::BufferTooSmall) => {
                cap *= 2;
                if cap > MAX_RECORD || !reader.grow(cap) {
                    return Err(CaptureError::Corrupt(
                        "a record larger than 16 MiB (no capture has frames that big)".into(),
                    ));
                }
                reader
                    .refill()
                    .map_err(|e| CaptureError::Corrupt(format!("refill: {}", describe(&e))))?;
            }
            Err(e) => return Err(CaptureError::Corrupt(describe(&e))),
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod read_ahead_tests {
    use super::read_ahead;

    /// One to three cores: `analyze`'s parsing, flow and view threads already share them, so
    /// the file is read on the walking thread.
    #[test]
    fn under_four_cores_the_walk_reads_the_file_itself() {
        assert_eq!([1, 2, 3].map(read_ahead), [false; 3]);
    }

    /// Four cores and more: the reading thread has one of its own.
    #[test]
    fn from_four_cores_a_thread_reads_ahead() {
        assert_eq!([4, 8, 256].map(read_ahead), [true; 3]);
    }
}
