//! Block bytes with more than one owner, shared instead of copied: a write
//! buffer slot and the device command that carries the slot to the media
//! hold the same bytes ([`BlockData`]); a command's data is the ordered list
//! of such windows ([`Payload`]).
//!
//! A multi-block host write stays in the request's own buffer from the
//! moment it is admitted until its append completes: the append gathers the
//! slots' windows, and consecutive windows of one buffer merge into one
//! part, so an append holds one part per request buffer it takes blocks of.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes behind one or more windows.
#[derive(Debug)]
struct Buf {
    bytes: Vec<u8>,
    /// Blocks this buffer counts in `held` while it lives (a write
    /// buffer's bound on the request buffers it keeps alive).
    counted: Option<(Arc<AtomicUsize>, usize)>,
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some((held, blocks)) = &self.counted {
            held.fetch_sub(*blocks, Ordering::Relaxed);
        }
    }
}

/// A window into a buffer; cloning shares the bytes, never copies them.
/// Reads as the window's bytes.
#[derive(Clone, Debug)]
pub struct BlockData {
    buf: Arc<Buf>,
    at: usize,
    len: usize,
}

impl BlockData {
    /// Windows of `block_bytes` over `bytes` (a nonzero multiple of it);
    /// the buffer counts its blocks in `held` until its last window goes.
    pub(crate) fn split(bytes: Vec<u8>, block_bytes: usize, held: &Arc<AtomicUsize>) -> Vec<Self> {
        assert!(!bytes.is_empty());
        let blocks = bytes.len() / block_bytes.max(1);
        held.fetch_add(blocks, Ordering::Relaxed);
        Self::windows(bytes, block_bytes, Some((Arc::clone(held), blocks)))
    }

    /// Windows of `block_bytes` over `bytes` (a multiple of it), counted
    /// nowhere; no windows for no bytes.
    pub(crate) fn blocks(bytes: Vec<u8>, block_bytes: usize) -> Vec<Self> {
        Self::windows(bytes, block_bytes, None)
    }

    fn windows(
        bytes: Vec<u8>,
        block_bytes: usize,
        counted: Option<(Arc<AtomicUsize>, usize)>,
    ) -> Vec<Self> {
        assert!(block_bytes > 0 && bytes.len().is_multiple_of(block_bytes));
        let blocks = bytes.len() / block_bytes;
        let buf = Arc::new(Buf { bytes, counted });
        (0..blocks)
            .map(|i| BlockData {
                buf: Arc::clone(&buf),
                at: i * block_bytes,
                len: block_bytes,
            })
            .collect()
    }

    /// The buffer itself, when this is its only owner, the window covers
    /// all of it and it is not counted by a write buffer.
    pub(crate) fn into_unique_vec(self) -> Result<Vec<u8>, BlockData> {
        let covers = self.at == 0 && self.len == self.buf.bytes.len();
        if !covers || self.buf.counted.is_some() {
            return Err(self);
        }
        let (at, len) = (self.at, self.len);
        match Arc::try_unwrap(self.buf) {
            Ok(mut buf) => Ok(std::mem::take(&mut buf.bytes)),
            Err(buf) => Err(BlockData { buf, at, len }),
        }
    }

    /// Whether `next` starts where this window ends, in the same buffer.
    fn continued_by(&self, next: &BlockData) -> bool {
        Arc::ptr_eq(&self.buf, &next.buf) && self.at + self.len == next.at
    }
}

impl std::ops::Deref for BlockData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf.bytes[self.at..self.at + self.len]
    }
}

impl From<Vec<u8>> for BlockData {
    fn from(bytes: Vec<u8>) -> BlockData {
        let len = bytes.len();
        BlockData {
            buf: Arc::new(Buf {
                bytes,
                counted: None,
            }),
            at: 0,
            len,
        }
    }
}

/// The data of a `Write` or `Append` command: windows in order, read as
/// one run of bytes. Built from a `Vec<u8>` (one part) or by gathering
/// write buffer blocks without copying them.
#[derive(Clone, Default)]
pub struct Payload {
    parts: Vec<BlockData>,
    len: usize,
}

impl Payload {
    pub fn new() -> Payload {
        Payload::default()
    }

    /// Appends `block`; a window that continues the last part in the same
    /// buffer extends that part instead.
    pub fn push(&mut self, block: BlockData) {
        if block.len == 0 {
            return;
        }
        self.len += block.len;
        if let Some(last) = self.parts.last_mut() {
            if last.continued_by(&block) {
                last.len += block.len;
                return;
            }
        }
        self.parts.push(block);
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The parts' bytes, in order.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.parts.iter().map(|p| &**p)
    }

    /// How many separate buffers the bytes are in.
    pub fn part_count(&self) -> usize {
        self.parts.len()
    }

    /// The bytes as one slice, when they are in one buffer (or none).
    pub fn as_contiguous(&self) -> Option<&[u8]> {
        match self.parts.as_slice() {
            [] => Some(&[]),
            [only] => Some(only),
            _ => None,
        }
    }

    /// The pieces of the bytes in `start..end`, in order (a range may
    /// span parts; no piece is empty).
    pub fn pieces(&self, start: usize, end: usize) -> impl Iterator<Item = &[u8]> + '_ {
        assert!(start <= end && end <= self.len, "range inside the payload");
        let mut part_start = 0;
        self.parts.iter().filter_map(move |p| {
            let (from, to) = (part_start, part_start + p.len);
            part_start = to;
            let (a, b) = (start.max(from), end.min(to));
            (a < b).then(|| &p[a - from..b - from])
        })
    }

    /// A copy of the bytes in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for p in self.parts() {
            v.extend_from_slice(p);
        }
        v
    }

    /// The bytes in one buffer: the payload's own buffer when it has one
    /// that nothing else shares, else a copy.
    pub fn into_vec(self) -> Vec<u8> {
        self.try_into_vec().unwrap_or_else(|p| p.to_vec())
    }

    /// The payload's own buffer, when its bytes are all of one buffer that
    /// nothing else shares; else the payload back, untouched.
    pub fn try_into_vec(mut self) -> Result<Vec<u8>, Payload> {
        if self.parts.len() == 1 {
            match self.parts.pop().expect("one part").into_unique_vec() {
                Ok(v) => return Ok(v),
                Err(part) => self.parts.push(part),
            }
        }
        Err(self)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        let mut p = Payload::new();
        p.push(bytes.into());
        p
    }
}

impl PartialEq for Payload {
    /// By bytes, not by how they are split (byte by byte: for tests and
    /// checks, not for a data path).
    fn eq(&self, other: &Payload) -> bool {
        self.len == other.len && self.parts().flatten().eq(other.parts().flatten())
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payload")
            .field("bytes", &self.len)
            .field("parts", &self.parts.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_windows_of_one_buffer_merge() {
        let held = Arc::new(AtomicUsize::new(0));
        let bytes: Vec<u8> = (0..64).map(|i| i as u8).collect();
        let blocks = BlockData::split(bytes.clone(), 8, &held);
        assert_eq!(held.load(Ordering::Relaxed), 8);
        let mut p = Payload::new();
        for b in &blocks[2..6] {
            p.push(b.clone());
        }
        p.push(blocks[7].clone()); // a gap: a new part
        p.push(vec![0; 8].into());
        assert_eq!((p.len(), p.part_count()), (48, 3));
        let mut want = bytes[16..48].to_vec();
        want.extend_from_slice(&bytes[56..64]);
        want.extend_from_slice(&[0; 8]);
        assert_eq!(p.to_vec(), want);
        let pieces: Vec<&[u8]> = p.pieces(24, 44).collect();
        assert_eq!(pieces, vec![&bytes[40..48], &bytes[56..64], &[0u8; 4][..]]);
        drop(blocks);
        assert_eq!(
            held.load(Ordering::Relaxed),
            8,
            "the payload keeps the buffer"
        );
        drop(p);
        assert_eq!(held.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn into_vec_reuses_only_an_unshared_whole_buffer() {
        let v = vec![5u8; 16];
        let ptr = v.as_ptr();
        let back = Payload::from(v).into_vec();
        assert_eq!(back.as_ptr(), ptr, "no copy");
        let shared = BlockData::from(vec![6u8; 16]);
        let mut p = Payload::new();
        p.push(shared.clone());
        let copy = p.into_vec();
        assert_ne!(copy.as_ptr(), shared.as_ptr());
        assert_eq!(copy, vec![6u8; 16]);
    }

    #[test]
    fn equality_is_by_bytes_not_by_parts() {
        let mut split = Payload::new();
        split.push(vec![1, 2].into());
        split.push(vec![3].into());
        assert_eq!(split, Payload::from(vec![1, 2, 3]));
        assert_ne!(split, Payload::from(vec![1, 2, 4]));
        assert_ne!(split, Payload::from(vec![1, 2]));
    }
}
