//! The glue between the core and its metadata log: log commands, their
//! OOB, and going read-only when the log fails.

use super::ckpt::CkptState;
use super::{Ftl, Op};
use crate::backend::Command;
use crate::log::LogCommand;

impl Ftl {
    /// The log lost so many zones it cannot go on: read-only until remount.
    pub(super) fn check_log(&mut self) {
        if self.log.failed() {
            self.metadata_failed();
        }
    }

    pub(super) fn metadata_failed(&mut self) {
        self.read_only = true;
        self.log.on_failure();
        self.stats.write_errors += 1;
    }

    pub(super) fn next_log_command(&mut self) -> Option<(Op, Command)> {
        let waits = (self.log.reset_ahead_zone()).is_some_and(|z| self.log_reset_ahead_waits(z));
        let cmd = self.log.next_command(waits)?;
        match cmd {
            LogCommand::Write {
                zone,
                offset_blocks,
                first_log_seq,
                blocks,
            } => {
                let count = blocks.len() as u64;
                // The last write of chunk 0 is where it is: one that fails
                // is written again elsewhere before the checkpoint commits.
                if let CkptState::Writing { id, location, .. } = &mut self.ckpt {
                    if (first_log_seq..first_log_seq + count).contains(id) {
                        *location = Some((zone, offset_blocks + (*id - first_log_seq)));
                    }
                }
                self.stats.media_write_blocks += count;
                self.stats.meta_write_blocks += count;
                let mut data = Vec::with_capacity(self.geo.data_bytes(count));
                for b in blocks {
                    data.extend_from_slice(&b);
                }
                let oob = self.meta_oob(count);
                Some((
                    Op::LogWrite {
                        first_log_seq,
                        count,
                    },
                    Command::Write {
                        zone,
                        offset_blocks,
                        data: data.into(),
                        oob,
                    },
                ))
            }
            LogCommand::Reset { zone } => Some((Op::LogReset { zone }, Command::Reset { zone })),
            LogCommand::Finish { zone } => Some((Op::LogFinish { zone }, Command::Finish { zone })),
        }
    }

    /// OOB bytes for metadata blocks: zeros (metadata is self-describing).
    pub(super) fn meta_oob(&self, blocks: u64) -> Vec<u8> {
        vec![0u8; self.geo.oob_bytes(blocks)]
    }
}
