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

/// The first read error of a stream, kept for the message: the capture reader above only
/// sees "read error".
#[derive(Clone, Default)]
pub struct ReadFailure(Arc<Mutex<Option<String>>>);

impl ReadFailure {
    pub fn take(&self) -> Option<String> {
        self.0.lock().ok().and_then(|mut e| e.take())
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
                    f.get_or_insert_with(|| e.to_string());
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
        Compression::Xz => Box::new(liblzma::bufread::XzDecoder::new_multi_decoder(buffered)),
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
