//! Thread-safe embedding handles: a blocking [`Handle`] and an async
//! [`AsyncHandle`], both talking to one **driver thread** that owns a
//! [`Driver`] (and so the backend and the sans-IO core).
//!
//! ```text
//!   Handle / AsyncHandle clones ──► bounded request channel ──► driver thread
//!          ▲                                                     │ Driver<B>
//!          └──────────────── one-shot reply per request ◄────────┘
//! ```
//!
//! The driver thread takes requests off the channel without blocking, hands
//! them to the core ([`Driver::try_submit`]), turns the loop
//! ([`Driver::turn_nowait`]) and hands every finished reply
//! ([`Driver::take_reply`]) to its waiter. When nothing moves it waits on the
//! device if commands are in flight, and otherwise sleeps on the channel.
//! Many requests are in the core at once, so clones used from many threads
//! (or many tasks) keep the device's queue full.
//!
//! A write's data CRCs are taken by the caller, in [`Handle::call`] and
//! [`AsyncHandle::call`] ([`Request::WriteSummed`]), while at least
//! [`CALLER_SUMS_FROM_QUEUED`] messages wait for the driver thread: the CRC
//! is most of what the core spends per byte, and callers on many threads
//! share it out instead of queueing it on the one driver thread. With
//! fewer waiting, the driver thread is short of work, and a write goes to
//! it as it is: the core takes its CRCs in time it would otherwise spend
//! waiting, and the caller can make its next request sooner. So the CRCs
//! go to whichever side has CPU to spare (the figures: `docs/zns.md`,
//! "What sets the defaults").
//!
//! # Bounded queues
//!
//! The request channel holds at most [`DEFAULT_QUEUE_CAPACITY`] requests
//! (or the capacity given to [`Handle::spawn_with_capacity`]). When it is
//! full, blocking callers block and async callers wait; nothing grows. When
//! the core answers [`IoError::Busy`] the thread keeps that one request and
//! stops taking new ones until the core accepts it.
//!
//! # Errors
//!
//! Requests answer with the core's typed [`IoError`]s (bad input such as
//! [`IoError::OutOfRange`] or [`IoError::BufferSize`], media errors, ...).
//! Two situations have no variant of their own and answer
//! [`IoError::DeviceGone`]:
//!
//! - **the device is lost**: once the loop reports the device gone (a power
//!   cut, a removed drive), every waiting request and every later request
//!   fails with `DeviceGone` (also those the core would answer `ReadOnly`
//!   because the metadata write died with the device, and reads it could
//!   still serve from its write buffer); nothing hangs. [`Handle::stats`] still
//!   answers; [`Handle::shutdown`] then fails and [`Handle::into_backend`]
//!   still returns the backend (to remount it after power returns);
//! - **the handle is closed**: after any clone called [`Handle::shutdown`]
//!   or [`Handle::into_backend`] (or the driver thread died), every call on
//!   the other clones fails with `DeviceGone`. [`Handle::is_closed`] tells
//!   the two apart.
//!
//! # Shutdown and drop
//!
//! - [`Handle::shutdown`] / [`AsyncHandle::shutdown`]: clean unmount. Requests
//!   already queued are still served, then the driver flushes, writes a
//!   checkpoint and hands the backend back; the thread stops.
//! - [`Handle::into_backend`]: a crash. Waiting requests fail with
//!   `DeviceGone`, nothing is written, the backend comes back as it is.
//! - Dropping the **last** clone without a shutdown: the thread serves what
//!   is still queued, **flushes** (every acknowledged write becomes durable)
//!   but writes **no checkpoint**, drops the backend and stops; the drop
//!   waits for that. The next mount rolls the metadata log forward from the
//!   last checkpoint, so nothing is lost but mount takes a little longer —
//!   like an unmount without its final checkpoint. Call `shutdown` to get
//!   the backend back and keep mounts fast.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
use zftl_core::addr::Lba;
use zftl_core::fork::Fork;
use zftl_core::history::{Snapshot, SnapshotError, SnapshotId};
use zftl_core::range;
use zftl_core::tag::{DataCrcImpl, SummedBlocks};
use zftl_core::{
    changed_runs, diff_requests, fork_create_request, fork_data, fork_named, join_runs,
    nameless_events, nameless_request, snapshot_create_request, snapshot_data,
    snapshot_revert_request,
};
use zftl_core::{
    Attribute, Backend, Driver, FormatOptions, FtlConfig, FtlStats, Geometry, IoError, MergePolicy,
    MountError, NamelessAddr, NamelessEvent, RangeOp, ReplyData, Request,
};

/// The snapshot named `name` among `snapshots`.
fn named(snapshots: Vec<Snapshot>, name: &str) -> Result<Snapshot, IoError> {
    snapshots
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| SnapshotError::NoSuchName(name.to_string()).into())
}

/// The ids of the snapshots a diff names (`until` `None`: the live volume).
fn diff_ids(
    snapshots: Vec<Snapshot>,
    since: &str,
    until: Option<&str>,
) -> Result<(SnapshotId, Option<SnapshotId>), IoError> {
    let until = match until {
        Some(name) => Some(named(snapshots.clone(), name)?.id),
        None => None,
    };
    Ok((named(snapshots, since)?.id, until))
}

/// Requests the channel to the driver thread holds before callers wait.
pub const DEFAULT_QUEUE_CAPACITY: usize = 256;

/// Messages waiting for the driver thread from which a caller takes a
/// write's data CRCs itself; below it the driver thread takes them (see
/// the module docs). A few, so that the driver thread still has work
/// queued while it sums one write.
pub const CALLER_SUMS_FROM_QUEUED: usize = 4;

/// Whether a caller takes a write's data CRCs itself while `queued`
/// messages wait for the driver thread (see the module docs). Callers
/// that drive a `Driver` themselves can use it too.
pub fn caller_sums(queued: usize) -> bool {
    queued >= CALLER_SUMS_FROM_QUEUED
}

/// Messages taken off the channel per loop turn, so a busy channel cannot
/// starve the device.
const INTAKE_BATCH: usize = 64;

/// The thread's request ids start here, far from the ids `Driver` hands out
/// for its own blocking calls (flush and checkpoint at shutdown).
const ID_BASE: u64 = 1 << 62;

type Answer = oneshot::Sender<Result<ReplyData, IoError>>;

enum Msg<B> {
    Io { request: Request, answer: Answer },
    Stats(oneshot::Sender<FtlStats>),
    Attributes(oneshot::Sender<Vec<(Lba, u64, u8)>>),
    Snapshots(oneshot::Sender<Vec<Snapshot>>),
    Forks(oneshot::Sender<Vec<Fork>>),
    Shutdown(oneshot::Sender<Result<B, IoError>>),
    IntoBackend(oneshot::Sender<B>),
}

/// What the clones share: the thread, joined when the last clone goes.
struct Shared {
    thread: Mutex<Option<JoinHandle<()>>>,
    block_size: usize,
    logical_blocks: u64,
    /// The core's data CRC implementation, which callers take a write's
    /// CRCs with.
    data_crc: DataCrcImpl,
}

impl Shared {
    fn take_thread(&self) -> Option<JoinHandle<()>> {
        self.thread.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Drop for Shared {
    /// Runs after every clone dropped its sender (see `Link`'s field order),
    /// so the thread sees the channel closed, flushes and stops.
    fn drop(&mut self) {
        if let Some(thread) = self.take_thread() {
            let _ = thread.join();
        }
    }
}

/// One clone's connection. Field order matters: the sender is dropped
/// before the shared part, so the last `Shared` drop joins a thread that
/// already sees the channel closed.
struct Link<B> {
    tx: mpsc::Sender<Msg<B>>,
    shared: Arc<Shared>,
}

impl<B> Clone for Link<B> {
    fn clone(&self) -> Self {
        Link {
            tx: self.tx.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B> Link<B> {
    /// A write with its data CRCs taken here, on the caller's thread, so
    /// the driver thread does not pay them, unless the driver thread is
    /// short of work; other requests as they are.
    fn sum_on_caller(&self, request: Request) -> Result<Request, IoError> {
        Ok(match request {
            Request::Write { lba, data, fua } if caller_sums(self.queued()) => {
                Request::WriteSummed {
                    lba,
                    blocks: SummedBlocks::new(data, self.shared.block_size, self.shared.data_crc)?,
                    fua,
                }
            }
            other => other,
        })
    }

    /// Messages sent that the driver thread has not taken yet.
    fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

fn closed<T>(_: T) -> IoError {
    IoError::DeviceGone
}

fn read_data(reply: ReplyData) -> Vec<u8> {
    match reply {
        ReplyData::Read(data) => data,
        other => unreachable!("read answered with {other:?}"),
    }
}

fn nameless_addrs(reply: ReplyData) -> Vec<NamelessAddr> {
    match reply {
        ReplyData::Addrs(addrs) => addrs,
        other => unreachable!("nameless write answered with {other:?}"),
    }
}

fn nameless_block(reply: ReplyData) -> (Vec<u8>, Vec<u8>) {
    match reply {
        ReplyData::NamelessBlock { data, md } => (data, md),
        other => unreachable!("nameless read answered with {other:?}"),
    }
}

/// The request methods of the handles, written once for the blocking
/// ([`Handle`], [`InlineHandle`]) and the async ([`AsyncHandle`]) ones:
/// each builds its [`Request`], hands it to `self.call` (awaited on the
/// async handle) and maps the reply, or asks the driver thread with
/// `self.ask`. Inside an `impl` block, `request_methods!(sync { ... })`
/// or `request_methods!(async { ... })` lists the methods to write, each
/// name after the docs it is to have; `request_methods!(async, each see
/// Handle { ... })` gives each docs that point to [`Handle`]'s method of
/// the same name.
macro_rules! request_methods {
    (sync { $($(#[$doc:meta])* $name:ident;)* }) => {
        $(request_methods!(@ [] [] $(#[$doc])* $name);)*
    };
    (async { $($(#[$doc:meta])* $name:ident;)* }) => {
        $(request_methods!(@ [async] [.await] $(#[$doc])* $name);)*
    };
    (async, each see Handle { $($name:ident)* }) => {
        $(request_methods!(
            @ [async] [.await] #[doc = concat!(" See [`Handle::", stringify!($name), "`].")] $name
        );)*
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* read) => {
        $(#[$doc])*
        pub $($fn)? fn read(&self, lba: Lba, block_count: u32) -> Result<Vec<u8>, IoError> {
            self.call(Request::Read { lba, block_count })$($aw)*.map(read_data)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* write) => {
        $(#[$doc])*
        pub $($fn)? fn write(&self, lba: Lba, data: &[u8]) -> Result<(), IoError> {
            let data = data.to_vec();
            self.call(Request::Write { lba, data, fua: false })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* write_fua) => {
        $(#[$doc])*
        pub $($fn)? fn write_fua(&self, lba: Lba, data: &[u8]) -> Result<(), IoError> {
            let data = data.to_vec();
            self.call(Request::Write { lba, data, fua: true })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* trim) => {
        $(#[$doc])*
        pub $($fn)? fn trim(&self, lba: Lba, block_count: u32) -> Result<(), IoError> {
            self.call(Request::Trim { lba, block_count })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* write_zeroes) => {
        $(#[$doc])*
        pub $($fn)? fn write_zeroes(&self, lba: Lba, block_count: u32) -> Result<(), IoError> {
            let request = Request::WriteZeroes { lba, block_count, fua: false };
            self.call(request)$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* nameless_write) => {
        $(#[$doc])*
        pub $($fn)? fn nameless_write(
            &self,
            data: &[u8],
            md: &[u8],
        ) -> Result<Vec<NamelessAddr>, IoError> {
            self.call(nameless_request(None, data, md, false))$($aw)*.map(nameless_addrs)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* nameless_write_fua) => {
        $(#[$doc])*
        pub $($fn)? fn nameless_write_fua(
            &self,
            data: &[u8],
            md: &[u8],
        ) -> Result<Vec<NamelessAddr>, IoError> {
            self.call(nameless_request(None, data, md, true))$($aw)*.map(nameless_addrs)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* nameless_overwrite) => {
        $(#[$doc])*
        pub $($fn)? fn nameless_overwrite(
            &self,
            old: &[NamelessAddr],
            data: &[u8],
            md: &[u8],
        ) -> Result<Vec<NamelessAddr>, IoError> {
            self.call(nameless_request(Some(old), data, md, false))$($aw)*.map(nameless_addrs)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* nameless_read) => {
        $(#[$doc])*
        pub $($fn)? fn nameless_read(
            &self,
            addr: NamelessAddr,
        ) -> Result<(Vec<u8>, Vec<u8>), IoError> {
            self.call(Request::NamelessRead { addr })$($aw)*.map(nameless_block)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* nameless_free) => {
        $(#[$doc])*
        pub $($fn)? fn nameless_free(&self, addrs: &[NamelessAddr]) -> Result<(), IoError> {
            let addrs = addrs.to_vec();
            self.call(Request::NamelessFree { addrs })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* nameless_ack) => {
        $(#[$doc])*
        pub $($fn)? fn nameless_ack(&self, olds: &[NamelessAddr]) -> Result<(), IoError> {
            let olds = olds.to_vec();
            self.call(Request::NamelessAck { olds })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* nameless_commit) => {
        $(#[$doc])*
        pub $($fn)? fn nameless_commit(&self) -> Result<(), IoError> {
            self.call(Request::NamelessCommit)$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* next_events) => {
        $(#[$doc])*
        pub $($fn)? fn next_events(&self, max: usize) -> Result<Vec<NamelessEvent>, IoError> {
            self.call(Request::NamelessEvents { max })$($aw)*.map(nameless_events)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* flush) => {
        $(#[$doc])*
        pub $($fn)? fn flush(&self) -> Result<(), IoError> {
            self.call(Request::Flush)$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* range_ops) => {
        $(#[$doc])*
        pub $($fn)? fn range_ops(&self, ops: Vec<RangeOp>) -> Result<(), IoError> {
            self.call(Request::Range { ops })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* clone_ranges) => {
        $(#[$doc])*
        pub $($fn)? fn clone_ranges(&self, ranges: &[(Lba, Lba, u64)]) -> Result<(), IoError> {
            self.range_ops(range::clones(ranges))$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* move_ranges) => {
        $(#[$doc])*
        pub $($fn)? fn move_ranges(&self, ranges: &[(Lba, Lba, u64)]) -> Result<(), IoError> {
            self.range_ops(range::moves(ranges))$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* delete_ranges) => {
        $(#[$doc])*
        pub $($fn)? fn delete_ranges(&self, ranges: &[(Lba, u64)]) -> Result<(), IoError> {
            self.range_ops(range::deletes(ranges))$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* merge) => {
        $(#[$doc])*
        pub $($fn)? fn merge(
            &self,
            sources: &[Lba],
            dst: Lba,
            block_count: u64,
            policy: MergePolicy,
        ) -> Result<(), IoError> {
            self.range_ops(vec![range::merge(sources, dst, block_count, policy)])$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* set_attribute) => {
        $(#[$doc])*
        pub $($fn)? fn set_attribute(
            &self,
            ranges: &[(Lba, u64)],
            attribute: Attribute,
        ) -> Result<(), IoError> {
            self.range_ops(range::attributes(ranges, attribute))$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* stats) => {
        $(#[$doc])*
        pub $($fn)? fn stats(&self) -> Result<FtlStats, IoError> {
            self.ask(Msg::Stats)$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* attributes) => {
        $(#[$doc])*
        pub $($fn)? fn attributes(&self) -> Result<Vec<(Lba, u64, u8)>, IoError> {
            self.ask(Msg::Attributes)$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* snapshot_create) => {
        $(#[$doc])*
        pub $($fn)? fn snapshot_create(&self, name: &str) -> Result<Snapshot, IoError> {
            self.call(snapshot_create_request(name))$($aw)*.map(snapshot_data)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* snapshot_delete) => {
        $(#[$doc])*
        pub $($fn)? fn snapshot_delete(&self, name: &str) -> Result<(), IoError> {
            let id = named(self.snapshots()$($aw)*?, name)?.id;
            self.call(Request::SnapshotDelete { id })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* snapshot_revert) => {
        $(#[$doc])*
        pub $($fn)? fn snapshot_revert(
            &self,
            to: &str,
            undo: Option<&str>,
        ) -> Result<Snapshot, IoError> {
            let to = named(self.snapshots()$($aw)*?, to)?.id;
            self.call(snapshot_revert_request(to, undo))$($aw)*.map(snapshot_data)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* snapshots) => {
        $(#[$doc])*
        pub $($fn)? fn snapshots(&self) -> Result<Vec<Snapshot>, IoError> {
            self.ask(Msg::Snapshots)$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* fork_create) => {
        $(#[$doc])*
        pub $($fn)? fn fork_create(&self, snapshot: &str, fork: &str) -> Result<Fork, IoError> {
            let base = named(self.snapshots()$($aw)*?, snapshot)?.id;
            self.call(fork_create_request(base, fork))$($aw)*.map(fork_data)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* fork_delete) => {
        $(#[$doc])*
        pub $($fn)? fn fork_delete(&self, name: &str) -> Result<(), IoError> {
            let id = fork_named(&self.forks()$($aw)*?, name)?.id;
            self.call(Request::ForkDelete { id })$($aw)*.map(drop)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* forks) => {
        $(#[$doc])*
        pub $($fn)? fn forks(&self) -> Result<Vec<Fork>, IoError> {
            self.ask(Msg::Forks)$($aw)*
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* changed) => {
        $(#[$doc])*
        pub $($fn)? fn changed(
            &self,
            since: SnapshotId,
            until: Option<SnapshotId>,
            lba: Lba,
            block_count: u32,
        ) -> Result<Vec<(Lba, u64)>, IoError> {
            let request = Request::Changed { since, until, lba, block_count };
            self.call(request)$($aw)*.map(changed_runs)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* snapshot_diff) => {
        $(#[$doc])*
        pub $($fn)? fn snapshot_diff(
            &self,
            since: &str,
            until: Option<&str>,
        ) -> Result<Vec<(Lba, u64)>, IoError> {
            let (since, until) = diff_ids(self.snapshots()$($aw)*?, since, until)?;
            let mut runs = Vec::new();
            for request in diff_requests(since, until, self.logical_blocks()) {
                join_runs(&mut runs, self.call(request)$($aw)*.map(changed_runs)?);
            }
            Ok(runs)
        }
    };
    (@ [$($fn:tt)?] [$($aw:tt)*] $(#[$doc:meta])* read_snapshot) => {
        $(#[$doc])*
        pub $($fn)? fn read_snapshot(
            &self,
            snapshot: SnapshotId,
            lba: Lba,
            block_count: u32,
        ) -> Result<Vec<u8>, IoError> {
            let request = Request::ReadSnapshot { snapshot, lba, block_count };
            self.call(request)$($aw)*.map(read_data)
        }
    };
}

/// A blocking, cloneable, `Send + Sync` handle to an FTL run by a driver
/// thread. See the [module docs](self) for errors, shutdown and drop.
///
/// Every method blocks the calling thread until its reply arrives; many
/// threads may call through clones at once, and their requests are in the
/// core together. Do not call it from async code (tokio panics when a
/// runtime thread blocks on its channels): use [`AsyncHandle`] there.
///
/// ```
/// use zftl::core::{Driver, FormatOptions, FtlConfig};
/// use zftl::handle::Handle;
/// use zftl::sim::{SimConfig, SimDevice};
///
/// let device = SimDevice::create_memory(SimConfig::small_for_tests())?;
/// let ftl = Handle::format(device, &FormatOptions::default(), FtlConfig::default())?;
/// let bs = ftl.block_size();
///
/// // Clones share the driver thread; use them from any thread.
/// let writers: Vec<_> = (0..4u8)
///     .map(|i| {
///         let ftl = ftl.clone();
///         std::thread::spawn(move || ftl.write(u64::from(i) * 8, &vec![i; 8 * bs]))
///     })
///     .collect();
/// for w in writers {
///     w.join().unwrap()?;
/// }
/// ftl.flush()?;
/// assert_eq!(ftl.read(16, 8)?, vec![2; 8 * bs]);
///
/// // Bad input comes back as a typed error.
/// let past_end = ftl.logical_blocks();
/// assert!(matches!(
///     ftl.read(past_end, 1),
///     Err(zftl::core::IoError::OutOfRange { .. })
/// ));
///
/// // Clean unmount hands the device back; mount it again.
/// let device = ftl.shutdown()?;
/// let mut again = Driver::mount(device, FtlConfig::default())?;
/// assert_eq!(again.read(0, 1)?, vec![0; bs]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Handle<B> {
    link: Link<B>,
}

impl<B> Clone for Handle<B> {
    fn clone(&self) -> Self {
        Handle {
            link: self.link.clone(),
        }
    }
}

impl<B> std::fmt::Debug for Handle<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("block_size", &self.link.shared.block_size)
            .field("logical_blocks", &self.link.shared.logical_blocks)
            .field("closed", &self.link.tx.is_closed())
            .finish()
    }
}

impl<B: Backend + Send + 'static> Handle<B> {
    /// Formats `backend` (on the calling thread) and starts a driver thread
    /// on the empty volume.
    pub fn format(
        backend: B,
        options: &FormatOptions,
        config: FtlConfig,
    ) -> Result<Handle<B>, MountError> {
        let limit = config.max_host_requests as usize;
        let driver = Driver::format(backend, options, config)?;
        Ok(Handle::start(driver, DEFAULT_QUEUE_CAPACITY, Some(limit)))
    }

    /// Mounts `backend` (on the calling thread; recovery runs here) and
    /// starts a driver thread.
    pub fn mount(backend: B, config: FtlConfig) -> Result<Handle<B>, MountError> {
        let limit = config.max_host_requests as usize;
        let driver = Driver::mount(backend, config)?;
        Ok(Handle::start(driver, DEFAULT_QUEUE_CAPACITY, Some(limit)))
    }

    /// Starts a driver thread on an already formatted or mounted driver.
    pub fn spawn(driver: Driver<B>) -> Handle<B> {
        Handle::start(driver, DEFAULT_QUEUE_CAPACITY, None)
    }

    /// Like [`Self::spawn`] with a request channel of `capacity` (≥ 1)
    /// requests instead of [`DEFAULT_QUEUE_CAPACITY`].
    pub fn spawn_with_capacity(driver: Driver<B>, capacity: usize) -> Handle<B> {
        Handle::start(driver, capacity.max(1), None)
    }

    fn start(driver: Driver<B>, capacity: usize, limit: Option<usize>) -> Handle<B> {
        let (tx, rx) = mpsc::channel(capacity);
        let block_size = driver.block_size();
        let logical_blocks = driver.logical_blocks();
        let data_crc = driver.data_crc();
        let thread = std::thread::Builder::new()
            .name("zftl-driver".into())
            .spawn(move || Engine::new(driver, rx, limit).run())
            .expect("spawning the zftl driver thread");
        Handle {
            link: Link {
                tx,
                shared: Arc::new(Shared {
                    thread: Mutex::new(Some(thread)),
                    block_size,
                    logical_blocks,
                    data_crc,
                }),
            },
        }
    }
}

impl<B: Send + 'static> Handle<B> {
    /// Sends the driver thread the message `msg` makes of an answer's
    /// sender, and waits for the answer.
    fn ask<T>(&self, msg: impl FnOnce(oneshot::Sender<T>) -> Msg<B>) -> Result<T, IoError> {
        let (answer, reply) = oneshot::channel();
        self.link.tx.blocking_send(msg(answer)).map_err(closed)?;
        reply.blocking_recv().map_err(closed)
    }

    /// Sends any [`Request`] and waits for its reply (the escape hatch for
    /// owned buffers: a `Request::Write` is not copied again). A write's
    /// data CRCs are taken here, on the calling thread, unless the driver
    /// thread is short of work (see the module docs).
    pub fn call(&self, request: Request) -> Result<ReplyData, IoError> {
        let request = self.link.sum_on_caller(request)?;
        self.ask(|answer| Msg::Io { request, answer })?
    }

    request_methods!(sync {
        /// Reads `block_count` blocks from `lba`.
        read;
        /// Writes whole blocks from `lba`; acknowledged once buffered (durable
        /// after the next [`Self::flush`]).
        write;
        /// Write with force-unit-access: durable when this returns.
        write_fua;
        /// Persistent trim: reads return zeros.
        trim;
        /// Reads return zeros; costs a note, no data writes.
        write_zeroes;
        /// Makes every acknowledged write, trim and zeroing durable.
        flush;
        /// Writes whole blocks to the physical segment, each with
        /// [`zftl_core::NAMELESS_MD_BYTES`] of `md`; returns their addresses (see
        /// [`Driver::nameless_write`]). Durable after the next [`Self::flush`].
        nameless_write;
        /// [`Self::nameless_write`], durable when this returns.
        nameless_write_fua;
        /// Writes blocks that replace (free) `old`, one address per block:
        /// a power cut keeps each new block and its free, or neither.
        nameless_overwrite;
        /// Reads a block of the physical segment: its data and metadata.
        nameless_read;
        /// Frees blocks of the physical segment (all or none); durable after
        /// the next [`Self::flush`].
        nameless_free;
        /// Says every address given by reply or event is recorded: the
        /// blocks of the nameless writes answered before it are not handed
        /// over after a power cut any more (see [`Driver::nameless_commit`]).
        nameless_commit;
        /// Acknowledges `NamelessEvent::Migrated` events by their old
        /// addresses; returns once durable (see [`Driver::nameless_ack`]).
        nameless_ack;
        /// Up to `max` events ([`NamelessEvent`]): waits until one is
        /// ready, or returns none once none can come. Several callers may
        /// wait; each event goes to one.
        next_events;
        /// Applies a vector of range operations as one atomic unit; returns
        /// once it is durable (see [`zftl_core::range`]).
        range_ops;
        /// `(src, dst, block_count)`: each `dst` range names what its `src`
        /// names, without copying data; one atomic, durable vector.
        clone_ranges;
        /// `(src, dst, block_count)`: each `dst` range takes what its `src`
        /// named and `src` reads as zeros; one atomic, durable vector.
        move_ranges;
        /// `(lba, block_count)`: a persistent trim of each range, atomic and durable.
        delete_ranges;
        /// Merges `sources` into `dst` (see [`RangeOp::Merge`]).
        merge;
        /// Sets or clears `attribute` on each `(lba, block_count)` range, atomically.
        set_attribute;
        /// The core's statistics, taken on the driver thread. Still answers
        /// after the device is gone; `DeviceGone` once the handle is closed.
        stats;
        /// The range attributes, `(lba, block_count, bits)` runs in order
        /// (bits: [`zftl_core::range::attr_bits`]), taken on the driver thread.
        /// Like [`Self::stats`], still answers after the device is gone.
        attributes;
        /// Takes a snapshot named `name` of every write acknowledged before
        /// this call; returns it once durable (see [`Driver::snapshot_create`]).
        snapshot_create;
        /// Deletes the snapshot named `name`; returns once durable.
        snapshot_delete;
        /// Makes the live volume what the snapshot named `to` holds, first
        /// taking a snapshot of the state it leaves (`undo`, default
        /// `undo-ID`); returns that undo snapshot once durable (see
        /// [`zftl_core::Driver::snapshot_revert`]).
        snapshot_revert;
        /// The live snapshots, oldest first, taken on the driver thread.
        snapshots;
        /// Creates a writable fork named `fork` of the snapshot named
        /// `snapshot`; returns it once durable (see [`Driver::fork_create`]).
        /// Its blocks are read, written and trimmed with the ordinary calls
        /// at [`Fork::lba_offset`] + block.
        fork_create;
        /// Deletes the fork named `name`; returns once durable.
        fork_delete;
        /// The live forks, taken on the driver thread.
        forks;
        /// The runs `(lba, block_count)` of the range whose contents differ
        /// between snapshot `since` and `until` (`None`: the live volume, its
        /// buffered writes included). At most `MAX_EXTENT_QUERY_BLOCKS` blocks
        /// per call; costs what changed, not the range.
        changed;
        /// Every run of blocks that differs between the snapshots named
        /// `since` and `until` (`None`: the live volume), in order. Against the
        /// live volume each query of the volume's `MAX_EXTENT_QUERY_BLOCKS`
        /// sees the writes answered before it.
        snapshot_diff;
        /// Reads `block_count` blocks from `lba` as snapshot `snapshot` holds
        /// them.
        read_snapshot;
    });

    /// Clean unmount: serves what is queued, flushes, writes a checkpoint,
    /// stops the driver thread and returns the backend. Other clones fail
    /// with [`IoError::DeviceGone`] afterwards. Fails with `DeviceGone` when
    /// the handle is already closed or the device was lost (then the backend
    /// is dropped; use [`Self::into_backend`] to keep it).
    pub fn shutdown(self) -> Result<B, IoError> {
        let result = self.ask(Msg::Shutdown).and_then(|shut| shut);
        if let Some(thread) = self.link.shared.take_thread() {
            let _ = thread.join();
        }
        result
    }

    /// Stops the driver thread without writing anything, as a crash would,
    /// and returns the backend as it is (commands may still be in flight on
    /// it). Waiting requests fail with [`IoError::DeviceGone`]. Works after
    /// the device was lost; fails with `DeviceGone` when the handle is
    /// already closed.
    pub fn into_backend(self) -> Result<B, IoError> {
        let result = self.ask(Msg::IntoBackend);
        if let Some(thread) = self.link.shared.take_thread() {
            let _ = thread.join();
        }
        result
    }

    /// An async handle on the same driver thread.
    pub fn to_async(&self) -> AsyncHandle<B> {
        AsyncHandle {
            link: self.link.clone(),
        }
    }
}

impl<B> Handle<B> {
    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.link.shared.block_size
    }

    /// Size of the logical space in blocks.
    pub fn logical_blocks(&self) -> u64 {
        self.link.shared.logical_blocks
    }

    /// Whether the driver thread has stopped taking requests (a clone shut
    /// it down or took the backend, or the thread died). A lost device does
    /// not close the handle.
    pub fn is_closed(&self) -> bool {
        self.link.tx.is_closed()
    }
}

/// The async twin of [`Handle`]: the same operations as `async fn`s, on
/// the same driver thread. Cloneable, `Send + Sync`, and tied to no runtime
/// (it only uses `tokio::sync` channels, which work on any executor).
///
/// Get one with [`Handle::to_async`] or `AsyncHandle::from(handle)`;
/// format and mount block, so do them before entering async code or in
/// `spawn_blocking`. Dropping the last clone (of either kind) joins the
/// driver thread after its final flush; prefer [`Self::shutdown`] inside a
/// runtime.
///
/// ```
/// use zftl::core::{FormatOptions, FtlConfig};
/// use zftl::handle::{AsyncHandle, Handle};
/// use zftl::sim::{SimConfig, SimDevice};
///
/// let device = SimDevice::create_memory(SimConfig::small_for_tests())?;
/// let ftl = Handle::format(device, &FormatOptions::default(), FtlConfig::default())?;
/// let ftl = AsyncHandle::from(ftl);
///
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// let device = runtime.block_on(async move {
///     let bs = ftl.block_size();
///     let tasks: Vec<_> = (0..4u8)
///         .map(|i| {
///             let ftl = ftl.clone();
///             tokio::spawn(async move { ftl.write(u64::from(i), &vec![i; bs]).await })
///         })
///         .collect();
///     for t in tasks {
///         t.await.unwrap()?;
///     }
///     ftl.flush().await?;
///     assert_eq!(ftl.read(3, 1).await?, vec![3; bs]);
///     ftl.shutdown().await
/// })?;
/// # drop(device);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AsyncHandle<B> {
    link: Link<B>,
}

impl<B> Clone for AsyncHandle<B> {
    fn clone(&self) -> Self {
        AsyncHandle {
            link: self.link.clone(),
        }
    }
}

impl<B> std::fmt::Debug for AsyncHandle<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncHandle")
            .field("block_size", &self.link.shared.block_size)
            .field("logical_blocks", &self.link.shared.logical_blocks)
            .field("closed", &self.link.tx.is_closed())
            .finish()
    }
}

impl<B> From<Handle<B>> for AsyncHandle<B> {
    fn from(handle: Handle<B>) -> Self {
        AsyncHandle { link: handle.link }
    }
}

impl<B> From<AsyncHandle<B>> for Handle<B> {
    fn from(handle: AsyncHandle<B>) -> Self {
        Handle { link: handle.link }
    }
}

impl<B: Send + 'static> AsyncHandle<B> {
    /// Sends the driver thread the message `msg` makes of an answer's
    /// sender, and awaits the answer.
    async fn ask<T>(&self, msg: impl FnOnce(oneshot::Sender<T>) -> Msg<B>) -> Result<T, IoError> {
        let (answer, reply) = oneshot::channel();
        self.link.tx.send(msg(answer)).await.map_err(closed)?;
        reply.await.map_err(closed)
    }

    /// Sends any [`Request`] and awaits its reply. A write's data CRCs are
    /// taken here, on the calling task, unless the driver thread is short
    /// of work (see the module docs).
    pub async fn call(&self, request: Request) -> Result<ReplyData, IoError> {
        let request = self.link.sum_on_caller(request)?;
        self.ask(|answer| Msg::Io { request, answer }).await?
    }

    request_methods!(async, each see Handle {
        read write write_fua trim write_zeroes flush nameless_write nameless_write_fua
        nameless_overwrite nameless_read nameless_free nameless_commit nameless_ack next_events range_ops clone_ranges move_ranges
        delete_ranges merge set_attribute stats attributes snapshot_create snapshot_delete
        snapshot_revert snapshots fork_create fork_delete forks changed snapshot_diff
        read_snapshot
    });

    /// See [`Handle::shutdown`]. The driver thread is not joined (that
    /// would block the executor); it has nothing left to do once the
    /// backend is handed back.
    pub async fn shutdown(self) -> Result<B, IoError> {
        let result = self.ask(Msg::Shutdown).await?;
        drop(self.link.shared.take_thread());
        result
    }

    /// See [`Handle::into_backend`]; like [`Self::shutdown`] it does not
    /// join the thread.
    pub async fn into_backend(self) -> Result<B, IoError> {
        let result = self.ask(Msg::IntoBackend).await;
        drop(self.link.shared.take_thread());
        result
    }

    /// A blocking handle on the same driver thread.
    pub fn to_blocking(&self) -> Handle<B> {
        Handle {
            link: self.link.clone(),
        }
    }
}

impl<B> AsyncHandle<B> {
    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.link.shared.block_size
    }

    /// Size of the logical space in blocks.
    pub fn logical_blocks(&self) -> u64 {
        self.link.shared.logical_blocks
    }

    /// See [`Handle::is_closed`].
    pub fn is_closed(&self) -> bool {
        self.link.tx.is_closed()
    }
}

// ----- the driver thread ------------------------------------------------------

/// Why the thread is winding down.
enum Ending<B> {
    /// Every clone dropped: serve what is left, flush, stop.
    Dropped,
    /// Serve what is queued, then `Driver::shutdown`.
    Shutdown(oneshot::Sender<Result<B, IoError>>),
    /// Fail what waits, hand the backend back as it is.
    Crash(oneshot::Sender<B>),
}

struct Engine<B: Backend> {
    driver: Driver<B>,
    rx: mpsc::Receiver<Msg<B>>,
    /// Requests in the core, by id.
    waiters: HashMap<u64, Answer>,
    next_id: u64,
    /// A request the core answered `Busy` to; no intake until it is taken.
    backlog: Option<(u64, Request, Answer)>,
    /// The core's `max_host_requests` when known: below it `try_submit`
    /// cannot answer `Busy`, so a request need not be kept for a retry.
    limit: Option<usize>,
    /// Set once the loop reported the device lost.
    gone: bool,
    /// The channel is closed and empty.
    intake_done: bool,
    ending: Option<Ending<B>>,
}

impl<B: Backend> Engine<B> {
    fn new(driver: Driver<B>, rx: mpsc::Receiver<Msg<B>>, limit: Option<usize>) -> Self {
        Engine {
            driver,
            rx,
            waiters: HashMap::new(),
            next_id: ID_BASE,
            backlog: None,
            limit,
            gone: false,
            intake_done: false,
            ending: None,
        }
    }

    fn run(mut self) {
        loop {
            let mut moved = self.intake();
            if !self.gone {
                moved |= self.pump();
            }
            if self.intake_done && self.waiters.is_empty() && self.backlog.is_none() {
                self.finish();
                return;
            }
            if moved {
                continue;
            }
            if !self.gone && self.driver.device_in_flight() > 0 {
                if let Err(e) = self.driver.wait_device() {
                    self.fail_all(e);
                }
                continue;
            }
            if !self.gone && (!self.waiters.is_empty() || self.backlog.is_some()) {
                self.unstall();
                continue;
            }
            // Idle: sleep until the next message.
            debug_assert!(!self.intake_done, "finished above");
            match self.rx.blocking_recv() {
                Some(msg) => self.accept(msg),
                None => self.channel_closed(),
            }
        }
    }

    /// Takes messages off the channel while the core takes requests.
    fn intake(&mut self) -> bool {
        let mut moved = false;
        for _ in 0..INTAKE_BATCH {
            if self.intake_done || self.backlog.is_some() {
                break;
            }
            match self.rx.try_recv() {
                Ok(msg) => {
                    self.accept(msg);
                    moved = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.channel_closed();
                    break;
                }
            }
        }
        moved
    }

    fn channel_closed(&mut self) {
        self.intake_done = true;
        if self.ending.is_none() {
            self.ending = Some(Ending::Dropped);
        }
    }

    fn accept(&mut self, msg: Msg<B>) {
        match msg {
            Msg::Io { request, answer } => {
                if self.gone {
                    let _ = answer.send(Err(IoError::DeviceGone));
                } else {
                    let id = self.next_id;
                    self.next_id += 1;
                    self.submit(id, request, answer);
                }
            }
            Msg::Stats(answer) => {
                let _ = answer.send(self.driver.stats());
            }
            Msg::Attributes(answer) => {
                let _ = answer.send(self.driver.ftl().attributes());
            }
            Msg::Snapshots(answer) => {
                let _ = answer.send(self.driver.snapshots());
            }
            Msg::Forks(answer) => {
                let _ = answer.send(self.driver.forks());
            }
            Msg::Shutdown(answer) => {
                if self.ending.is_some() {
                    let _ = answer.send(Err(IoError::DeviceGone));
                } else {
                    self.ending = Some(Ending::Shutdown(answer));
                    self.rx.close();
                }
            }
            // While a shutdown is under way the answer is dropped, which the
            // caller sees as closed.
            Msg::IntoBackend(answer) => {
                if self.ending.is_none() {
                    self.crash(answer);
                }
            }
        }
    }

    /// Hands a request to the core; keeps it when the core is busy.
    fn submit(&mut self, id: u64, request: Request, answer: Answer) {
        let sure = self.limit.is_some_and(|l| self.waiters.len() < l);
        if sure {
            let result = self.driver.try_submit(id, request);
            self.submitted(id, result, answer);
            return;
        }
        match self.driver.try_submit(id, request.clone()) {
            Err(IoError::Busy) => self.backlog = Some((id, request, answer)),
            result => self.submitted(id, result, answer),
        }
    }

    fn submitted(&mut self, id: u64, result: Result<(), IoError>, answer: Answer) {
        match result {
            Ok(()) => {
                self.waiters.insert(id, answer);
            }
            Err(e) => {
                let _ = answer.send(Err(e));
            }
        }
    }

    /// Retries the backlog, turns the loop once, delivers replies.
    fn pump(&mut self) -> bool {
        let mut moved = false;
        if let Some((id, request, answer)) = self.backlog.take() {
            self.submit(id, request, answer);
            moved |= self.backlog.is_none();
        }
        match self.driver.turn_nowait() {
            Ok(m) => moved |= m,
            Err(e) => {
                self.fail_all(e);
                return true;
            }
        }
        // The core learns from completions that the device is gone. Some of
        // its answers then still say `ReadOnly` (a flush whose device flush
        // or log write died with the device); report the cause instead.
        let lost = moved && self.driver.ftl().failure() == Some(IoError::DeviceGone);
        while let Some(reply) = self.driver.take_reply() {
            if let Some(answer) = self.waiters.remove(&reply.id) {
                let result = match reply.result {
                    Err(IoError::ReadOnly) if lost => Err(IoError::DeviceGone),
                    other => other,
                };
                let _ = answer.send(result);
            }
            moved = true;
        }
        // Stop here too, rather than serving what the core still has in
        // memory (buffered blocks) from a device that is gone.
        if lost {
            self.fail_all(IoError::DeviceGone);
        }
        moved
    }

    /// Requests wait, nothing is in flight and nothing moved. A lost device
    /// says so when asked; anything else is a core bug, reported the way
    /// `Driver::wait_for` does (the panic closes the handle, so callers get
    /// `DeviceGone` instead of hanging).
    fn unstall(&mut self) {
        let result = self
            .driver
            .wait_device()
            .and_then(|()| self.driver.turn_nowait());
        match result {
            Ok(true) => {}
            Ok(false) => panic!(
                "zftl driver thread: FTL stalled with {} requests unanswered and nothing in flight: {}",
                self.waiters.len(),
                self.driver.ftl().debug_state()
            ),
            Err(e) => self.fail_all(e),
        }
    }

    /// The loop failed (device lost): every waiter gets the error, every
    /// later request `DeviceGone`.
    fn fail_all(&mut self, error: IoError) {
        self.gone = true;
        for (_, answer) in self.waiters.drain() {
            let _ = answer.send(Err(error.clone()));
        }
        if let Some((_, _, answer)) = self.backlog.take() {
            let _ = answer.send(Err(error));
        }
        while self.driver.take_reply().is_some() {}
    }

    /// `into_backend`: fail everything now, hand the backend back
    /// untouched once the channel is drained.
    fn crash(&mut self, answer: oneshot::Sender<B>) {
        self.ending = Some(Ending::Crash(answer));
        self.rx.close();
        self.fail_all(IoError::DeviceGone);
    }

    fn finish(self) {
        let Engine {
            driver,
            ending,
            gone,
            ..
        } = self;
        match ending {
            Some(Ending::Shutdown(answer)) => {
                let result = if gone {
                    Err(IoError::DeviceGone)
                } else {
                    driver.shutdown()
                };
                let _ = answer.send(result);
            }
            Some(Ending::Crash(answer)) => {
                let _ = answer.send(driver.into_backend());
            }
            Some(Ending::Dropped) | None => {
                if !gone {
                    let mut driver = driver;
                    let _ = driver.flush();
                }
            }
        }
    }
}

// ----- the inline handle ------------------------------------------------------

/// Most loop turns a call makes after its reply to send the write buffer's
/// full appends and move a running GC job or checkpoint along, so one
/// caller does a bounded share of the background work.
const MAX_FEED_TURNS: usize = 8;

/// Fewest queued bytes that make the inline handle send an append (or the
/// device's largest append, if smaller). Smaller appends leave the calling
/// thread sooner: the call that sends one also programs it, while the
/// requests behind it wait. 128 KiB ran 4 KiB random writes fastest of
/// 32 KiB to 512 KiB (docs/bench-nbd.md, "What sets the defaults").
const INLINE_APPEND_BYTES: u64 = 128 << 10;

/// Writes an append holds at least: after a write of N blocks the handle
/// waits for this many times N queued blocks (up to the device's largest
/// append) before it sends one, so large writes are not each followed by
/// their own append (docs/bench-nbd.md, "What sets the defaults").
const INLINE_APPEND_WRITES: usize = 4;

/// A cloneable handle that runs the [`Driver`] on the **calling** thread,
/// under a lock, instead of on a driver thread: a request costs no thread
/// hop and no wakeup. Meant for backends whose commands complete without
/// blocking the caller (the simulator, whose [`Backend::wait`] advances a
/// virtual clock); a device that blocks in `wait` belongs on [`Handle`]'s
/// thread.
///
/// Calls run one at a time: a call hands its request to the core, and turns
/// the loop only while its reply is not ready (a read, a flush, a write
/// waiting for buffer room). A buffered write is answered at once; the
/// buffer goes to the device in appends of 128 KiB or four times the last
/// write, whichever is larger (at most `Geometry::max_append_blocks`), each sent by the call that
/// completed it; a call also turns the loop after its reply while a GC job
/// or a checkpoint is under way. Blocks that never fill an append wait in
/// the buffer for the next flush (a FLUSH, a FUA write, shutdown, or the
/// final flush of the last clone's drop), as every buffered write does.
///
/// Errors and lifecycle follow [`Handle`]: a lost device fails this and
/// every later call with [`IoError::DeviceGone`]; a panic of the core
/// (a bug) closes the handle the same way; [`Self::shutdown`] flushes,
/// writes a checkpoint and returns the backend; dropping the last clone
/// without it flushes but writes no checkpoint.
pub struct InlineHandle<B: Backend> {
    shared: Arc<InlineShared<B>>,
}

impl<B: Backend> Clone for InlineHandle<B> {
    fn clone(&self) -> Self {
        InlineHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B: Backend> std::fmt::Debug for InlineHandle<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineHandle")
            .field("block_size", &self.shared.block_size)
            .field("logical_blocks", &self.shared.logical_blocks)
            .finish()
    }
}

struct InlineShared<B: Backend> {
    state: Mutex<Inline<B>>,
    block_size: usize,
    logical_blocks: u64,
}

impl<B: Backend> Drop for InlineShared<B> {
    /// The last clone went without a shutdown: make every acknowledged
    /// write durable, as [`Handle`]'s thread does.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let (Some(driver), false) = (state.driver.as_mut(), state.gone) {
            let _ = driver.flush();
        }
    }
}

struct Inline<B: Backend> {
    /// `None` once shut down.
    driver: Option<Driver<B>>,
    next_id: u64,
    /// Set once the device was reported lost.
    gone: bool,
    /// Queued blocks that make an append, set by each write
    /// ([`inline_append_blocks`]).
    append_blocks: usize,
    /// Requests started with [`InlineHandle::start`] and not yet taken
    /// (at most [`MAX_TICKETS`]).
    tickets: HashMap<u64, Ticket>,
}

/// Where a request started with [`InlineHandle::start`] stands.
enum Ticket {
    Waiting,
    /// Its caller went away ([`InlineHandle::forget`]): the reply is dropped.
    Abandoned,
    Done(Result<ReplyData, IoError>),
}

/// Requests [`InlineHandle::start`] may have outstanding at once.
pub const MAX_TICKETS: usize = 64;

/// Turns of the loop one [`InlineHandle::poll`] runs at most; it returns
/// after the first that moved anything.
const POLL_TURNS: usize = 4;

impl<B: Backend> InlineHandle<B> {
    /// Takes over an already formatted or mounted driver.
    pub fn new(driver: Driver<B>) -> InlineHandle<B> {
        let append_blocks = inline_append_blocks(driver.backend().geometry(), 0);
        InlineHandle {
            shared: Arc::new(InlineShared {
                block_size: driver.block_size(),
                logical_blocks: driver.logical_blocks(),
                state: Mutex::new(Inline {
                    driver: Some(driver),
                    next_id: ID_BASE,
                    gone: false,
                    append_blocks,
                    tickets: HashMap::new(),
                }),
            }),
        }
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.shared.block_size
    }

    /// Size of the logical space in blocks.
    pub fn logical_blocks(&self) -> u64 {
        self.shared.logical_blocks
    }

    /// The lock, or `None` when a call panicked inside it (a core bug:
    /// the handle is closed from then on).
    fn lock(&self) -> Option<std::sync::MutexGuard<'_, Inline<B>>> {
        self.shared.state.lock().ok()
    }

    /// `f` of the driver, under the lock; `DeviceGone` once shut down.
    fn on_driver<T>(&self, f: impl FnOnce(&Driver<B>) -> T) -> Result<T, IoError> {
        let state = self.lock().ok_or(IoError::DeviceGone)?;
        state.driver.as_ref().map(f).ok_or(IoError::DeviceGone)
    }

    /// Runs any [`Request`] to its reply on the calling thread.
    pub fn call(&self, request: Request) -> Result<ReplyData, IoError> {
        self.lock().ok_or(IoError::DeviceGone)?.call(request)
    }

    /// Starts a request without waiting for it; [`Self::poll`] its
    /// ticket until the reply comes. For requests that take long (a range
    /// operation over a large range is applied in steps): the lock is held
    /// only while the loop turns, so other callers' requests go on in
    /// between, and they move this one on too. `Busy` with
    /// [`MAX_TICKETS`] outstanding.
    pub fn start(&self, request: Request) -> Result<u64, IoError> {
        let mut state = self.lock().ok_or(IoError::DeviceGone)?;
        if state.gone {
            return Err(IoError::DeviceGone);
        }
        if state.tickets.len() >= MAX_TICKETS {
            return Err(IoError::Busy);
        }
        let id = state.next_id;
        let driver = state.driver.as_mut().ok_or(IoError::DeviceGone)?;
        driver.try_submit(id, request)?;
        state.next_id += 1;
        state.tickets.insert(id, Ticket::Waiting);
        Ok(id)
    }

    /// Gives up on a ticket of [`Self::start`] (its caller went away): the
    /// request still completes, its reply is dropped and the ticket's slot
    /// freed.
    pub fn forget(&self, ticket: u64) {
        if let Some(mut state) = self.lock() {
            if let Some(slot) = state.tickets.get_mut(&ticket) {
                match slot {
                    Ticket::Waiting => *slot = Ticket::Abandoned,
                    Ticket::Abandoned => {}
                    Ticket::Done(_) => {
                        state.tickets.remove(&ticket);
                    }
                }
            }
        }
    }

    /// The reply to a ticket of [`Self::start`], if it came; turns the
    /// loop a bounded number of times first. A ticket this handle does not
    /// know (or one already answered) gets `DeviceGone`.
    pub fn poll(&self, ticket: u64) -> Option<Result<ReplyData, IoError>> {
        let Some(mut state) = self.lock() else {
            return Some(Err(IoError::DeviceGone));
        };
        state.poll(ticket)
    }

    request_methods!(sync {
        /// See [`Handle::nameless_write`].
        nameless_write;
        /// See [`Handle::nameless_write_fua`].
        nameless_write_fua;
        /// See [`Handle::nameless_overwrite`].
        nameless_overwrite;
        /// See [`Handle::nameless_read`].
        nameless_read;
        /// See [`Handle::nameless_free`].
        nameless_free;
        /// See [`Handle::nameless_commit`].
        nameless_commit;
        /// See [`Handle::nameless_ack`].
        nameless_ack;
        /// See [`Handle::next_events`].
        next_events;
    });

    request_methods!(sync {
        /// See [`Handle::range_ops`].
        range_ops;
        /// `(src, dst, block_count)`: each `dst` range names what its `src`
        /// names, without copying data; one atomic, durable vector.
        clone_ranges;
        /// `(src, dst, block_count)`: each `dst` range takes what its `src`
        /// named and `src` reads as zeros; one atomic, durable vector.
        move_ranges;
        /// `(lba, block_count)`: a persistent trim of each range, atomic and durable.
        delete_ranges;
        /// Merges `sources` into `dst` (see [`RangeOp::Merge`]).
        merge;
        /// Sets or clears `attribute` on each `(lba, block_count)` range, atomically.
        set_attribute;
    });

    /// The core's statistics. Still answers after the device is gone;
    /// `DeviceGone` once shut down.
    pub fn stats(&self) -> Result<FtlStats, IoError> {
        self.on_driver(Driver::stats)
    }

    /// See [`Handle::attributes`].
    pub fn attributes(&self) -> Result<Vec<(Lba, u64, u8)>, IoError> {
        self.on_driver(|d| d.ftl().attributes())
    }

    request_methods!(sync {
        /// See [`Handle::snapshot_create`].
        snapshot_create;
        /// See [`Handle::snapshot_delete`].
        snapshot_delete;
        /// See [`Handle::snapshot_revert`].
        snapshot_revert;
    });

    /// See [`Handle::snapshots`]. `DeviceGone` once shut down.
    pub fn snapshots(&self) -> Result<Vec<Snapshot>, IoError> {
        self.on_driver(Driver::snapshots)
    }

    request_methods!(sync {
        /// See [`Handle::fork_create`].
        fork_create;
        /// See [`Handle::fork_delete`].
        fork_delete;
    });

    /// See [`Handle::forks`]. `DeviceGone` once shut down.
    pub fn forks(&self) -> Result<Vec<Fork>, IoError> {
        self.on_driver(Driver::forks)
    }

    request_methods!(sync {
        /// See [`Handle::changed`].
        changed;
        /// See [`Handle::snapshot_diff`].
        snapshot_diff;
        /// See [`Handle::read_snapshot`].
        read_snapshot;
    });

    /// Clean unmount: flushes, writes a checkpoint and returns the backend.
    /// Other clones fail with [`IoError::DeviceGone`] afterwards.
    pub fn shutdown(self) -> Result<B, IoError> {
        let mut state = self.lock().ok_or(IoError::DeviceGone)?;
        let driver = state.driver.take().ok_or(IoError::DeviceGone)?;
        if state.gone {
            return Err(IoError::DeviceGone);
        }
        driver.shutdown()
    }
}

impl<B: Backend> InlineHandle<B> {
    /// Stops without writing anything, as a crash would, and returns the
    /// backend as it is. Works after the device was lost; other clones fail
    /// with [`IoError::DeviceGone`] afterwards.
    pub fn into_backend(self) -> Result<B, IoError> {
        let mut state = self.lock().ok_or(IoError::DeviceGone)?;
        let driver = state.driver.take().ok_or(IoError::DeviceGone)?;
        Ok(driver.into_backend())
    }
}

/// Queued blocks that make an append after a write of `write_blocks`:
/// [`INLINE_APPEND_BYTES`] or [`INLINE_APPEND_WRITES`] such writes, whichever
/// is larger, in whole write units (the core sends no less), at most the
/// device's largest append.
fn inline_append_blocks(g: &Geometry, write_blocks: usize) -> usize {
    let wu = u64::from(g.write_unit_blocks.max(1));
    let floor = INLINE_APPEND_BYTES.div_ceil(u64::from(g.block_size_bytes.max(1)));
    let writes = (write_blocks as u64).saturating_mul(INLINE_APPEND_WRITES as u64);
    let blocks = floor.max(writes).div_ceil(wu) * wu;
    blocks.min(u64::from(g.max_append_blocks)).max(1) as usize
}

impl<B: Backend> Inline<B> {
    fn call(&mut self, request: Request) -> Result<ReplyData, IoError> {
        if self.gone {
            return Err(IoError::DeviceGone);
        }
        let driver = self.driver.as_mut().ok_or(IoError::DeviceGone)?;
        let write_bytes = match &request {
            Request::Write { data, .. } => Some(data.len()),
            Request::WriteSummed { blocks, .. } => Some(blocks.data().len()),
            _ => None,
        };
        if let Some(write_bytes) = write_bytes {
            let g = driver.backend().geometry();
            let write_blocks = write_bytes / (g.block_size_bytes.max(1) as usize);
            self.append_blocks = inline_append_blocks(g, write_blocks);
        }
        let id = self.next_id;
        self.next_id += 1;
        // One request at a time, and the core takes `max_host_requests`:
        // `Busy` cannot happen here.
        driver.try_submit(id, request)?;
        let result = loop {
            if let Some(reply) = driver.take_reply() {
                if reply.id == id {
                    break reply.result;
                }
                // A started request's: kept for its ticket.
                assert!(
                    self.tickets.contains_key(&reply.id),
                    "inline handle: a reply for an unknown request"
                );
                Self::ticket_reply(&mut self.tickets, reply.id, reply.result);
                continue;
            }
            let moved = match driver.turn_nowait() {
                Ok(moved) => moved,
                Err(e) => return Err(self.lost(e)),
            };
            if driver.ftl().failure() == Some(IoError::DeviceGone) {
                return Err(self.lost(IoError::DeviceGone));
            }
            if moved {
                continue;
            }
            if driver.device_in_flight() > 0 {
                if let Err(e) = driver.wait_device() {
                    return Err(self.lost(e));
                }
                continue;
            }
            panic!(
                "zftl inline handle: FTL stalled with request {id} unanswered and nothing in flight: {}",
                driver.ftl().debug_state()
            );
        };
        // As on the driver thread: once the core learned that the device is
        // gone, its answers (`ReadOnly` among them) report that instead.
        if driver.ftl().failure() == Some(IoError::DeviceGone) {
            return Err(self.lost(IoError::DeviceGone));
        }
        self.feed();
        result
    }

    /// Sends the write buffer's full appends, a bounded number of turns.
    fn feed(&mut self) {
        let Some(driver) = self.driver.as_mut() else {
            return;
        };
        for _ in 0..MAX_FEED_TURNS {
            let ftl = driver.ftl();
            let background = ftl.activity();
            let due =
                ftl.queued_blocks() >= self.append_blocks || background.gc || background.checkpoint;
            if !due {
                return;
            }
            match driver.turn_nowait() {
                Ok(true) => {}
                Ok(false) => return,
                Err(_) => {
                    self.gone = true;
                    return;
                }
            }
            if driver.ftl().failure() == Some(IoError::DeviceGone) {
                self.gone = true;
                return;
            }
        }
    }

    /// The device is gone: this call and every later one fail.
    fn lost(&mut self, error: IoError) -> IoError {
        self.gone = true;
        error
    }

    /// Files a started request's reply under its ticket.
    fn ticket_reply(
        tickets: &mut HashMap<u64, Ticket>,
        id: u64,
        result: Result<ReplyData, IoError>,
    ) {
        match tickets.get_mut(&id) {
            Some(Ticket::Abandoned) => {
                tickets.remove(&id);
            }
            Some(slot) => *slot = Ticket::Done(result),
            None => {}
        }
    }

    /// Takes a ticket's reply if it came.
    fn take_ticket(&mut self, ticket: u64) -> Option<Result<ReplyData, IoError>> {
        match self.tickets.remove(&ticket)? {
            Ticket::Done(result) => Some(result),
            other => {
                self.tickets.insert(ticket, other);
                None
            }
        }
    }

    /// See [`InlineHandle::poll`].
    fn poll(&mut self, ticket: u64) -> Option<Result<ReplyData, IoError>> {
        if !matches!(
            self.tickets.get(&ticket),
            Some(Ticket::Waiting | Ticket::Done(_))
        ) {
            return Some(Err(IoError::DeviceGone));
        }
        if let Some(result) = self.take_ticket(ticket) {
            return Some(result);
        }
        if self.gone || self.driver.is_none() {
            self.tickets.remove(&ticket);
            return Some(Err(IoError::DeviceGone));
        }
        for _ in 0..POLL_TURNS {
            let driver = self.driver.as_mut().expect("checked");
            let moved = match driver.turn_nowait() {
                Ok(moved) => moved,
                Err(e) => {
                    self.tickets.remove(&ticket);
                    return Some(Err(self.lost(e)));
                }
            };
            while let Some(reply) = self.driver.as_mut().expect("checked").take_reply() {
                Self::ticket_reply(&mut self.tickets, reply.id, reply.result);
            }
            if let Some(result) = self.take_ticket(ticket) {
                return Some(result);
            }
            if moved {
                break; // one step at a time: let other callers in
            }
            let driver = self.driver.as_mut().expect("checked");
            if driver.device_in_flight() > 0 {
                if let Err(e) = driver.wait_device() {
                    self.tickets.remove(&ticket);
                    return Some(Err(self.lost(e)));
                }
            } else {
                break;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(block_size_bytes: u32, write_unit_blocks: u32, max_append_blocks: u32) -> Geometry {
        Geometry {
            block_size_bytes,
            oob_size_bytes: 0,
            zone_count: 8,
            zone_size_blocks: 4096,
            zone_capacity_blocks: 4096,
            write_unit_blocks,
            max_append_blocks,
            max_transfer_blocks: max_append_blocks,
            max_open_zones: 0,
            max_active_zones: 0,
            parallel_units: 1,
            zone_groups: 1,
            queue_depth: 32,
        }
    }

    /// A link with no driver thread: what is sent stays queued.
    fn link(capacity: usize) -> (Link<()>, mpsc::Receiver<Msg<()>>) {
        let (tx, rx) = mpsc::channel(capacity);
        let shared = Arc::new(Shared {
            thread: Mutex::new(None),
            block_size: 512,
            logical_blocks: 64,
            data_crc: DataCrcImpl::Table16,
        });
        (Link { tx, shared }, rx)
    }

    fn write(data: Vec<u8>) -> Request {
        Request::Write {
            lba: 3,
            data,
            fua: true,
        }
    }

    #[test]
    fn callers_take_the_crcs_only_while_the_driver_thread_has_work_queued() {
        let (link, mut rx) = link(16);
        let data: Vec<u8> = (0..1024u32).map(|i| (i * 7) as u8).collect();
        for _ in 0..CALLER_SUMS_FROM_QUEUED {
            let r = link
                .sum_on_caller(write(data.clone()))
                .expect("whole blocks");
            assert!(
                matches!(r, Request::Write { .. }),
                "short of work: sent as it is"
            );
            link.tx
                .try_send(Msg::Stats(oneshot::channel().0))
                .expect("room");
        }
        match link
            .sum_on_caller(write(data.clone()))
            .expect("whole blocks")
        {
            Request::WriteSummed { lba, blocks, fua } => {
                assert_eq!((lba, fua), (3, true));
                let (bytes, crcs) = blocks.into_parts();
                assert_eq!(crcs.len(), 2);
                assert_eq!(crcs[1], DataCrcImpl::CrcFast.checksum(&data[512..]));
                assert_eq!(bytes, data);
            }
            _ => panic!("with work queued the caller takes the CRCs"),
        }
        // Not whole blocks: the caller answers, as the core would.
        assert!(matches!(
            link.sum_on_caller(write(vec![0; 700])),
            Err(IoError::BufferSize {
                expected_bytes: 1024,
                actual_bytes: 700
            })
        ));
        // Once the driver thread has taken a message, it is short again.
        drop(rx.try_recv().expect("queued"));
        assert!(matches!(
            link.sum_on_caller(write(data)).expect("whole blocks"),
            Request::Write { .. }
        ));
        assert!(matches!(
            link.sum_on_caller(Request::Flush).expect("not a write"),
            Request::Flush
        ));
    }

    #[test]
    fn inline_appends_are_128_kib_of_whole_write_units_within_the_device_limit() {
        assert_eq!(inline_append_blocks(&geometry(4096, 1, 128), 0), 32);
        assert_eq!(inline_append_blocks(&geometry(512, 1, 1024), 0), 256);
        // Whole write units: 32 blocks round up to two units of 24.
        assert_eq!(inline_append_blocks(&geometry(4096, 24, 96), 0), 48);
        // Never past the device's largest append.
        assert_eq!(inline_append_blocks(&geometry(4096, 1, 16), 0), 16);
        assert_eq!(inline_append_blocks(&geometry(65536, 1, 8), 0), 2);
    }

    #[test]
    fn inline_appends_hold_four_large_writes_within_the_device_limit() {
        let g = geometry(4096, 1, 128);
        // 4 KiB and 32 KiB writes: the 128 KiB floor.
        assert_eq!(inline_append_blocks(&g, 1), 32);
        assert_eq!(inline_append_blocks(&g, 8), 32);
        // 64 KiB writes: four of them.
        assert_eq!(inline_append_blocks(&g, 16), 64);
        // 128 KiB and 1 MiB writes: the device's largest append.
        assert_eq!(inline_append_blocks(&g, 32), 128);
        assert_eq!(inline_append_blocks(&g, 256), 128);
        // Whole write units: four writes of 10 blocks round up to 48.
        assert_eq!(inline_append_blocks(&geometry(4096, 24, 96), 10), 48);
        assert_eq!(inline_append_blocks(&g, usize::MAX), 128);
    }
}
