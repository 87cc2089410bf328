//! `zftl`: the command-line tool. See `zftl --help`.
//!
//! Every command prints aligned `key: value` text, or one JSON object with
//! `--json`. Failures print one line, `zftl: error: ...`, on stderr and exit
//! with status 1 (2 for a bad command line).

mod args;
mod bench;
mod config;
mod control;
mod device;
mod error;
mod fork;
mod image;
mod paths;
mod progress;
mod range;
mod report;
mod revert;
mod serve;
mod snapshot;
mod view;
mod volume;
mod when;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;

use args::{Cli, Command, CreateArgs, DefaultConfigArgs, SimCommand};
use error::CliError;
use image::Action;
use report::EraseCountsReport;
use zftl_core::FtlConfig;
use zftl_sim::SimConfig;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with status 0; usage errors to
            // stderr with status 2, in clap's own format.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e @ CliError::Usage(_)) => {
            eprintln!("zftl: error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("zftl: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<(), CliError> {
    // The FTL checksums every block it writes or reads: time the data CRC
    // implementations first (about 5 ms) and run the fastest in every
    // volume this command opens (`ftl`, the configuration they start
    // from). Commands that only create or inspect an image, or read a
    // device's geometry, skip it.
    let crc = if checksums_data(cli.command.as_ref()) {
        zftl::data_crc::choose_fastest()
    } else {
        Vec::new()
    };
    let ftl = &FtlConfig {
        data_crc: crc.first().map(|t| t.imp),
        ..FtlConfig::default()
    };
    match &cli.command {
        None => main_job(cli, ftl),
        Some(Command::Sim(SimCommand::Create(args))) => sim_create(args, cli.json),
        Some(Command::Sim(SimCommand::Info(args))) => {
            let mut dev = image::open(&args.path)?;
            let report = image::info(&args.path, &mut dev, Action::Opened)?;
            emit(cli.json, &report, || report.text().render())
        }
        Some(Command::Sim(SimCommand::EraseCounts(args))) => {
            let dev = image::open(&args.path)?;
            let shown = args.path.display().to_string();
            let report = EraseCountsReport::new(shown, dev.config(), dev.erase_counts());
            emit(cli.json, &report, || report.render())
        }
        Some(Command::Sim(SimCommand::DefaultConfig(args))) => default_config(args, cli.json),
        Some(Command::Format(args)) => {
            let report = volume::format(args, cli.image.as_ref(), ftl)?;
            emit(cli.json, &report, || report.text().render())
        }
        Some(Command::Stats(args)) => {
            let report = volume::stats(args, cli.image.as_ref(), ftl)?;
            emit(cli.json, &report, || report.text().render())
        }
        Some(Command::Check(args)) => {
            let (path, out) = volume::check(args, cli.image.as_ref(), ftl.data_crc_impl())?;
            emit(cli.json, &out, || out.render())?;
            if out.clean {
                Ok(())
            } else {
                let err = CliError::Damaged {
                    path,
                    problems: out.report.summary.problems_total,
                };
                Err(if args.device.is_some() {
                    err.on_device()
                } else {
                    err
                })
            }
        }
        Some(Command::Bench(args)) => bench::run(args, cli.json, ftl),
        Some(Command::Serve(args)) => serve::run(args, cli.image.as_ref(), &crc),
        Some(Command::Range(args)) => range::run(args, cli.image.as_ref(), cli.json),
        Some(Command::Snapshot(args)) => snapshot::run(args, cli.image.as_ref(), cli.json),
        Some(Command::Fork(args)) => fork::run(args, cli.image.as_ref(), cli.json),
        Some(Command::Revert(args)) => revert::run(args, cli.image.as_ref(), cli.json),
        Some(Command::View(args)) => view::run(args, cli.image.as_ref(), cli.json),
        Some(Command::Info(args)) => {
            let report = device::info(&args.device)?;
            emit(cli.json, &report, || report.text().render())
        }
    }
}

/// Whether `command` runs the FTL (or a benchmark of it), which checksums
/// data: not `sim …` (image creation and inspection), `info` nor `view`
/// (a question to a server).
fn checksums_data(command: Option<&Command>) -> bool {
    !matches!(
        command,
        Some(Command::Sim(_)) | Some(Command::Info(_)) | Some(Command::View(_))
    )
}

/// What the main job prints: the device, then the FTL on it.
#[derive(Serialize)]
struct MainReport {
    #[serde(flatten)]
    device: report::InfoReport,
    ftl: volume::MainFtlReport,
}

/// The main job: open (or create) the default image, format the FTL on it
/// if it holds none, mount it, and describe the device and the FTL.
fn main_job(cli: &Cli, ftl: &FtlConfig) -> Result<(), CliError> {
    let path = match &cli.image {
        Some(path) => path.clone(),
        None => paths::default_image_path()?,
    };
    let (mut dev, action) = image::open_or_create(&path)?;
    let ftl = volume::main_job_ftl(&path, &mut dev, ftl)?;
    let device = image::info(&path, &mut dev, action)?;
    let report = MainReport { device, ftl };
    emit(cli.json, &report, || {
        let mut t = report.device.text();
        t.line(volume::main_job_line(&report.ftl));
        report.ftl.write(&mut t);
        t.render()
    })
}

fn sim_create(args: &CreateArgs, json: bool) -> Result<(), CliError> {
    let cfg = config::from_args(args)?;
    let mut dev = image::create(&args.path, cfg)?;
    let report = image::info(&args.path, &mut dev, Action::Created)?;
    emit(json, &report, || report.text().render())
}

fn default_config(args: &DefaultConfigArgs, json: bool) -> Result<(), CliError> {
    let cfg = if args.small {
        SimConfig::small_for_tests()
    } else {
        SimConfig::default()
    };
    let text = || {
        let body = toml::to_string(&cfg).unwrap_or_else(|e| format!("# cannot render: {e}\n"));
        format!("# zftl simulated device configuration (zftl sim create --config FILE)\n{body}")
    };
    emit(json, &cfg, text)
}

/// Prints `value` as one JSON object, or the text `render` makes.
pub(crate) fn emit<T: Serialize>(
    json: bool,
    value: &T,
    render: impl FnOnce() -> String,
) -> Result<(), CliError> {
    let mut out = if json {
        serde_json::to_string_pretty(value).map_err(|e| CliError::Output(io::Error::other(e)))?
    } else {
        render()
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(CliError::Output)
}
