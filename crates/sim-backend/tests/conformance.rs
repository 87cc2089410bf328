//! The shared Backend conformance suite against the simulator in several
//! shapes: memory, timing on, 4-page program units, image file, shuffled
//! completions.

use zftl_core::backend::conformance::{run_all, Harness};
use zftl_sim::{NandScheduling, SimConfig, SimDevice, Timing};

struct SimHarness {
    cfg: SimConfig,
    dir: Option<tempfile::TempDir>,
    made: u32,
}

impl Harness for SimHarness {
    type Device = SimDevice;

    fn fresh(&mut self) -> SimDevice {
        self.made += 1;
        match &self.dir {
            None => SimDevice::create_memory(self.cfg.clone()).expect("device"),
            Some(dir) => {
                let path = dir.path().join(format!("dev{}.img", self.made));
                SimDevice::create_file(&path, self.cfg.clone()).expect("device")
            }
        }
    }

    fn power_cycle(&mut self, mut device: SimDevice) -> Option<SimDevice> {
        device.power_cut();
        device.power_on().expect("power on");
        Some(device)
    }
}

fn check(name: &str, cfg: SimConfig, file: bool) {
    let dir = file.then(|| tempfile::tempdir().expect("tempdir"));
    let mut h = SimHarness { cfg, dir, made: 0 };
    let report = run_all(&mut h);
    // Every case applies to the simulator (it cuts power, and each shape
    // here has the zones and limits every case needs): a skip is a failure,
    // as in the suite's own run on its reference device.
    assert!(
        report.is_success() && report.skipped() == 0,
        "{name}:\n{report}"
    );
}

#[test]
fn memory() {
    check("memory", SimConfig::small_for_tests(), false);
}

#[test]
fn timing_on_and_shuffled() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.timing = Some(Timing::default());
    cfg.faults.shuffle_completions = true;
    check("timing", cfg, false);
}

#[test]
fn reads_passing_programs_and_suspending_them() {
    for scheduling in [NandScheduling::ReadPriority, NandScheduling::Suspend] {
        let mut cfg = SimConfig::small_for_tests();
        cfg.timing = Some(Timing {
            scheduling,
            ..Timing::default()
        });
        cfg.faults.shuffle_completions = true;
        check(&format!("{scheduling:?}"), cfg, false);
    }
}

#[test]
fn four_page_program_units() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.program_unit_pages = 4;
    cfg.zone_size_blocks = Some(128);
    check("program unit 4", cfg, false);
}

#[test]
fn image_file() {
    check("file", SimConfig::small_for_tests(), true);
}
