//! [`AlignedBuf`]: bytes whose first byte sits on a chosen alignment, for
//! the I/O buffers where a device or the kernel needs one. Safe code: the
//! buffer is a `Vec` a little longer than the bytes, and the bytes are the
//! window of it that starts on the alignment.

use std::ops::{Deref, DerefMut};

/// Bytes that start on a multiple of an alignment (a power of two), held
/// as the tail of a `Vec` that starts up to an alignment's worth earlier.
/// The `Vec` never changes size, so the bytes' address stays put while the
/// kernel holds them.
///
/// Where zftl-zns uses it:
/// - the zoned block device path (`O_DIRECT`): every read buffer, and a
///   write whose bytes miss the queue's `dma_alignment` or are in several
///   buffers, which it copies into one;
/// - NVMe passthrough: a write whose parts cannot go as a vector (see
///   `vectorable` in the crate root) is copied into one page-aligned
///   buffer, whose pages the controller's data pointers then address
///   whole.
///
/// ```
/// use zftl_zns::AlignedBuf;
/// let mut b = AlignedBuf::zeroed(10_000, AlignedBuf::PAGE_BYTES);
/// assert_eq!(b.as_ptr() as usize % 4096, 0);
/// b[..3].copy_from_slice(b"abc");
/// assert_eq!(&b[..4], b"abc\0");
/// let joined = AlignedBuf::gather([&b"ab"[..], b"cd"], 512);
/// assert_eq!((&joined[..], joined.as_ptr() as usize % 512), (&b"abcd"[..], 0));
/// ```
#[derive(Debug, Default)]
pub struct AlignedBuf {
    /// `start` bytes of padding, then the bytes.
    vec: Vec<u8>,
    start: usize,
}

impl AlignedBuf {
    /// The memory page of the NVMe controller the kernel maps I/O buffers
    /// in (Linux's NVMe driver always uses 4 KiB).
    pub const PAGE_BYTES: usize = 4096;

    /// `len` zero bytes starting on a multiple of `align` (a power of two).
    pub fn zeroed(len: usize, align: usize) -> AlignedBuf {
        assert!(align.is_power_of_two(), "alignment {align}");
        let mut vec = vec![0u8; len + align - 1];
        let start = vec.as_ptr().align_offset(align);
        assert!(start < align, "a byte buffer can start anywhere");
        vec.truncate(start + len);
        AlignedBuf { vec, start }
    }

    /// The bytes of `parts`, in order, in one buffer that starts on a
    /// multiple of `align`.
    pub fn gather<'a>(parts: impl IntoIterator<Item = &'a [u8]>, align: usize) -> Self {
        let parts: Vec<&[u8]> = parts.into_iter().collect();
        let len = parts.iter().map(|p| p.len()).sum();
        let mut buf = AlignedBuf::zeroed(len, align);
        let mut at = 0;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        buf
    }

    /// `vec` itself when its bytes already start on a multiple of `align`
    /// (no copy), else `vec` back.
    pub fn from_vec(vec: Vec<u8>, align: usize) -> Result<AlignedBuf, Vec<u8>> {
        if (vec.as_ptr() as usize).is_multiple_of(align) {
            Ok(AlignedBuf { vec, start: 0 })
        } else {
            Err(vec)
        }
    }

    /// The bytes as a `Vec`: the buffer's own when there is no padding,
    /// else a copy.
    pub fn into_vec(self) -> Vec<u8> {
        if self.start == 0 {
            self.vec
        } else {
            self.to_vec()
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.vec[self.start..]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.vec[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_on_the_alignment_and_hold_the_bytes() {
        for align in [1, 2, 512, 4096] {
            for len in [0, 1, 4095, 4096, 8193] {
                let b = AlignedBuf::zeroed(len, align);
                assert_eq!(b.len(), len);
                assert_eq!(b.as_ptr() as usize % align, 0, "{align} {len}");
                assert!(b.iter().all(|&x| x == 0));
            }
        }
        let parts: [&[u8]; 3] = [b"one", b"", b"three"];
        let g = AlignedBuf::gather(parts, 4096);
        assert_eq!(&g[..], b"onethree");
        assert_eq!(g.into_vec(), b"onethree");
    }

    #[test]
    fn an_aligned_vec_is_taken_as_it_is() {
        let b = AlignedBuf::zeroed(100, 64);
        let v = b.into_vec();
        assert_eq!(v.len(), 100);
        let at = v.as_ptr();
        match AlignedBuf::from_vec(v, 1) {
            Ok(b) => assert_eq!(b.as_ptr(), at, "no copy"),
            Err(_) => panic!("every address is a multiple of 1"),
        }
        let a = AlignedBuf::zeroed(9, 4096).into_vec();
        let odd = &a[1..];
        let copy = odd.to_vec();
        if !(copy.as_ptr() as usize).is_multiple_of(4096) {
            assert!(AlignedBuf::from_vec(copy, 4096).is_err());
        }
    }
}
