//! Legacy pcap records walked where they were read: pcap-parser's record parsers
//! (`parse_pcap_frame` and its big-endian and "modified" forms) over chunks of the input,
//! without its reader's boxed iterator, the block enum every record comes back in and the
//! buffer compaction before each read; a record cut by a chunk's end is stitched from the two
//! chunks. [`read_capture_from`](super::capture::read_capture_from) reads the chunks on a
//! thread of their own where the machine has a core for it ([`super::capture::read_ahead`]):
//! on large frames copying the file out of the page cache was half of the parsing thread's
//! time. pcapng goes through pcap-parser's reader (see [`super::capture`]).

use super::capture_types::{describe, link_type, CaptureError, CaptureSummary, Frame, MAX_RECORD};
use pcap_parser::nom::{self, IResult, Needed};
use pcap_parser::pcap::{
    parse_pcap_frame, parse_pcap_frame_be, parse_pcap_frame_modified, parse_pcap_header,
    LegacyPcapBlock,
};
use pcap_parser::PcapError;
use std::io::{ErrorKind, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Chunks the reading thread fills: 1 MiB each (about a thousand hand-overs per gigabyte),
/// four in flight.
const CHUNK: usize = 1 << 20;
const IN_FLIGHT: usize = 4;

type ParseFn = fn(&[u8]) -> IResult<&[u8], LegacyPcapBlock<'_>, PcapError<&[u8]>>;

/// Whether `first` (the first bytes of an input) opens a legacy pcap file.
pub fn is_legacy(first: &[u8]) -> bool {
    parse_pcap_header(first).is_ok()
}

/// Where the chunks come from: read here, or by a thread ahead of the walk.
pub enum Chunks<R> {
    /// Reads `cap` bytes at a time on the walking thread.
    Here {
        input: R,
        cap: usize,
        spare: Vec<u8>,
    },
    /// Chunks read by a thread (see [`Chunks::threaded`]); spent ones go back to it.
    Thread {
        chunks: Receiver<std::io::Result<Vec<u8>>>,
        spare: SyncSender<Vec<u8>>,
    },
}

impl<R: Read> Chunks<R> {
    /// Reads `cap` bytes at a time on the walking thread.
    pub fn here(input: R, cap: usize) -> Chunks<R> {
        Chunks::Here {
            input,
            cap,
            spare: Vec::new(),
        }
    }
}

impl<R: Read + Send + 'static> Chunks<R> {
    /// A thread reads `input` in chunks ahead of the walk. It is not joined: a walk that ends
    /// on an error leaves it blocked in a read of a pipe that may never end, until the process
    /// exits; otherwise it ends at the input's end or when the walk drops its chunks.
    pub fn threaded(mut input: R) -> Chunks<R> {
        let (tx, chunks) = sync_channel(IN_FLIGHT);
        let (spare, spares) = sync_channel::<Vec<u8>>(IN_FLIGHT + 2);
        let spawned = std::thread::Builder::new()
            .name("analyze-read".into())
            .spawn(move || loop {
                let mut buf = spares.try_recv().unwrap_or_default();
                buf.resize(CHUNK, 0);
                let (n, err) = fill(&mut input, &mut buf);
                buf.truncate(n);
                // The bytes before an error are walked, then the error ends the walk.
                if n > 0 && tx.send(Ok(buf)).is_err() {
                    return;
                }
                if let Some(e) = err {
                    let _ = tx.send(Err(e));
                    return;
                }
                if n < CHUNK {
                    return;
                }
            });
        match spawned {
            Ok(_) => Chunks::Thread { chunks, spare },
            // No thread: nothing was moved into it but the input, which is gone with it; the
            // caller learns of it as a read error.
            Err(e) => {
                let (tx, chunks) = sync_channel(1);
                let _ = tx.send(Err(e));
                Chunks::Thread { chunks, spare }
            }
        }
    }
}

/// Reads until `buf` is full, the input ends or a read fails: the bytes read, and the error.
fn fill(input: &mut impl Read, buf: &mut [u8]) -> (usize, Option<std::io::Error>) {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

impl<R: Read> Chunks<R> {
    /// The next chunk (`None`: the end).
    fn next(&mut self) -> Result<Option<Vec<u8>>, CaptureError> {
        let read_error = |_| CaptureError::Corrupt("refill: read error".into());
        match self {
            Chunks::Here { input, cap, spare } => {
                let mut buf = std::mem::take(spare);
                buf.resize(*cap, 0);
                let n = loop {
                    match input.read(&mut buf) {
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        r => break r.map_err(read_error)?,
                    }
                };
                buf.truncate(n);
                Ok((n > 0).then_some(buf))
            }
            Chunks::Thread { chunks, .. } => match chunks.recv() {
                Ok(r) => r.map(Some).map_err(read_error),
                Err(_) => Ok(None),
            },
        }
    }

    /// A spent chunk, for reuse.
    fn recycle(&mut self, buf: Vec<u8>) {
        match self {
            Chunks::Here { spare, .. } => *spare = buf,
            Chunks::Thread { spare, .. } => {
                let _ = spare.try_send(buf);
            }
        }
    }
}

/// Reads a legacy pcap capture whose first bytes, `first`, were already read (and hold the
/// file header: [`is_legacy`]); the rest comes from `chunks`.
pub fn read_legacy<R: Read>(
    first: Vec<u8>,
    mut chunks: Chunks<R>,
    mut on_progress: impl FnMut(u64),
    mut on_frame: impl FnMut(Frame<'_>),
) -> Result<CaptureSummary, CaptureError> {
    let (rest, header) = parse_pcap_header(&first)
        .map_err(|_| CaptureError::Corrupt("not a pcap or pcapng header".into()))?;
    let body = first.len() - rest.len();
    let link = link_type(header.network.0)?;
    let nanos = header.is_nanosecond_precision();
    let parse: ParseFn = if header.is_modified_format() {
        parse_pcap_frame_modified
    } else if header.is_bigendian() {
        parse_pcap_frame_be
    } else {
        parse_pcap_frame
    };
    let mut consumed = body as u64;
    let mut emit = |b: LegacyPcapBlock<'_>, used: usize| {
        let frac = if nanos {
            b.ts_usec as u64
        } else {
            b.ts_usec as u64 * 1_000
        };
        let caplen = (b.caplen as usize).min(b.data.len());
        on_frame(Frame {
            link,
            ts_ns: b.ts_sec as u64 * 1_000_000_000 + frac,
            orig_len: b.origlen,
            data: &b.data[..caplen],
        });
        consumed += used as u64;
        on_progress(consumed);
    };
    let mut chunk = first;
    let mut at = body;
    // A record cut by a chunk's end, gathered across chunks.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        // Every whole record of this chunk.
        loop {
            let data = &chunk[at..];
            match parse(data) {
                Ok((rest, b)) => {
                    let used = data.len() - rest.len();
                    emit(b, used);
                    at += used;
                }
                Err(nom::Err::Incomplete(_)) => break,
                Err(nom::Err::Error(e) | nom::Err::Failure(e)) => {
                    return Err(CaptureError::Corrupt(describe(&e)))
                }
            }
        }
        carry.clear();
        carry.extend_from_slice(&chunk[at..]);
        // A record claiming more than any frame is corruption, even at the input's end.
        stitch(parse, &mut carry, &[], &mut 0)?;
        // The next chunk; a record cut by this one's end completed from it (and the ones
        // after it, for a record longer than a chunk).
        loop {
            let Some(next) = chunks.next()? else {
                return Ok(CaptureSummary {
                    truncated_tail: !carry.is_empty(),
                });
            };
            chunks.recycle(std::mem::replace(&mut chunk, next));
            at = 0;
            if carry.is_empty() {
                break;
            }
            if stitch(parse, &mut carry, &chunk, &mut at)? {
                if let Ok((_, b)) = parse(&carry) {
                    emit(b, carry.len());
                }
                break;
            }
        }
    }
}

/// Moves the bytes the record in `carry` still needs from `chunk[at..]` into it: whether it
/// is whole (else the chunk is used up).
fn stitch(
    parse: ParseFn,
    carry: &mut Vec<u8>,
    chunk: &[u8],
    at: &mut usize,
) -> Result<bool, CaptureError> {
    loop {
        let more = match parse(carry) {
            Ok(_) => return Ok(true),
            Err(nom::Err::Incomplete(Needed::Size(n))) => n.get(),
            Err(nom::Err::Incomplete(Needed::Unknown)) => 1,
            Err(nom::Err::Error(e) | nom::Err::Failure(e)) => {
                return Err(CaptureError::Corrupt(describe(&e)))
            }
        };
        if carry.len() + more > MAX_RECORD {
            return Err(CaptureError::Corrupt(
                "a record larger than 16 MiB (no capture has frames that big)".into(),
            ));
        }
        if *at == chunk.len() {
            return Ok(false);
        }
        let take = more.min(chunk.len() - *at);
        carry.extend_from_slice(&chunk[*at..*at + take]);
        *at += take;
    }
}

#[cfg(test)]
#[path = "capture_legacy_tests.rs"]
mod tests;
