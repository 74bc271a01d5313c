//! The packet-reader trait: the only way the parser touches packet bytes.
//!
//! Every read is a constant-size copy at an offset, checked against the end of the data right
//! before the access. That shape is what the BPF verifier accepts (constant lengths, bounded
//! offsets), and on the host it makes out-of-bounds reads impossible by construction.

/// Largest offset the parser ever reads at. Offsets are clamped to it before each access so
/// that the verifier sees a bounded range (VLAN tags, IPv4 options and IPv6 extension headers
/// make offsets variable).
pub const MAX_READ_OFFSET: usize = 512;

/// Whether `n` bytes at `off` lie inside `len` bytes of data and `off` is at most
/// [`MAX_READ_OFFSET`]: the one bounds rule of every reader. In the kernel the offset bound
/// comes first so the verifier sees a bounded offset before the sum.
#[inline(always)]
pub fn readable(off: usize, n: usize, len: usize) -> bool {
    off <= MAX_READ_OFFSET && off + n <= len
}

/// Source of packet bytes for [`crate::parse`].
pub trait PacketReader {
    /// Number of bytes that can be read (the captured length, not the wire length).
    fn len(&self) -> usize;

    /// Whether no byte can be read.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `N` bytes starting at `off`, or `None` if any of them lies outside the data or
    /// `off` exceeds [`MAX_READ_OFFSET`].
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]>;
}

/// A reader over a byte slice: capture records, AF_XDP frames and tests.
#[derive(Clone, Copy, Debug)]
pub struct SliceReader<'a>(pub &'a [u8]);

impl PacketReader for SliceReader<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len()
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if !readable(off, N, self.0.len()) {
            return None;
        }
        let bytes = self.0.get(off..off + N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Some(out)
    }
}

/// A reader over the first bytes of a longer frame: the head of a multi-buffer AF_XDP frame,
/// copied out before its buffers go back to the kernel. `len` is the whole frame, so length
/// checks see the real frame; reads past the head fail (headers sit in the first
/// [`MAX_READ_OFFSET`] bytes plus one header).
#[derive(Clone, Copy, Debug)]
pub struct PrefixReader<'a> {
    pub head: &'a [u8],
    pub len: usize,
}

impl PacketReader for PrefixReader<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if off.checked_add(N)? > self.len {
            return None;
        }
        SliceReader(self.head).read(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inside_and_refuses_outside() {
        let data = [1u8, 2, 3, 4];
        let r = SliceReader(&data);
        assert_eq!(r.read::<2>(0), Some([1, 2]));
        assert_eq!(r.read::<2>(2), Some([3, 4]));
        assert_eq!(r.read::<2>(3), None);
        assert_eq!(r.read::<1>(usize::MAX), None);
        assert_eq!(r.read::<0>(4), Some([]));
    }

    #[test]
    fn refuses_offsets_past_the_clamp() {
        let data = [0u8; 2 * MAX_READ_OFFSET];
        let r = SliceReader(&data);
        assert!(r.read::<1>(MAX_READ_OFFSET).is_some());
        assert!(r.read::<1>(MAX_READ_OFFSET + 1).is_none());
    }

    #[test]
    fn prefix_reader_sees_the_whole_length_but_reads_only_the_head() {
        let head = [7u8; 600];
        let r = PrefixReader {
            head: &head,
            len: 9000,
        };
        assert_eq!(r.len(), 9000);
        assert_eq!(r.read::<4>(500), Some([7; 4]));
        assert_eq!(r.read::<4>(598), None);
        let short = PrefixReader {
            head: &head,
            len: 10,
        };
        assert_eq!(short.read::<4>(8), None);
    }
}
