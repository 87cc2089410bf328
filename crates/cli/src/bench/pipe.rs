//! Host I/O through the FTL with many requests in flight: the driver's
//! `try_submit` / `turn` / `take_reply`, single-block requests.

use zftl_core::addr::Lba;
use zftl_core::{Backend, Driver, IoError, ReplyData, Request};

/// Request ids start here so they never meet the ids the driver's blocking
/// calls (`flush`, `write`) hand out from 0.
const FIRST_ID: u64 = 1 << 62;

/// Keeps up to `depth` single-block host requests in flight.
pub struct Pipeline {
    depth: usize,
    tick_every: u64,
    next_id: u64,
    in_flight: usize,
    block: Vec<u8>,
}

/// What to do between batches: the count finished so far; `false` stops.
pub type Tick<'a> = &'a mut dyn FnMut(u64) -> bool;

/// Replies collected between two checks of the tick, by default.
const TICK_EVERY: u64 = 1024;

impl Pipeline {
    pub fn new(depth: usize, block_size: usize) -> Pipeline {
        Pipeline::with_byte(depth, block_size, 0x5a)
    }

    /// Like [`Self::new`], writing blocks of `byte`.
    pub fn with_byte(depth: usize, block_size: usize, byte: u8) -> Pipeline {
        Pipeline {
            depth: depth.max(1),
            tick_every: TICK_EVERY,
            next_id: FIRST_ID,
            in_flight: 0,
            block: vec![byte; block_size],
        }
    }

    /// Checks the tick every `replies` replies (at least 1) instead of 1024.
    pub fn tick_every(mut self, replies: u64) -> Pipeline {
        self.tick_every = replies.max(1);
        self
    }

    /// Writes up to `count` blocks at the addresses `next_lba` gives, until
    /// `tick` says stop; returns how many were acknowledged. Nothing of this
    /// call is in flight afterwards.
    pub fn write<B: Backend>(
        &mut self,
        drv: &mut Driver<B>,
        count: u64,
        next_lba: &mut dyn FnMut() -> Lba,
        tick: Tick<'_>,
    ) -> Result<u64, IoError> {
        self.write_observed(drv, count, next_lba, &mut |_, done| tick(done))
    }

    /// Like [`Self::write`], with the driver handed to the tick (to sample
    /// its statistics).
    pub fn write_observed<B: Backend>(
        &mut self,
        drv: &mut Driver<B>,
        count: u64,
        next_lba: &mut dyn FnMut() -> Lba,
        tick: &mut dyn FnMut(&Driver<B>, u64) -> bool,
    ) -> Result<u64, IoError> {
        let block = self.block.clone();
        self.run(drv, count, tick, &mut |lba_source: Option<Lba>| {
            let lba = lba_source.unwrap_or_else(&mut *next_lba);
            let data = block.clone();
            (
                lba,
                Request::Write {
                    lba,
                    data,
                    fua: false,
                },
            )
        })
    }

    /// Reads up to `count` single blocks at the addresses `next_lba` gives.
    pub fn read<B: Backend>(
        &mut self,
        drv: &mut Driver<B>,
        count: u64,
        next_lba: &mut dyn FnMut() -> Lba,
        tick: Tick<'_>,
    ) -> Result<u64, IoError> {
        self.run(
            drv,
            count,
            &mut |_, done| tick(done),
            &mut |lba_source: Option<Lba>| {
                let lba = lba_source.unwrap_or_else(&mut *next_lba);
                (
                    lba,
                    Request::Read {
                        lba,
                        block_count: 1,
                    },
                )
            },
        )
    }

    /// The loop: submit while there is room (a refused request is retried
    /// with the same address), turn the driver, collect replies.
    fn run<B: Backend>(
        &mut self,
        drv: &mut Driver<B>,
        count: u64,
        tick: &mut dyn FnMut(&Driver<B>, u64) -> bool,
        make: &mut dyn FnMut(Option<Lba>) -> (Lba, Request),
    ) -> Result<u64, IoError> {
        let (mut submitted, mut done, mut next_tick) = (0u64, 0u64, self.tick_every);
        let mut held: Option<Lba> = None;
        let mut stopping = false;
        while done < submitted || (!stopping && submitted < count) {
            while !stopping && self.in_flight < self.depth && submitted < count {
                let (lba, request) = make(held.take());
                match drv.try_submit(self.next_id, request) {
                    Ok(()) => {
                        self.next_id += 1;
                        self.in_flight += 1;
                        submitted += 1;
                    }
                    Err(IoError::Busy) => {
                        held = Some(lba);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            let moved = drv.turn()?;
            let mut replies = 0u64;
            while let Some(reply) = drv.take_reply() {
                match reply.result? {
                    ReplyData::Read(data) => {
                        std::hint::black_box(data);
                    }
                    other => drop(other),
                }
                replies += 1;
            }
            self.in_flight -= replies as usize;
            done += replies;
            if !moved && replies == 0 && done < submitted {
                panic!(
                    "FTL stalled with {} requests unanswered: {}",
                    submitted - done,
                    drv.ftl().debug_state()
                );
            }
            if done >= next_tick {
                next_tick = done + self.tick_every;
                stopping |= !tick(drv, done);
            }
        }
        tick(drv, done);
        Ok(done)
    }
}
