//! The command line, as clap derive structs. Every option says its unit.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use zftl_core::ProtectWindow;

const ABOUT: &str =
    "zftl: a host-side flash translation layer for zoned flash, and its NAND simulator";

const LONG_ABOUT: &str = "\
zftl: a host-side flash translation layer for zoned flash, and its NAND simulator.

With no subcommand, zftl opens the default simulated device image (creating a
4 GiB sparse image of 1024 zones if there is none yet), formats the FTL on it
if it holds none yet, mounts it and prints its geometry and the FTL's and the
device's statistics.

The default image is $ZFTL_IMAGE if set, else $XDG_DATA_HOME/zftl/default.img,
else $HOME/.local/share/zftl/default.img.";

/// The whole command line.
#[derive(Debug, Parser)]
#[command(name = "zftl", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Print one JSON object on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Image to open or create when no subcommand is given
    /// [default: $ZFTL_IMAGE, else $XDG_DATA_HOME/zftl/default.img,
    /// else $HOME/.local/share/zftl/default.img].
    #[arg(long, value_name = "PATH")]
    pub image: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create and inspect simulated NAND devices (image files).
    #[command(subcommand)]
    Sim(SimCommand),
    /// Format the FTL on a simulated device image (created if missing), or
    /// on an NVMe ZNS drive with --device.
    ///
    /// Refuses an image that already holds a zftl FTL, even a damaged one,
    /// unless --force is given. Prints the logical size, the tag mode and
    /// the zone layout.
    Format(FormatArgs),
    /// Mount the FTL and print its statistics and the device's.
    ///
    /// Mounting writes a checkpoint (and the superblock records pointing at
    /// it), and the clean shutdown afterwards writes another: stats is not
    /// read-only. Use `zftl check` to look without writing. Counters count
    /// since this mount.
    Stats(ImageOpt),
    /// Verify every metadata structure and every mapped block, read-only.
    ///
    /// Reads every superblock record, the checkpoint, the metadata log and
    /// the data and tag of every mapped block, and checks the zone table
    /// against the map. Prints each problem (zone, offset, lba, detail)
    /// and a summary. Exit status: 0 clean, 1 damaged or not formatted.
    Check(ImageOpt),
    /// Benchmarks: write amplification, throughput, recovery and media
    /// limits on the simulator; NBD servers; a ZNS namespace against fio.
    Bench(crate::bench::BenchArgs),
    /// Serve the FTL as a block device over NBD (Network Block Device).
    ///
    /// Opens the image (creating and formatting it as the main job does),
    /// mounts the FTL and exports it as NAME (also the default export, the
    /// empty name) until SIGINT or SIGTERM; then finishes the requests in
    /// flight, flushes, writes a checkpoint and exits 0. Attach with e.g.
    /// `nbdinfo nbd://127.0.0.1:10809` or `qemu-io -f raw nbd://127.0.0.1:10809/zftl`.
    /// Logs go to stderr (filter with RUST_LOG, default info).
    Serve(ServeArgs),
    /// Range operations: clone, move, delete, merge and attributes of
    /// logical block ranges, without copying data; on an image, or through
    /// the control socket of a running `zftl serve`.
    #[command(subcommand, long_about = RANGE_ABOUT, after_help = RANGE_EXAMPLES)]
    Range(RangeCommand),
    /// Snapshots: create, delete, list, read and diff named point-in-time
    /// views of the volume; on an image, or through the control socket of
    /// a running `zftl serve`.
    #[command(subcommand, long_about = SNAPSHOT_ABOUT, after_help = SNAPSHOT_EXAMPLES)]
    Snapshot(SnapshotCommand),
    /// Writable forks of snapshots: create, delete and list volumes that
    /// start as a snapshot holds the volume and change on their own; on
    /// an image, or through the control socket of a running `zftl serve`
    /// (which exports each fork writable over NBD under its name).
    #[command(subcommand, long_about = FORK_ABOUT, after_help = FORK_EXAMPLES)]
    Fork(ForkCommand),
    /// Make the live volume what it was at a snapshot, a point of the
    /// protection window, a time or a seq, first taking an undo snapshot
    /// of the state it leaves; on an image, or through the control socket
    /// of a running `zftl serve`.
    #[command(long_about = REVERT_ABOUT, after_help = REVERT_EXAMPLES)]
    Revert(RevertArgs),
    /// Print the NBD export (and URI) of a running `zftl serve` that reads
    /// the volume as it was at a snapshot, a point of the protection
    /// window, a time or a seq.
    #[command(long_about = VIEW_ABOUT, after_help = VIEW_EXAMPLES)]
    View(ViewArgs),
    /// Print the zone geometry and limits of an NVMe ZNS drive (Linux only).
    ///
    /// DEVICE is the namespace's generic char device (/dev/ngXnY); it is
    /// opened read-write (and locked) for io_uring passthrough, so it needs
    /// root or write permission, and fails on a device in use. Nothing is
    /// written.
    Info(DeviceArg),
}

const RANGE_ABOUT: &str = "\
Range operations: clone, move, delete, merge and attributes of logical block
ranges. They change which logical blocks name which data; no data is copied.
All ranges of one command are one atomic unit (all or nothing, also across a
crash), and the command returns once it is durable.

Every LBA and BLOCKS is in blocks of the volume's block size (4096 bytes on
the default device; `zftl stats` prints block_size_bytes).

Without --server the command opens the image (or --device), mounts the FTL,
applies the operation and shuts down cleanly; the image must not be in use
(it refuses an image whose default control socket, <image>.control, answers).
With --server SOCKET it sends the operation to a running `zftl serve` over
its control socket (by default the image's path with `.control` appended;
protocol: docs/control.md).

Exit status: 0 done, 1 refused by the FTL (out of range, overlapping ranges,
an immutable range, a merge conflict, ...) or the server could not be
reached, with one line on stderr, nothing changed; 2 bad arguments.";

const RANGE_EXAMPLES: &str = "\
Examples:
  zftl range clone 0:1000:256                  # blocks 1000..1256 name what 0..256 name
  zftl range clone 0:1000:8 8:2000:8           # two clones, one atomic unit
  zftl range move 5000:0:64                    # 0..64 take 5000..5064's blocks; those read zeros
  zftl range delete 0:64 128:64                # persistent trim of two ranges
  zftl range merge --dst 0 --blocks 256 --policy last-wins 1000 2000
  zftl range attr immutable 0:256              # refuse writes, trims, moves out, clones into
  zftl range attr mutable 0:256
  zftl range attrs                             # list the attribute ranges
  zftl range clone 0:1000:256 --server ~/.local/share/zftl/default.img.control
  zftl range attrs --image small.img --json";

const SNAPSHOT_ABOUT: &str = "\
Snapshots: named, read-only, point-in-time views of the whole volume.

A snapshot holds every write acknowledged before it was taken. Taking one
copies nothing (it costs a flush and one metadata note); afterwards, blocks
the volume replaces or trims are kept as long as a snapshot still needs
them, so snapshots hold media space until they are deleted (a delete gives
the space back through GC). A volume holds at most 4096 snapshots, and as
many as its metadata log has room for; names are 1 to 63 bytes. On a volume
with tags in OOB, every write while a snapshot exists also costs a metadata
note, as with tags in band.

Without --server the command opens the image (or --device), mounts the FTL,
does its work and shuts down cleanly; the image must not be in use (it
refuses an image whose default control socket, <image>.control, answers).
With --server SOCKET it sends the request to a running `zftl serve` over its
control socket (by default the image's path with `.control` appended;
protocol: docs/control.md). A `zftl serve --read-only` refuses create and
delete.

Names starting with `@` are the protection window's points (`zftl serve
--protect`): the server takes them while the volume changes and drops them
when they leave the window; `zftl snapshot list` shows them with kind
`point`, and they read, diff, revert and export like snapshots. `zftl
revert --to NAME` reverts the volume to a snapshot or a point.

`zftl snapshot diff A [B]` lists the blocks whose contents differ between
snapshots A and B, or between A and the live volume without B: one line
per run of changed blocks (LBA and length in blocks, offset and length in
bytes), then the totals. Its cost follows what changed (the versions the
snapshots keep and the blocks written since), not the volume's size.

Exit status: 0 done; 1 refused (a name taken or unknown, too many
snapshots, no room left, a read out of range, ...) or the
server could not be reached, with one line on stderr; 2 bad arguments.";

const SNAPSHOT_EXAMPLES: &str = "\
Examples:
  zftl snapshot create before-upgrade --image vol.img
  zftl snapshot list --image vol.img
  zftl snapshot read before-upgrade --lba 0 --blocks 256 --out head.bin --image vol.img
  zftl snapshot diff before-upgrade --image vol.img          # changed since, against the live volume
  zftl snapshot diff monday tuesday --image vol.img --json  # between two snapshots
  zftl snapshot delete before-upgrade --image vol.img
  zftl snapshot create nightly --server vol.img.control   # a running `zftl serve --image vol.img`
  zftl snapshot list --server vol.img.control --json
  zftl revert --to nightly --server vol.img.control       # the volume back to a snapshot
  zftl view --at nightly --server vol.img.control         # its NBD export";

const FORK_ABOUT: &str = "\
Forks: writable volumes that start as a snapshot holds the volume.

A fork of snapshot S is a volume of the volume's size. Creating one copies
nothing (it costs a flush and one metadata note): a block the fork has not
written reads as S holds it, and the fork's writes and trims change
neither S nor the live volume. The fork's own blocks take media space like
any block until the fork is deleted (a delete gives the space back through
GC). S cannot be deleted while a fork of it lives. A volume holds at most
15 forks at once (fewer on a volume too large for 15 more regions of its
size in the map's logical space); fork names are 1 to 63 bytes without `@`
or `/`. Points of the protection window (names starting with `@`) cannot be
forked: take a snapshot.

A running `zftl serve` exports each live fork writable over NBD under its
own name (`nbdinfo --list nbd://127.0.0.1:10809` lists them) as soon as it
is created; a fork's export goes with its delete, and requests of clients
still attached to it then fail with EIO.

Without --server the command opens the image (or --device), mounts the FTL,
does its work and shuts down cleanly; the image must not be in use. With
--server SOCKET it sends the request to a running `zftl serve` over its
control socket (docs/control.md). A `zftl serve --read-only` refuses create
and delete.

Exit status: 0 done; 1 refused (a name taken, malformed or unknown, no such
snapshot, too many forks, no room for the forks' map, ...) or the server
could not be reached, with one line on stderr; 2 bad arguments.";

const FORK_EXAMPLES: &str = "\
Examples:
  zftl fork create before-upgrade try-upgrade --image vol.img   # fork snapshot before-upgrade
  zftl fork list --image vol.img
  zftl fork create nightly scratch --server vol.img.control    # a running `zftl serve --image vol.img`
  qemu-io -f raw nbd://127.0.0.1:10809/scratch                  # ... exports it writable
  zftl fork list --server vol.img.control --json
  zftl fork delete scratch --server vol.img.control";

/// WHEN, as `zftl revert --to` and `zftl view --at` take it.
const WHEN_HELP: &str = "\
WHEN is one of:
  NAME                  a live snapshot or point, by name (`zftl snapshot list`);
                        a name wins over the forms below
  2026-11-27T10:00:01Z  a UTC time, RFC 3339 to the second (also written as a
                        point's name, @2026-11-27T10:00:01Z): the newest
                        snapshot or point taken at or before it
  -90s, -5m, -2h, -1d   that long ago (units s, m, h, d; combined as -1h30m):
                        the same, for the time now less that
  seq:N                 the newest snapshot or point created at or before
                        sequence number N (`create_seq` in the list)
Times count to the second, as points are named: one taken during 10:00:01
is at 10:00:01. Snapshots taken without a recorded time count for names
and seq:N only. A time before the oldest snapshot or point with a time is
an error naming the oldest reachable time; a time in the future is an
error too (times are UTC). The command says what WHEN resolved to.";

const REVERT_ABOUT: &str = "\
Make the live volume what it was at WHEN: every block reads what it held in
the snapshot or point WHEN resolves to. First a snapshot of the state the
volume leaves is taken (--undo NAME, by default undo-ID), so `zftl revert
--to undo-ID` undoes the revert. No data is copied and nothing is lost: the
revert points each block changed since then at the version the snapshot
keeps, in one atomic, durable step (also across a crash: the volume is as
before or as after), at a cost that follows the blocks changed since.

On a running `zftl serve` (--server SOCKET) the revert changes the volume
under its NBD clients: a client that caches blocks (a mounted file system,
the kernel's page cache) must be unmounted or disconnected first, as for
any change made behind its back.

Without --server the command opens the image (or --device), mounts the FTL,
reverts and shuts down cleanly; the image must not be in use. With --server
SOCKET it sends `snapshots` and `snapshot_revert` requests to a running
`zftl serve` (docs/control.md). A `zftl serve --read-only` refuses it.

Exit status: 0 done; 1 refused (WHEN names nothing, an undo name taken,
no room for the versions the undo snapshot keeps, ...) or the server could
not be reached, with one line on stderr, nothing changed; 2 bad arguments.";

const REVERT_EXAMPLES: &str = "\
Examples:
  zftl revert --to before-upgrade --image vol.img           # a snapshot
  zftl revert --to 2026-11-27T10:00:01Z --server vol.img.control
  zftl revert --to -5m --server vol.img.control             # five minutes ago
  zftl revert --to seq:1200 --undo oops --image vol.img --json
  zftl revert --to undo-7 --image vol.img                   # undo that revert";

const VIEW_ABOUT: &str = "\
Print the NBD export of a running `zftl serve` that reads the volume as it
was at WHEN, and its nbd:// URI: `zftl serve` exports every live snapshot and
protection-window point read-only as EXPORT@NAME (a point's name starts with
@, so its export reads zftl@@2026-11-27T10:00:01Z).

No data is copied and nothing is activated: the view is live, for any
client, as long as its snapshot or point exists. A point goes when it
leaves the protection window (`zftl serve --protect`) or sooner, when a
write needs the room it holds; reads of a view whose snapshot or point is
gone fail with EIO.

The server is found by its control socket: --server SOCKET, else the
image's path with `.control` appended (--image, or the default image).";

const VIEW_EXAMPLES: &str = "\
Examples:
  zftl view --at -10m --server vol.img.control
  nbdcopy \"$(zftl view --at 2026-11-27T10:00:01Z --image vol.img --json | jq -r .uri)\" then.img
  zftl view --at before-upgrade --json";

/// `zftl revert`.
#[derive(Debug, Args)]
#[command(after_long_help = WHEN_HELP)]
pub struct RevertArgs {
    /// What to revert to: a snapshot's or point's name, a UTC time
    /// (2026-11-27T10:00:01Z), a time ago (-5m) or seq:N (see below).
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
    pub to: String,
    /// Name of the snapshot taken of the state the volume leaves (1 to 63
    /// bytes, not starting with @) [default: undo-ID, ID its id].
    #[arg(long, value_name = "NAME")]
    pub undo: Option<String>,
    #[command(flatten)]
    pub target: RangeTarget,
}

/// `zftl view`.
#[derive(Debug, Args)]
#[command(after_long_help = WHEN_HELP)]
pub struct ViewArgs {
    /// Which state to view: a snapshot's or point's name, a UTC time
    /// (2026-11-27T10:00:01Z), a time ago (-5m) or seq:N (see below).
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
    pub at: String,
    /// The control socket of the running `zftl serve` [default: the
    /// image's path with `.control` appended].
    #[arg(long, value_name = "SOCKET", conflicts_with = "image")]
    pub server: Option<PathBuf>,
    /// The image the running `zftl serve` serves (its control socket is
    /// the path with `.control` appended) [default: as for `zftl` with no
    /// subcommand].
    #[arg(long, value_name = "PATH")]
    pub image: Option<PathBuf>,
}

/// `zftl serve --protect`: a window's length in time or in data written,
/// or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protect {
    /// `off`: the points there are dropped.
    Off,
    /// A duration, in seconds.
    Secs(u64),
    /// A size of data the host writes, in bytes (counted in the volume's
    /// blocks once it is open).
    Bytes(u64),
}

impl Protect {
    /// The window on a volume of `block_size` bytes per block: a size is
    /// rounded down to whole blocks, at least one.
    pub fn window(self, block_size: u64) -> ProtectWindow {
        match self {
            Protect::Off => ProtectWindow::Secs(0),
            Protect::Secs(secs) => ProtectWindow::Secs(secs),
            Protect::Bytes(bytes) => ProtectWindow::Blocks((bytes / block_size.max(1)).max(1)),
        }
    }
}

/// `1h`, `30m`, `90s`, `1h30m`, `2d`; `500MiB`, `64GiB`, `1TB` (powers of
/// 1024, the unit ending in `B`); or `off`.
pub fn parse_protect(s: &str) -> Result<Protect, String> {
    if s == "off" {
        return Ok(Protect::Off);
    }
    if let Ok(secs) = crate::when::parse_duration(s) {
        return Ok(Protect::Secs(secs));
    }
    let sized = s.ends_with(['B', 'b']) && s.starts_with(|c: char| c.is_ascii_digit());
    if !sized {
        return Err(format!(
            "`{s}` is neither a duration (90s, 30m, 1h, 1h30m, 2d) nor a size of data \
             written (500MiB, 64GiB, 1TB)"
        ));
    }
    match parse_bytes(s)? {
        0 => Err(format!("`{s}`: a window of no data; use `off`")),
        bytes => Ok(Protect::Bytes(bytes)),
    }
}

/// `zftl snapshot …`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot named NAME of every write acknowledged so far;
    /// prints its id, epoch and time once it is durable.
    #[command(after_help = "Example: zftl snapshot create before-upgrade --image vol.img")]
    Create(SnapshotNameArgs),
    /// Delete the snapshot named NAME; the blocks only it kept come back
    /// through GC.
    #[command(after_help = "Example: zftl snapshot delete before-upgrade --image vol.img")]
    Delete(SnapshotNameArgs),
    /// List the snapshots and the protection window's points, oldest
    /// first (id, kind, name, time created in UTC, epoch, create_seq),
    /// and the replaced blocks they keep.
    #[command(after_help = "Example: zftl snapshot list --server vol.img.control --json")]
    List(SnapshotListArgs),
    /// Copy blocks of a snapshot into a file: --blocks N blocks from --lba,
    /// as the snapshot holds them (blocks it holds as unmapped read as
    /// zeros).
    #[command(
        after_help = "Example: zftl snapshot read before-upgrade --lba 0 --blocks 256 --out head.bin --image vol.img"
    )]
    Read(SnapshotReadArgs),
    /// List the blocks whose contents differ between snapshots SINCE and
    /// UNTIL, or between SINCE and the live volume without UNTIL: one line
    /// per run of changed blocks (LBA and blocks; offset and length in
    /// bytes), then the totals. With --json: `runs` of `{"lba", "blocks"}`
    /// in blocks of `block_size` bytes, and `extents`, `changed_blocks`,
    /// `changed_bytes`.
    #[command(after_help = "\
Examples:
  zftl snapshot diff before-upgrade --image vol.img      # before-upgrade against the live volume
  zftl snapshot diff monday tuesday --server vol.img.control --json")]
    Diff(SnapshotDiffArgs),
}

/// `zftl fork …`.
#[derive(Debug, Subcommand)]
pub enum ForkCommand {
    /// Create a writable fork named NAME of snapshot SNAPSHOT; prints its
    /// id, size and time once it is durable.
    #[command(after_help = "Example: zftl fork create before-upgrade try-upgrade --image vol.img")]
    Create(ForkCreateArgs),
    /// Delete the fork named NAME; its blocks come back through GC.
    #[command(after_help = "Example: zftl fork delete try-upgrade --image vol.img")]
    Delete(ForkNameArgs),
    /// List the live forks (id, name, the snapshot each started from, time
    /// created in UTC, size in blocks, and where its blocks lie in the
    /// map's logical space).
    #[command(after_help = "Example: zftl fork list --server vol.img.control --json")]
    List(SnapshotListArgs),
}

#[derive(Debug, Args)]
pub struct ForkCreateArgs {
    /// The snapshot to fork, by name (`zftl snapshot list`).
    #[arg(value_name = "SNAPSHOT")]
    pub snapshot: String,
    /// The fork's name (1 to 63 bytes, no `@` or `/`); also its NBD
    /// export's name on a running `zftl serve`.
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub target: RangeTarget,
}

#[derive(Debug, Args)]
pub struct ForkNameArgs {
    /// The fork's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub target: RangeTarget,
}

#[derive(Debug, Args)]
pub struct SnapshotNameArgs {
    /// The snapshot's name (1 to 63 bytes).
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub target: RangeTarget,
}

#[derive(Debug, Args)]
pub struct SnapshotListArgs {
    #[command(flatten)]
    pub target: RangeTarget,
}

#[derive(Debug, Args)]
pub struct SnapshotReadArgs {
    /// The snapshot's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// First LBA to read, in blocks.
    #[arg(long, value_name = "LBA", default_value_t = 0)]
    pub lba: u64,
    /// How many blocks to read (the file gets N times the block size
    /// bytes).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub blocks: u64,
    /// The file to write (created, or truncated if it exists; removed again
    /// if the read fails).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub target: RangeTarget,
}

#[derive(Debug, Args)]
pub struct SnapshotDiffArgs {
    /// The snapshot to compare from.
    #[arg(value_name = "SINCE")]
    pub since: String,
    /// The snapshot to compare with [default: the live volume]. The order
    /// of the two does not matter.
    #[arg(value_name = "UNTIL")]
    pub until: Option<String>,
    #[command(flatten)]
    pub target: RangeTarget,
}

/// `zftl range …`.
#[derive(Debug, Subcommand)]
pub enum RangeCommand {
    /// Make each DST range name the blocks its SRC range names (no data
    /// is copied; a later write to either side changes only that side).
    #[command(after_help = "Example: zftl range clone 0:1000:256 512:2000:16")]
    Clone(PairArgs),
    /// Move each SRC range to DST: DST names SRC's blocks, SRC reads as
    /// zeros afterwards.
    #[command(after_help = "Example: zftl range move 5000:0:64")]
    Move(PairArgs),
    /// Persistent trim of each range: it reads as zeros, also after a crash.
    #[command(after_help = "Example: zftl range delete 0:64 128:64")]
    Delete(SpanArgs),
    /// Merge the SRC ranges into DST: each block of DST that a source
    /// changed (names other data than DST, e.g. after a clone of DST was
    /// written) takes that source's block; --policy decides where several
    /// sources changed the same block.
    #[command(
        after_help = "Example: zftl range clone 0:1000:256; (write to 1000..1256); zftl range merge --dst 0 --blocks 256 1000"
    )]
    Merge(MergeArgs),
    /// Set or clear an attribute of ranges: immutable (refuses writes,
    /// trims, write-zeroes, moves out of it, deletes, clones and merges
    /// into it), mutable (clears it), non-persistent (its contents read as
    /// zeros after a crash), persistent (clears it).
    #[command(after_help = "Example: zftl range attr immutable 0:256 1024:16")]
    Attr(AttrArgs),
    /// List the attribute ranges (those ending after --from, in order).
    #[command(after_help = "Example: zftl range attrs --server default.img.control --json")]
    Attrs(AttrsArgs),
}

/// Where a range command runs.
#[derive(Debug, Args)]
pub struct RangeTarget {
    /// The simulated device image [default: as for `zftl` with no
    /// subcommand: $ZFTL_IMAGE, else $XDG_DATA_HOME/zftl/default.img, else
    /// $HOME/.local/share/zftl/default.img].
    #[arg(long, value_name = "PATH")]
    pub image: Option<PathBuf>,
    /// Work on this zoned device (/dev/ngXnY or a zoned block device;
    /// Linux only) instead of an image.
    #[arg(long, value_name = "DEVICE", conflicts_with = "image")]
    pub device: Option<PathBuf>,
    /// Send the operation to a running `zftl serve` through its control
    /// socket instead of opening the volume.
    #[arg(long, value_name = "SOCKET", conflicts_with_all = ["image", "device"])]
    pub server: Option<PathBuf>,
}

/// `SRC:DST:BLOCKS` of clone and move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair {
    pub src: u64,
    pub dst: u64,
    pub blocks: u64,
}

/// `LBA:BLOCKS` of delete and attr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub lba: u64,
    pub blocks: u64,
}

fn numbers<const N: usize>(s: &str, form: &str) -> Result<[u64; N], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != N {
        return Err(format!("`{s}` is not {form}"));
    }
    let mut out = [0u64; N];
    for (o, p) in out.iter_mut().zip(&parts) {
        *o = p.trim().parse().map_err(|_| {
            format!("`{s}`: `{p}` is not a whole number of blocks (0 to 2^64-1); expected {form}")
        })?;
    }
    if out[N - 1] == 0 {
        return Err(format!("`{s}`: BLOCKS must be at least 1"));
    }
    Ok(out)
}

/// `SRC:DST:BLOCKS`.
pub fn parse_pair(s: &str) -> Result<Pair, String> {
    let [src, dst, blocks] = numbers::<3>(s, "SRC:DST:BLOCKS (e.g. 0:1000:256)")?;
    Ok(Pair { src, dst, blocks })
}

/// `LBA:BLOCKS`.
pub fn parse_span(s: &str) -> Result<Span, String> {
    let [lba, blocks] = numbers::<2>(s, "LBA:BLOCKS (e.g. 0:256)")?;
    Ok(Span { lba, blocks })
}

#[derive(Debug, Args)]
pub struct PairArgs {
    /// Ranges: source LBA, destination LBA and length, in blocks.
    #[arg(value_name = "SRC:DST:BLOCKS", required = true, value_parser = parse_pair)]
    pub ranges: Vec<Pair>,
    #[command(flatten)]
    pub target: RangeTarget,
}

#[derive(Debug, Args)]
pub struct SpanArgs {
    /// Ranges: first LBA and length, in blocks.
    #[arg(value_name = "LBA:BLOCKS", required = true, value_parser = parse_span)]
    pub ranges: Vec<Span>,
    #[command(flatten)]
    pub target: RangeTarget,
}

/// A merge's conflict policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    /// Refuse the merge (nothing changes) if two sources changed a block.
    Fail,
    /// The first source given that changed a block wins.
    FirstWins,
    /// The last source given that changed a block wins.
    LastWins,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// First LBA of the destination range.
    #[arg(long, value_name = "LBA")]
    pub dst: u64,
    /// Length of the destination and of every source range, in blocks.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub blocks: u64,
    /// What happens where more than one source changed a block.
    #[arg(long, value_enum, value_name = "POLICY", default_value = "fail")]
    pub policy: PolicyArg,
    /// First LBA of each source range, in order (first-wins and last-wins
    /// follow this order).
    #[arg(value_name = "SRC", required = true)]
    pub sources: Vec<u64>,
    #[command(flatten)]
    pub target: RangeTarget,
}

/// An attribute to set or clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttrArg {
    /// Refuse writes, trims, write-zeroes, moves out, deletes, clones and merges into.
    Immutable,
    /// Clear immutable.
    Mutable,
    /// The contents read as zeros after a crash (kept across a clean shutdown).
    NonPersistent,
    /// Clear non-persistent.
    Persistent,
}

#[derive(Debug, Args)]
pub struct AttrArgs {
    #[arg(value_enum, value_name = "ATTRIBUTE")]
    pub attribute: AttrArg,
    /// Ranges: first LBA and length, in blocks.
    #[arg(value_name = "LBA:BLOCKS", required = true, value_parser = parse_span)]
    pub ranges: Vec<Span>,
    #[command(flatten)]
    pub target: RangeTarget,
}

#[derive(Debug, Args)]
pub struct AttrsArgs {
    /// List the ranges that end after this LBA [default: 0].
    #[arg(long, value_name = "LBA")]
    pub from: Option<u64>,
    /// List at most N ranges (1 to 4096) and print where the rest start
    /// (`next`) [default: all of them].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max: Option<u64>,
    #[command(flatten)]
    pub target: RangeTarget,
}

/// `zftl serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub image: ImageOpt,
    /// Read the settings from this TOML file: the keys are the long flags
    /// with `_` for `-` (listen, export, read_only, insecure_no_tls, image,
    /// tls_cert, tls_key, tls_client_ca, metrics, control, protect = "1h")
    /// and an `[ftl]` table of
    /// the FTL's tunables. Flags given on the command line override it;
    /// unknown keys are an error.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address and port to listen on [default: 127.0.0.1:10809]. Without
    /// TLS only loopback addresses are accepted, unless --insecure-no-tls
    /// is given.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// Name of the export (the empty name selects it too) [default: zftl].
    #[arg(long, value_name = "NAME")]
    pub export: Option<String>,
    /// Export read-only: writes, trims and zeroing fail with EPERM, and
    /// the control socket refuses range operations and snapshot creates,
    /// deletes and reverts.
    #[arg(long)]
    pub read_only: bool,
    /// Allow a non-loopback --listen address without TLS: anyone who can
    /// reach it can read and overwrite the volume.
    #[arg(long)]
    pub insecure_no_tls: bool,
    /// Require TLS (NBD_OPT_STARTTLS) with this server certificate chain
    /// (PEM, leaf first); needs --tls-key. Clients then connect with e.g.
    /// `nbds://HOST/zftl`.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Client-certificate authentication: admit only clients presenting a
    /// certificate signed by a CA in this PEM bundle (needs --tls-cert).
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve Prometheus metrics (plain HTTP, `GET /metrics`) on this
    /// address: request counts, bytes, latency histograms, connections and
    /// the FTL's statistics (write amplification, GC, erases, free zones).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Listen for control requests (range operations, statistics; JSON
    /// lines, docs/control.md) on this Unix socket, created with mode 0600
    /// and removed at exit [default: the image's path with `.control`
    /// appended; none with --memory-mib or --device unless given]. Use
    /// `zftl range ... --server PATH` as a client.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// No control socket (not even the default one next to the image).
    #[arg(long, conflicts_with = "control")]
    pub no_control: bool,
    /// Keep a protection window of this length: a duration (1h, 30m, 90s,
    /// 1h30m, 2d) or a size of data written (500MiB, 64GiB, 1TB). While
    /// the volume changes, the server takes a point (a snapshot, named @ +
    /// its UTC time, of every write acknowledged so far) at most every
    /// max(1 s, DURATION / 1024), or every max(256 blocks, SIZE / 1024)
    /// written and at most one a second, and drops the points older than
    /// DURATION, or behind more than SIZE written by the host since
    /// (trims and zeroing count for nothing; after a restart the points
    /// from before it count as taken at the restart). `zftl revert --to
    /// -5m` and `zftl view --at -5m` then find the newest point at or
    /// before that time. Points give way first when writes, trims or
    /// range operations need room (the oldest reachable point moves up;
    /// never an error to the client). `off` drops the points there are;
    /// without --protect no points are taken and those on the volume are
    /// kept. Config file: protect = "1h" or protect = "64GiB".
    #[arg(long, value_name = "DURATION|SIZE", value_parser = parse_protect)]
    pub protect: Option<Protect>,
    /// Serve a simulated device held in memory (timing off) exporting MIB
    /// MiB of logical space instead of an image (the device is half as
    /// large again, at least 1 GiB, touched only as written): formatted at
    /// start, gone at exit. For trying zftl out and for benchmarks (like
    /// `nbdkit memory`).
    #[arg(
        long,
        value_name = "MIB",
        value_parser = clap::value_parser!(u64).range(1..),
        conflicts_with_all = ["image", "device"]
    )]
    pub memory_mib: Option<u64>,
}

/// Which image an FTL command works on.
#[derive(Debug, Args)]
pub struct ImageOpt {
    /// The simulated device image [default: as for `zftl` with no
    /// subcommand: $ZFTL_IMAGE, else $XDG_DATA_HOME/zftl/default.img, else
    /// $HOME/.local/share/zftl/default.img].
    #[arg(long, value_name = "PATH")]
    pub image: Option<PathBuf>,
    /// Work on this zoned device (an NVMe ZNS generic char device
    /// /dev/ngXnY, or a zoned block device such as /dev/nvmeXnY; Linux
    /// only) instead of a simulated device image.
    #[arg(long, value_name = "DEVICE", conflicts_with = "image")]
    pub device: Option<PathBuf>,
}

/// `zftl info`.
#[derive(Debug, Args)]
pub struct DeviceArg {
    /// The zoned device: an NVMe generic char device (/dev/ng0n1) or a zoned
    /// block device (/dev/nvme0n1: passthrough on its /dev/ng0n1 if that
    /// works, else the block path).
    #[arg(value_name = "DEVICE")]
    pub device: PathBuf,
}

/// Where tags go (`--tag-placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Placement {
    /// In OOB when the device has at least 32 OOB bytes per block, else in band.
    Auto,
    /// Always in band (notes in the metadata log), even with OOB.
    InBand,
}

#[derive(Debug, Args)]
pub struct FormatArgs {
    #[command(flatten)]
    pub image: ImageOpt,
    /// Logical size in blocks (thin provisioning: may exceed the media)
    /// [default: the data capacity less the GC reserve and open zones].
    #[arg(long, value_name = "N", conflicts_with = "logical_size")]
    pub logical_blocks: Option<u64>,
    /// Logical size in bytes, a multiple of the block size; K, M, G, T
    /// suffixes (powers of 1024) allowed, e.g. 64M.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub logical_size: Option<u64>,
    /// Where block tags go.
    #[arg(long, value_enum, value_name = "PLACEMENT", default_value = "auto")]
    pub tag_placement: Placement,
    /// Zones kept free so GC can always make progress.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub gc_reserve_zones: u32,
    /// Seed of the volume's UUID.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Format even if the image already holds a zftl FTL (destroys its data).
    #[arg(long)]
    pub force: bool,
}

/// `123`, `4K`, `64M`, `1G`, `2T` (powers of 1024; `KiB` etc. also read).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size in bytes (e.g. 4096, 64M, 1G)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("`{s}`: unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Create a new simulated device image; refuses to overwrite a file.
    ///
    /// The device starts from the built-in default (4 GiB: 8 channels x 2
    /// LUNs x 256 blocks x 256 pages of 4 KiB, zones 4 LUNs wide), or from
    /// --config, and each flag given overrides one field. The image is
    /// sparse: only written pages take disk space. A flag given twice
    /// takes its last value.
    #[command(args_override_self = true)]
    Create(CreateArgs),
    /// Print an image's media shape, zone geometry, statistics and wear.
    Info(ImageArg),
    /// Print the erase count of every erase block, summarised per LUN.
    EraseCounts(ImageArg),
    /// Print the default device configuration as TOML, to start a --config file.
    DefaultConfig(DefaultConfigArgs),
}

#[derive(Debug, Args)]
pub struct ImageArg {
    /// The simulated device image file.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

#[derive(Debug, Args)]
pub struct DefaultConfigArgs {
    /// Print the small configuration the tests use instead (2 x 2 LUNs,
    /// 16 blocks of 32 pages, 32 zones of 256 KiB).
    #[arg(long)]
    pub small: bool,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Path of the new image file (must not exist).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,

    /// Start from this configuration file (TOML, or JSON if it ends in
    /// .json; fields as printed by `zftl sim default-config`; missing
    /// fields take their defaults, unknown fields are an error).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Channels.
    #[arg(long, value_name = "N")]
    pub channels: Option<u32>,
    /// LUNs (dies) on each channel.
    #[arg(long, value_name = "N")]
    pub luns_per_channel: Option<u32>,
    /// Erase blocks in each LUN.
    #[arg(long, value_name = "N")]
    pub blocks_per_lun: Option<u32>,
    /// Pages in each erase block.
    #[arg(long, value_name = "N")]
    pub pages_per_block: Option<u32>,
    /// Bytes per page (the device's block size; a power of two, 512..=65536).
    #[arg(long = "page-size", value_name = "BYTES")]
    pub page_size_bytes: Option<u32>,
    /// Out-of-band bytes per page (0 = no OOB, like most ZNS drives).
    #[arg(long = "oob", value_name = "BYTES")]
    pub oob_size_bytes: Option<u32>,
    /// Minimum program unit, in pages (the device's write unit).
    #[arg(long = "program-unit", value_name = "PAGES")]
    pub program_unit_pages: Option<u32>,
    /// LUNs each zone is striped across (one erase block on each).
    #[arg(long = "zone-width", value_name = "LUNS")]
    pub zone_width_luns: Option<u32>,
    /// Zone address span in blocks (>= the zone capacity; default = capacity).
    #[arg(long = "zone-size", value_name = "BLOCKS")]
    pub zone_size_blocks: Option<u64>,
    /// Zones that may be open at once (0 = unlimited).
    #[arg(long, value_name = "N")]
    pub max_open_zones: Option<u32>,
    /// Zones that may be open or closed at once (0 = unlimited).
    #[arg(long, value_name = "N")]
    pub max_active_zones: Option<u32>,
    /// Commands that may be in flight at once.
    #[arg(long, value_name = "N")]
    pub queue_depth: Option<u32>,
    /// Erases an erase block survives before it goes bad.
    #[arg(long = "endurance", value_name = "ERASES")]
    pub endurance_erases: Option<u32>,
    /// Erase blocks (per 1000) that are bad from the factory.
    #[arg(long = "factory-bad-per-mille", value_name = "N")]
    pub factory_bad_block_per_mille: Option<u32>,
    /// Seed for everything random (factory bad blocks, faults).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_pair, parse_span, Pair, Span};

    #[test]
    fn ranges_parse() {
        assert_eq!(
            parse_pair("0:1000:256"),
            Ok(Pair {
                src: 0,
                dst: 1000,
                blocks: 256
            })
        );
        assert_eq!(parse_span("7:1"), Ok(Span { lba: 7, blocks: 1 }));
        assert_eq!(
            parse_span(&format!("{}:1", u64::MAX)),
            Ok(Span {
                lba: u64::MAX,
                blocks: 1
            })
        );
        for bad in [
            "", "1", "1:2", "1:2:3:4", "a:2:3", "-1:2:3", "1:2:0", "1::3", "1:2:3M",
        ] {
            assert!(parse_pair(bad).is_err(), "{bad}");
        }
        for bad in ["", "1", "1:0", "1:2:3", "x:1", "18446744073709551616:1"] {
            assert!(parse_span(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("2t"), Ok(2 << 40));
        assert!(parse_bytes("M").is_err());
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}
