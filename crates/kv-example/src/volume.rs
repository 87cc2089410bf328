//! `Volume`: the calls of a zftl volume the store makes, on `Driver` and on
//! the blocking `Handle`, so one store works over each (and over a
//! borrowed one, `&mut V`).

use zftl::core::{Backend, Driver, IoError, NamelessAddr, NamelessEvent};
use zftl::handle::Handle;

/// A zftl volume as the store uses it: named reads and writes of its
/// index, nameless writes of its values, flush, commit and the post-crash
/// hand-over.
pub trait Volume {
    /// Bytes per block.
    fn block_size(&self) -> usize;
    /// Blocks of the logical segment.
    fn logical_blocks(&self) -> u64;
    /// `block_count` blocks from `lba`.
    fn read(&mut self, lba: u64, block_count: u32) -> Result<Vec<u8>, IoError>;
    /// Whole blocks at `lba`.
    fn write(&mut self, lba: u64, data: &[u8]) -> Result<(), IoError>;
    /// Unmaps `block_count` blocks from `lba`.
    fn trim(&mut self, lba: u64, block_count: u32) -> Result<(), IoError>;
    /// Makes everything answered before it durable.
    fn flush(&mut self) -> Result<(), IoError>;
    /// Writes whole blocks with `md` per block; their addresses.
    fn nameless_write(&mut self, data: &[u8], md: &[u8]) -> Result<Vec<NamelessAddr>, IoError>;
    /// A block and its metadata.
    fn nameless_read(&mut self, addr: NamelessAddr) -> Result<(Vec<u8>, Vec<u8>), IoError>;
    /// Writes whole blocks that replace `old` (freed with them, so a cut
    /// keeps both or neither); their addresses.
    fn nameless_overwrite(
        &mut self,
        old: &[NamelessAddr],
        data: &[u8],
        md: &[u8],
    ) -> Result<Vec<NamelessAddr>, IoError>;
    /// Frees blocks.
    fn nameless_free(&mut self, addrs: &[NamelessAddr]) -> Result<(), IoError>;
    /// Flushes, then records that every address handed out before it is
    /// the client's: those blocks are not handed over after a cut.
    fn nameless_commit(&mut self) -> Result<(), IoError>;
    /// Up to `max` events, waiting while one can still come; none once
    /// none can.
    fn next_events(&mut self, max: usize) -> Result<Vec<NamelessEvent>, IoError>;
}

/// Writes the `Volume` methods as calls of `$on`'s methods of the same
/// names: the type's own (`&mut self` on `Driver`, `&self` on the
/// handles), or those of the volume a `&mut` borrows.
macro_rules! volume_by_methods {
    ($on:ident) => {
        fn block_size(&self) -> usize {
            $on::block_size(self)
        }
        fn logical_blocks(&self) -> u64 {
            $on::logical_blocks(self)
        }
        fn read(&mut self, lba: u64, block_count: u32) -> Result<Vec<u8>, IoError> {
            $on::read(self, lba, block_count)
        }
        fn write(&mut self, lba: u64, data: &[u8]) -> Result<(), IoError> {
            $on::write(self, lba, data)
        }
        fn trim(&mut self, lba: u64, block_count: u32) -> Result<(), IoError> {
            $on::trim(self, lba, block_count)
        }
        fn flush(&mut self) -> Result<(), IoError> {
            $on::flush(self)
        }
        fn nameless_write(&mut self, data: &[u8], md: &[u8]) -> Result<Vec<NamelessAddr>, IoError> {
            $on::nameless_write(self, data, md)
        }
        fn nameless_read(&mut self, addr: NamelessAddr) -> Result<(Vec<u8>, Vec<u8>), IoError> {
            $on::nameless_read(self, addr)
        }
        fn nameless_overwrite(
            &mut self,
            old: &[NamelessAddr],
            data: &[u8],
            md: &[u8],
        ) -> Result<Vec<NamelessAddr>, IoError> {
            $on::nameless_overwrite(self, old, data, md)
        }
        fn nameless_free(&mut self, addrs: &[NamelessAddr]) -> Result<(), IoError> {
            $on::nameless_free(self, addrs)
        }
        fn nameless_commit(&mut self) -> Result<(), IoError> {
            $on::nameless_commit(self)
        }
        fn next_events(&mut self, max: usize) -> Result<Vec<NamelessEvent>, IoError> {
            $on::next_events(self, max)
        }
    };
}

impl<B: Backend> Volume for Driver<B> {
    volume_by_methods!(Self);
}

impl<B: Send + 'static> Volume for Handle<B> {
    volume_by_methods!(Self);
}

/// A borrowed volume: the caller keeps it if the store fails (a test that
/// cuts the power while a store opens takes the device back).
impl<V: Volume + ?Sized> Volume for &mut V {
    volume_by_methods!(V);
}
