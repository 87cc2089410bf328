//! `zns-conformance <device>`: run the backend conformance suite against a
//! zoned device: an NVMe ZNS namespace through passthrough (`/dev/ngXnY`,
//! or `/dev/nvmeXnY` when its `/dev/ngXnY` works) or a zoned block device
//! through the block path (the path is printed first). Every zone is scrubbed first (empty
//! zones finished, then everything reset, so no data of an earlier run is
//! readable); each case then gets a freshly opened device with every zone
//! reset. Power cuts cannot be simulated on a real device: those cases are
//! reported as skipped. Exit status: 0 all passed, 1 a case failed, 2 the
//! device could not be used.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

use zftl_core::backend::conformance::{self, Harness};
use zftl_core::backend::{Backend, ZoneState};
use zftl_zns::{open_device, Device, OpenError, ZnsOptions, ZoneAction};

struct ZnsHarness {
    path: String,
}

impl Harness for ZnsHarness {
    type Device = Device;

    fn fresh(&mut self) -> Device {
        let mut d =
            open_device(&self.path, &ZnsOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        d.reset_all()
            .unwrap_or_else(|e| panic!("{}: reset of every zone failed: {e}", self.path));
        d
    }

    fn power_cycle(&mut self, _device: Device) -> Option<Device> {
        None
    }
}

/// Finish every empty zone, then reset all: a reset of a non-empty zone
/// makes its old contents unreadable, which a reset of an empty zone does
/// not promise (QEMU keeps the image's bytes across restarts).
fn scrub(d: &mut Device) -> Result<(), String> {
    let g = d.geometry().clone();
    for z in 0..g.zone_count {
        let info = d.zone_info(z).map_err(|e| format!("zone_info({z}): {e}"))?;
        if info.state == ZoneState::Empty {
            d.zone_action_sync(Some(z), ZoneAction::Finish)
                .map_err(|e| format!("finish zone {z}: {e}"))?;
        }
    }
    d.reset_all().map_err(|e| format!("reset all zones: {e}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1).cloned() else {
        eprintln!("usage: zns-conformance DEVICE [case ...]   (/dev/ngXnY, /dev/nvmeXnY, a zoned block device)");
        return ExitCode::from(2);
    };
    let t0 = Instant::now();
    let mut dev = match open_device(&path, &ZnsOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("zns-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    println!("device {path}: {:?}", dev.geometry());
    match &dev {
        Device::Passthrough(d) => {
            println!("path: nvme-passthrough on {}", d.path().display());
            println!("namespace: {:?}", d.namespace_info());
        }
        Device::Block { dev: d, why } => {
            println!("path: zoned-block-device on {} ({why})", d.path().display());
            println!("block device: {:?}", d.block_info());
        }
    }
    if let Err(e) = scrub(&mut dev) {
        eprintln!("zns-conformance: {path}: scrub failed: {e}");
        return ExitCode::from(2);
    }
    // A device in use is refused, not shared.
    match open_device(&path, &ZnsOptions::default()) {
        Err(OpenError::Busy { .. }) => println!("second open while in use: refused as busy"),
        Err(e) => {
            println!("ZNS CONFORMANCE: FAIL: second open while in use: expected Busy, got: {e}");
            return ExitCode::from(1);
        }
        Ok(_) => {
            println!("ZNS CONFORMANCE: FAIL: second open while in use succeeded, expected Busy");
            return ExitCode::from(1);
        }
    }
    drop(dev);
    let mut h = ZnsHarness { path: path.clone() };
    let report = if args.len() > 2 {
        let mut r = conformance::Report::default();
        for name in &args[2..] {
            match conformance::run_one(&mut h, name) {
                Some(c) => r.cases.push(c),
                None => {
                    eprintln!("zns-conformance: no case named {name}");
                    return ExitCode::from(2);
                }
            }
        }
        r
    } else {
        conformance::run_all(&mut h)
    };
    println!("{report}");
    println!(
        "conformance on {path} took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    if report.is_success() {
        println!("ZNS CONFORMANCE: PASS");
        ExitCode::SUCCESS
    } else {
        println!("ZNS CONFORMANCE: FAIL");
        ExitCode::from(1)
    }
}
