//! Where `analyze` reads a capture from: a file, a FIFO or standard input (`-`), plain or
//! compressed with gzip, zstd or xz (recognised by their magic bytes, whatever the name, and
//! decompressed as a stream: nothing is unpacked to disk or held whole in memory).

use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The compression of a stream, from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
    Xz,
}

impl Compression {
    pub fn of(magic: &[u8]) -> Compression {
        if magic.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Compression::Xz
        } else {
            Compression::None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "plain",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
        }
    }
}

/// The memory an xz stream may take to decompress. `xz -9` (a 64 MiB dictionary) needs about
/// 65 MiB; a block header can ask for a 4 GiB dictionary, which would be allocated (and
/// filled, by a stream of zeros) before a byte reaches the capture reader. gzip's window is
/// 32 KiB; zstd's decoder refuses windows over 128 MiB (its default `windowLogMax` of 27).
pub const XZ_MEMORY_LIMIT: u64 = 256 << 20;

/// The first read error of a stream, kept for the message: the capture reader above only
/// sees "read error".
#[derive(Clone, Default)]
pub struct ReadFailure(Arc<Mutex<Option<Failure>>>);

/// Why a stream stopped early.
#[derive(Clone, Debug)]
struct Failure {
    /// The decompressor refused the stream on a bound of ours (not corruption).
    refused: bool,
    message: String,
}

impl ReadFailure {
    /// Why the stream `compression` stopped early, in words (None: it did not).
    pub fn take_described(&self, compression: Compression) -> Option<String> {
        let f = self.0.lock().ok().and_then(|mut e| e.take())?;
        Some(match (f.refused, compression) {
            (true, c) => format!("{} stream refused: {}", c.name(), f.message),
            (false, Compression::None) => format!("read error: {}", f.message),
            (false, c) => format!("corrupt {} stream: {}", c.name(), f.message),
        })
    }
}

/// Marks a decompressor's memory-limit error as a refusal with the bound in words.
struct XzLimited<R>(R);

impl<R: Read> Read for XzLimited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            let over_limit = e
                .get_ref()
                .and_then(|i| i.downcast_ref::<liblzma::stream::Error>())
                .is_some_and(|i| matches!(i, liblzma::stream::Error::MemLimit));
            if over_limit {
                io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "it needs more than {} MiB of memory to decompress (an LZMA2 dictionary \
                         larger than `xz -9` makes; no capture tool writes one). If the file is \
                         genuine, decompress it with a bounded tool and pipe it in: \
                         `xz -dc --memlimit=4GiB FILE | rocemon analyze -`",
                        XZ_MEMORY_LIMIT >> 20
                    ),
                )
            } else {
                e
            }
        })
    }
}

struct Watched<R> {
    inner: R,
    failure: ReadFailure,
}

impl<R: Read> Read for Watched<R> {
    /// A read error (a corrupt or cut compressed stream, a failing disk) is kept and reads as
    /// the end of the stream: the capture reader counts every whole record before it, and the
    /// caller reports the error with those counts.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // The capture reader may ask with a full buffer; the zstd decoder takes an empty
        // output buffer for an error, where std's contract says 0.
        if buf.is_empty() {
            return Ok(0);
        }
        match self.inner.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                if let Ok(mut f) = self.failure.0.lock() {
                    f.get_or_insert_with(|| Failure {
                        refused: e.kind() == io::ErrorKind::OutOfMemory,
                        message: e.to_string(),
                    });
                }
                Ok(0)
            }
            ok => ok,
        }
    }
}

/// An opened input: the decompressed stream, what it is, and where its read errors go.
pub struct Input {
    pub reader: Box<dyn Read + Send>,
    pub compression: Compression,
    pub failure: ReadFailure,
}

/// Opens `path` (`-`: standard input) and puts the decompressor its magic bytes ask for in
/// front of it.
pub fn open(path: &Path) -> io::Result<Input> {
    let raw: Box<dyn Read + Send> = if path == Path::new("-") {
        Box::new(io::stdin())
    } else {
        Box::new(std::fs::File::open(path)?)
    };
    let mut buffered = BufReader::with_capacity(1 << 16, raw);
    let compression = Compression::of(buffered.fill_buf()?);
    let reader: Box<dyn Read + Send> = match compression {
        Compression::None => Box::new(buffered),
        // Multi-member: `cat a.gz b.gz` is one stream, as gzip itself reads it.
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(buffered)?),
        Compression::Xz => {
            let stream = liblzma::stream::Stream::new_stream_decoder(
                XZ_MEMORY_LIMIT,
                liblzma::stream::CONCATENATED,
            )
            .map_err(io::Error::from)?;
            Box::new(XzLimited(liblzma::bufread::XzDecoder::new_stream(
                buffered, stream,
            )))
        }
    };
    let failure = ReadFailure::default();
    Ok(Input {
        reader: Box::new(Watched {
            inner: reader,
            failure: failure.clone(),
        }),
        compression,
        failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_name_the_compression() {
        assert_eq!(Compression::of(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
        assert_eq!(
            Compression::of(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Compression::Zstd
        );
        assert_eq!(Compression::of(b"\xfd7zXZ\x00\x00"), Compression::Xz);
        assert_eq!(
            Compression::of(&[0xd4, 0xc3, 0xb2, 0xa1]),
            Compression::None
        );
        assert_eq!(Compression::of(&[]), Compression::None);
    }
}
