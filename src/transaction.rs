//! Single-write journaling for storage engines (ANViL, FAST'15): a
//! [`Transaction`] writes its blocks once, to scratch blocks the engine sets
//! aside, and commits with one atomic vector of moves onto their targets.
//! After a power cut each target holds its old contents or its new ones —
//! all old or all new across the transaction, never a mix — and a journal's
//! second write of every block is gone.
//!
//! ```
//! use zftl::core::{FormatOptions, FtlConfig};
//! use zftl::sim::{SimConfig, SimDevice};
//! use zftl::transaction::Transaction;
//!
//! let device = SimDevice::create_memory(SimConfig::small_for_tests())?;
//! let mut ftl = zftl::core::Driver::format(device, &FormatOptions::default(), FtlConfig::default())?;
//! let bs = ftl.block_size();
//! // Blocks 1000..1064 are this engine's scratch area.
//! let mut tx = Transaction::begin(&mut ftl, 1000, 64)?;
//! tx.write(5, &vec![1; bs])?;
//! tx.write(9, &vec![2; 2 * bs])?;
//! tx.commit()?; // blocks 5, 9 and 10 change together, durably
//! assert_eq!(ftl.read(9, 1)?, vec![2; bs]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use zftl_core::addr::Lba;
use zftl_core::range::{RangeOp, MAX_VECTOR_OPS};
use zftl_core::{Backend, Driver, IoError};

use crate::{Handle, InlineHandle};

/// What a transaction needs of a volume: writes and range operations.
pub trait TxVolume {
    /// Bytes per block.
    fn block_size(&self) -> usize;
    /// Writes whole blocks from `lba` (acknowledged once buffered).
    fn write_blocks(&mut self, lba: Lba, data: &[u8]) -> Result<(), IoError>;
    /// Applies a vector of range operations atomically and durably.
    fn apply_ranges(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError>;
}

impl<B: Backend> TxVolume for Driver<B> {
    fn block_size(&self) -> usize {
        Driver::block_size(self)
    }
    fn write_blocks(&mut self, lba: Lba, data: &[u8]) -> Result<(), IoError> {
        self.write(lba, data)
    }
    fn apply_ranges(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError> {
        self.range_ops(ops)
    }
}

impl<B: Backend + Send + 'static> TxVolume for &Handle<B> {
    fn block_size(&self) -> usize {
        Handle::block_size(self)
    }
    fn write_blocks(&mut self, lba: Lba, data: &[u8]) -> Result<(), IoError> {
        self.write(lba, data)
    }
    fn apply_ranges(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError> {
        self.range_ops(ops)
    }
}

impl<B: Backend> TxVolume for &InlineHandle<B> {
    fn block_size(&self) -> usize {
        InlineHandle::block_size(self)
    }
    fn write_blocks(&mut self, lba: Lba, data: &[u8]) -> Result<(), IoError> {
        self.call(zftl_core::Request::Write {
            lba,
            data: data.to_vec(),
            fua: false,
        })
        .map(drop)
    }
    fn apply_ranges(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError> {
        self.range_ops(ops)
    }
}

/// A set of block writes that lands atomically at commit. See the module
/// documentation. The scratch area must not overlap any target and must
/// not be used by anything else while the transaction is open.
pub struct Transaction<'v, V: TxVolume> {
    volume: &'v mut V,
    scratch: Lba,
    scratch_blocks: u64,
    used: u64,
    /// `(scratch lba, target lba, blocks)` in write order; neighbours
    /// that continue each other are merged.
    moves: Vec<(Lba, Lba, u64)>,
}

impl<'v, V: TxVolume> Transaction<'v, V> {
    /// Opens a transaction whose writes go to `scratch_blocks` blocks at
    /// `scratch` first.
    pub fn begin(
        volume: &'v mut V,
        scratch: Lba,
        scratch_blocks: u64,
    ) -> Result<Transaction<'v, V>, IoError> {
        if scratch_blocks == 0 || scratch.checked_add(scratch_blocks).is_none() {
            return Err(IoError::BadVector {
                reason: format!("a scratch area of {scratch_blocks} blocks at {scratch}"),
            });
        }
        Ok(Transaction {
            volume,
            scratch,
            scratch_blocks,
            used: 0,
            moves: Vec::new(),
        })
    }

    /// Writes whole blocks for `target`, to scratch until the commit. A
    /// later write of a block in the same transaction wins.
    pub fn write(&mut self, target: Lba, data: &[u8]) -> Result<(), IoError> {
        let bs = self.volume.block_size();
        zftl_core::tag::check_whole_blocks(data.len(), bs)?;
        let n = (data.len() / bs) as u64;
        let end = target.checked_add(n);
        let overlaps_scratch =
            end.is_none_or(|e| target < self.scratch + self.scratch_blocks && self.scratch < e);
        if overlaps_scratch {
            return Err(IoError::BadVector {
                reason: format!("target {target}+{n} overlaps the scratch area"),
            });
        }
        if self.used + n > self.scratch_blocks {
            return Err(IoError::BadVector {
                reason: format!(
                    "the transaction needs more than its {} scratch blocks",
                    self.scratch_blocks
                ),
            });
        }
        let at = self.scratch + self.used;
        let continues = self
            .moves
            .last()
            .is_some_and(|&(s, t, k)| s + k == at && t + k == target);
        if !continues && self.moves.len() >= MAX_VECTOR_OPS {
            return Err(IoError::BadVector {
                reason: format!("more than {MAX_VECTOR_OPS} separate target ranges"),
            });
        }
        self.volume.write_blocks(at, data)?;
        self.used += n;
        match self.moves.last_mut() {
            Some(last) if continues => last.2 += n,
            _ => self.moves.push((at, target, n)),
        }
        Ok(())
    }

    /// Blocks written so far.
    pub fn blocks(&self) -> u64 {
        self.used
    }

    /// Moves every written block onto its target in one atomic vector;
    /// durable when this returns. The scratch blocks read as zeros after.
    pub fn commit(self) -> Result<(), IoError> {
        if self.moves.is_empty() {
            return Ok(());
        }
        let ops = self
            .moves
            .iter()
            .map(|&(src, dst, block_count)| RangeOp::Move {
                src,
                dst,
                block_count,
            })
            .collect();
        self.volume.apply_ranges(ops)
    }

    /// Discards the scratch blocks written; the targets never change.
    pub fn abort(self) -> Result<(), IoError> {
        if self.used == 0 {
            return Ok(());
        }
        self.volume.apply_ranges(vec![RangeOp::Delete {
            lba: self.scratch,
            block_count: self.used,
        }])
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use super::*;
    use zftl_core::{FormatOptions, FtlConfig};
    use zftl_sim::{SimConfig, SimDevice};

    fn driver() -> Driver<SimDevice> {
        let dev = SimDevice::create_memory(SimConfig::small_for_tests()).unwrap();
        Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).unwrap()
    }

    #[test]
    fn commit_lands_every_write_and_abort_none() {
        let mut ftl = driver();
        let bs = ftl.block_size();
        ftl.write(3, &vec![9; bs]).unwrap();
        let mut tx = Transaction::begin(&mut ftl, 500, 16).unwrap();
        tx.write(1, &vec![1; 2 * bs]).unwrap();
        tx.write(3, &vec![3; bs]).unwrap(); // continues the first: one move
        tx.write(1, &vec![4; bs]).unwrap(); // a later write of block 1 wins
        assert_eq!(tx.moves.len(), 2);
        tx.commit().unwrap();
        assert_eq!(
            ftl.read(1, 3).unwrap(),
            [vec![4; bs], vec![1; bs], vec![3; bs]].concat()
        );
        assert_eq!(ftl.read(500, 1).unwrap(), vec![0; bs]);
        let mut tx = Transaction::begin(&mut ftl, 500, 16).unwrap();
        tx.write(3, &vec![7; bs]).unwrap();
        tx.abort().unwrap();
        assert_eq!(ftl.read(3, 1).unwrap(), vec![3; bs]);
        assert_eq!(ftl.read(500, 1).unwrap(), vec![0; bs]);
    }

    #[test]
    fn bad_writes_are_refused() {
        let mut ftl = driver();
        let bs = ftl.block_size();
        let mut tx = Transaction::begin(&mut ftl, 500, 2).unwrap();
        assert!(matches!(
            tx.write(499, &vec![0; 2 * bs]),
            Err(IoError::BadVector { .. })
        ));
        assert!(matches!(
            tx.write(1, &vec![0; 3 * bs]),
            Err(IoError::BadVector { .. })
        ));
        assert!(matches!(
            tx.write(1, &[0; 10]),
            Err(IoError::BufferSize { .. })
        ));
        assert!(Transaction::begin(&mut ftl, 0, 0).is_err());
    }
}
