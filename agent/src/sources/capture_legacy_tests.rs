//! The chunked legacy walk against pcap-parser's reader (the path pcapng takes), on captures
//! cut into chunks everywhere a record can be cut.

use super::*;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{LegacyPcapReader, PcapBlockOwned};

/// A legacy pcap file: micro- or nanosecond magic, little- or big-endian, Ethernet.
fn pcap(big_endian: bool, nanos: bool, records: &[(u32, u32, Vec<u8>)]) -> Vec<u8> {
    let w32 = |v: &mut Vec<u8>, x: u32| {
        v.extend_from_slice(&if big_endian {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        })
    };
    let w16 = |v: &mut Vec<u8>, x: u16| {
        v.extend_from_slice(&if big_endian {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        })
    };
    let mut v = Vec::new();
    w32(&mut v, if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 });
    w16(&mut v, 2);
    w16(&mut v, 4);
    w32(&mut v, 0);
    w32(&mut v, 0);
    w32(&mut v, 262_144);
    w32(&mut v, 1);
    for (sec, frac, data) in records {
        w32(&mut v, *sec);
        w32(&mut v, *frac);
        w32(&mut v, data.len() as u32);
        w32(&mut v, data.len() as u32 + 4);
        v.extend_from_slice(data);
    }
    v
}

/// Records of many sizes, one longer than the smallest chunk.
fn records() -> Vec<(u32, u32, Vec<u8>)> {
    [60usize, 1, 0, 1514, 9000, 77, 4096, 4095, 4097, 14, 300]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let data = (0..n).map(|b| (b * 7 + i) as u8).collect();
            (1_700_000_000 + i as u32, 1000 * i as u32, data)
        })
        .collect()
}

type Seen = (u64, u32, Vec<u8>);

/// The chunks of `input`: read on this thread `cap` bytes at a time, or by a thread.
fn chunks<R: Read + Send + 'static>(input: R, threaded: bool, cap: usize) -> Chunks<R> {
    if threaded {
        Chunks::threaded(input)
    } else {
        Chunks::here(input, cap)
    }
}

/// Walks `file` (header first, the rest from an input of its own).
fn walk(file: &[u8], threaded: bool, cap: usize) -> Result<(Vec<Seen>, bool), CaptureError> {
    let mut seen = Vec::new();
    let first = file[..file.len().min(24)].to_vec();
    let rest = std::io::Cursor::new(file[first.len()..].to_vec());
    let s = read_legacy(
        first,
        chunks(rest, threaded, cap),
        |_| {},
        |f| seen.push((f.ts_ns, f.orig_len, f.data.to_vec())),
    )?;
    Ok((seen, s.truncated_tail))
}

/// What pcap-parser's own reader finds in `file`, and whether it ends inside a record.
fn reference(file: &[u8]) -> (Vec<Seen>, bool) {
    let mut r = LegacyPcapReader::new(1 << 16, file).unwrap();
    let (mut seen, mut per_frac) = (Vec::new(), 1_000);
    loop {
        match r.next() {
            Ok((used, block)) => {
                match block {
                    PcapBlockOwned::LegacyHeader(h) if h.is_nanosecond_precision() => per_frac = 1,
                    PcapBlockOwned::Legacy(b) => seen.push((
                        u64::from(b.ts_sec) * 1_000_000_000 + u64::from(b.ts_usec) * per_frac,
                        b.origlen,
                        b.data.to_vec(),
                    )),
                    _ => {}
                }
                r.consume(used);
            }
            Err(pcap_parser::PcapError::Eof) => return (seen, false),
            Err(pcap_parser::PcapError::UnexpectedEof) => return (seen, true),
            Err(pcap_parser::PcapError::Incomplete(_)) => r.refill().unwrap(),
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[test]
fn little_endian_micro_equals_pcap_parser_at_every_chunk_size() {
    let file = pcap(false, false, &records());
    let want = reference(&file);
    assert_eq!(want.0.len(), 11);
    for cap in [1, 2, 15, 16, 17, 100, 4096, 5000, 1 << 20] {
        assert_eq!(walk(&file, false, cap).unwrap(), want, "cap {cap}");
    }
}

#[test]
fn big_endian_equals_pcap_parser() {
    let file = pcap(true, false, &records());
    let want = reference(&file);
    assert_eq!(want.0[3].0, 1_700_000_003_003_000_000);
    assert_eq!(walk(&file, false, 4096).unwrap(), want);
    assert_eq!(walk(&file, true, 0).unwrap(), want);
}

#[test]
fn nanosecond_timestamps_equal_pcap_parser() {
    let file = pcap(false, true, &records());
    let want = reference(&file);
    assert_eq!(want.0[2].0, 1_700_000_002_000_002_000);
    assert_eq!(walk(&file, false, 100).unwrap(), want);
}

#[test]
fn the_reading_thread_gives_the_same_frames() {
    let file = pcap(
        false,
        false,
        &(0..200).flat_map(|_| records()).collect::<Vec<_>>(),
    );
    assert!(file.len() > 2 * CHUNK, "the records span chunks");
    assert_eq!(walk(&file, true, 0).unwrap(), reference(&file));
}

#[test]
fn a_file_cut_inside_a_record_has_a_truncated_tail() {
    let file = pcap(false, false, &records());
    let whole = reference(&file).0;
    for cut in [file.len() - 1, file.len() - 300, file.len() - 310] {
        let (seen, truncated) = walk(&file[..cut], false, 64).unwrap();
        assert!(truncated, "cut at {cut}");
        assert_eq!(seen, whole[..seen.len()], "cut at {cut}");
        assert_eq!(
            walk(&file[..cut], true, 0).unwrap(),
            (seen, true),
            "cut {cut:?}"
        );
    }
}

#[test]
fn a_file_cut_between_records_is_whole() {
    let file = pcap(false, false, &records());
    let cut = file.len() - (16 + 300);
    let (seen, truncated) = walk(&file[..cut], false, 64).unwrap();
    assert!(!truncated);
    assert_eq!(seen.len(), 10);
}

#[test]
fn a_record_claiming_more_than_16_mib_is_refused() {
    let mut file = pcap(false, false, &records()[..1]);
    file.extend_from_slice(&[0; 8]);
    file.extend_from_slice(&(17u32 << 20).to_le_bytes());
    file.extend_from_slice(&(17u32 << 20).to_le_bytes());
    file.extend_from_slice(&[0; 100]);
    for threaded in [false, true] {
        let e = walk(&file, threaded, 4096).unwrap_err();
        assert!(e.to_string().contains("larger than 16 MiB"), "{e}");
    }
}

/// A reader that gives at most three bytes per read (a slow pipe).
struct Trickle(std::io::Cursor<Vec<u8>>);

impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(3);
        self.0.read(&mut buf[..n])
    }
}

#[test]
fn short_reads_give_the_same_frames() {
    let file = pcap(false, false, &records());
    let want = reference(&file);
    for threaded in [false, true] {
        let mut seen = Vec::new();
        let input = Trickle(std::io::Cursor::new(file[24..].to_vec()));
        let s = read_legacy(
            file[..24].to_vec(),
            chunks(input, threaded, 4096),
            |_| {},
            |f| seen.push((f.ts_ns, f.orig_len, f.data.to_vec())),
        )
        .unwrap();
        assert_eq!((seen, s.truncated_tail), want, "threaded {threaded}");
    }
}

#[test]
fn progress_counts_every_byte_once() {
    let file = pcap(false, false, &records());
    for threaded in [false, true] {
        let mut last = 0;
        let rest = std::io::Cursor::new(file[24..].to_vec());
        read_legacy(
            file[..24].to_vec(),
            chunks(rest, threaded, 100),
            |n| last = n,
            |_| {},
        )
        .unwrap();
        assert_eq!(last, file.len() as u64, "threaded {threaded}");
    }
}

/// A reader that fails after its bytes (a failing disk).
struct Failing(std::io::Cursor<Vec<u8>>);

impl Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 => Err(std::io::Error::other("disk on fire")),
            n => Ok(n),
        }
    }
}

#[test]
fn a_read_error_ends_the_walk_with_an_error() {
    let file = pcap(false, false, &records());
    for threaded in [false, true] {
        let input = Failing(std::io::Cursor::new(file[24..400].to_vec()));
        let mut frames = 0;
        let e = read_legacy(
            file[..24].to_vec(),
            chunks(input, threaded, 4096),
            |_| {},
            |_| frames += 1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("read error"), "{e}");
        assert_eq!(frames, 3, "the frames before the error are counted");
    }
}
