//! The command line, as clap derive structs. Every option says its unit.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const ABOUT: &str =
    "zftl: a host-side flash translation layer for zoned flash, and its NAND simulator";

const LONG_ABOUT: &str = "\
zftl: a host-side flash translation layer for zoned flash, and its NAND simulator.

With no subcommand, zftl opens the default simulated device image (creating a
4 GiB sparse image of 1024 zones if there is none yet) and prints its
geometry and statistics.

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
