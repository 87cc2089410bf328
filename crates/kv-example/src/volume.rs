//! `Volume`: the calls of a zftl volume the store makes, on `Driver` and on
//! the blocking `Handle`, so one store works over each.

use zftl::core::{Backend, Driver, IoError, NamelessAddr};
use zftl::handle::Handle;

/// A zftl volume as the store uses it: named reads and writes of its
/// index, nameless writes of its values, flush.
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
    /// Frees blocks.
    fn nameless_free(&mut self, addrs: &[NamelessAddr]) -> Result<(), IoError>;
}

/// Writes the `Volume` methods as calls of the type's own methods of the
/// same names (`&mut self` on `Driver`, `&self` on the handles).
macro_rules! volume_by_methods {
    () => {
        fn block_size(&self) -> usize {
            Self::block_size(self)
        }
        fn logical_blocks(&self) -> u64 {
            Self::logical_blocks(self)
        }
        fn read(&mut self, lba: u64, block_count: u32) -> Result<Vec<u8>, IoError> {
            Self::read(self, lba, block_count)
        }
        fn write(&mut self, lba: u64, data: &[u8]) -> Result<(), IoError> {
            Self::write(self, lba, data)
        }
        fn trim(&mut self, lba: u64, block_count: u32) -> Result<(), IoError> {
            Self::trim(self, lba, block_count)
        }
        fn flush(&mut self) -> Result<(), IoError> {
            Self::flush(self)
        }
        fn nameless_write(&mut self, data: &[u8], md: &[u8]) -> Result<Vec<NamelessAddr>, IoError> {
            Self::nameless_write(self, data, md)
        }
        fn nameless_read(&mut self, addr: NamelessAddr) -> Result<(Vec<u8>, Vec<u8>), IoError> {
            Self::nameless_read(self, addr)
        }
        fn nameless_free(&mut self, addrs: &[NamelessAddr]) -> Result<(), IoError> {
            Self::nameless_free(self, addrs)
        }
    };
}

impl<B: Backend> Volume for Driver<B> {
    volume_by_methods!();
}

impl<B: Send + 'static> Volume for Handle<B> {
    volume_by_methods!();
}
