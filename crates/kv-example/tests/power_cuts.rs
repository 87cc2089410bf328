//! Power cuts at random device commands under a random mix of puts,
//! overwrites, deletes, gets and syncs, on the simulator, and (every other
//! cut) again while the store reopens and takes the hand-over: after each
//! remount and reopen, every key holds its value of the last sync or of a
//! put or delete after it (a synced delete stays deleted), reads between
//! cuts return the latest value, and (nameless values) the FTL's live
//! nameless blocks are exactly the values the index names: nothing leaks.
//! With values nameless, and with them in a logical value area.
//!
//! `ZFTL_SEED=n` replays one seed, `ZFTL_SEEDS=n` or `a..b` runs many.

use std::collections::BTreeMap;

use zftl::core::{Driver, FormatOptions, FtlConfig, IoError, NamelessError, TagPlacement};
use zftl::sim::rng::Rng;
use zftl::sim::{Faults, PowerCut, SimConfig, SimDevice};
use zftl_kv::{KvError, Store, StoreOptions, ValuePlacement};

/// Keys the torture uses: the 12 buckets are 87 % full, so puts probe
/// past full buckets and deletes make room behind them; their values fill
/// a third of the device, so GC moves some of them.
const KEYS: u32 = 480;
const BUCKETS: u32 = 12;
const MAX_REPLACED: usize = 64;

/// `oob`: 64 bytes of OOB (tags and md there), else none (tags in band,
/// md in the log and md groups).
fn sim(seed: u64, oob: bool) -> SimConfig {
    SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 12,
        pages_per_block: 32,
        oob_size_bytes: if oob { 64 } else { 0 },
        zone_width_luns: 1,
        max_open_zones: 8,
        max_active_zones: 12,
        max_append_blocks: 8,
        max_transfer_blocks: 16,
        queue_depth: 32,
        timing: None,
        faults: Faults {
            seed,
            shuffle_completions: true,
            ..Faults::default()
        },
        ..SimConfig::small_for_tests()
    }
}

fn ftl_config(seed: u64) -> FtlConfig {
    FtlConfig {
        write_buffer_blocks: 64,
        // Every third seed: no checkpoint but the mount's (long replays).
        checkpoint_interval_blocks: if seed % 3 == 1 { u64::MAX } else { 256 },
        gc_max_inflight: 8,
        ..FtlConfig::default()
    }
}

fn key(k: u32) -> Vec<u8> {
    let mut key = k.to_le_bytes().to_vec();
    key.resize(4 + (k as usize * 13) % 61, b'-');
    key
}

/// Value `n` of a key: any length up to a block, naming its key and `n`.
fn value(k: u32, n: u64, len: usize) -> Vec<u8> {
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(k);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// What one key may hold.
#[derive(Default)]
struct KeyModel {
    /// Its contents now (`None`: absent).
    latest: Option<Vec<u8>>,
    /// What a cut may leave: the contents at the last sync, then each put
    /// or delete since (the one a cut interrupted included).
    allowed: Vec<Option<Vec<u8>>>,
}

struct Rig {
    store: Option<Store<Driver<SimDevice>>>,
    cfg: FtlConfig,
    model: BTreeMap<u32, KeyModel>,
    rng: Rng,
    next_value: u64,
    armed: bool,
    values: ValuePlacement,
    cuts: u64,
    open_cuts: u64,
    keys_checked: u64,
    no_space: u64,
    /// Values GC moved (the store followed their events), before each cut.
    migrated: u64,
}

impl Rig {
    fn new(seed: u64, values: ValuePlacement, oob: bool) -> Rig {
        let cfg = ftl_config(seed);
        let mut sim = sim(seed, oob);
        if matches!(values, ValuePlacement::Nameless) {
            // Small enough that GC migrates values in most seeds' runs (the
            // logical value area would not fit).
            sim.blocks_per_lun = 8;
        }
        let dev = SimDevice::create_memory(sim).unwrap();
        let opts = FormatOptions {
            tag_placement: if oob {
                TagPlacement::Auto
            } else {
                TagPlacement::InBand
            },
            seed,
            gc_reserve_zones: 3,
            ..FormatOptions::default()
        };
        let volume = Driver::format(dev, &opts, cfg.clone()).unwrap();
        let store_opts = StoreOptions {
            buckets: BUCKETS,
            values,
            max_replaced: MAX_REPLACED,
        };
        let store = Store::create(volume, 0, store_opts).unwrap();
        let model = (0..KEYS)
            .map(|k| {
                let m = KeyModel {
                    latest: None,
                    allowed: vec![None],
                };
                (k, m)
            })
            .collect();
        Rig {
            store: Some(store),
            cfg,
            model,
            rng: Rng::new(seed ^ 0x6B76),
            next_value: 1,
            armed: false,
            values,
            cuts: 0,
            open_cuts: 0,
            keys_checked: 0,
            no_space: 0,
            migrated: 0,
        }
    }

    fn store(&mut self) -> &mut Store<Driver<SimDevice>> {
        self.store.as_mut().unwrap()
    }

    /// A put or a delete of key `k` (`None`): the model learns it may
    /// happen before the call, and that it did after.
    fn change(&mut self, k: u32, to: Option<Vec<u8>>) -> Result<(), KvError> {
        self.model.get_mut(&k).unwrap().allowed.push(to.clone());
        let done = match &to {
            Some(v) => self.store().put(&key(k), v),
            None => self.store().delete(&key(k)).map(drop),
        };
        match done {
            Ok(()) => self.model.get_mut(&k).unwrap().latest = to,
            // The space nameless zones strand (see the crate docs): the
            // change was not made, or (its bucket's write failed after its
            // value's) it was, in memory, until a sync writes the bucket.
            Err(KvError::Io(
                IoError::NoSpace | IoError::Nameless(NamelessError::MovesUnacknowledged { .. }),
            )) => {
                self.no_space += 1;
                let now = self.store().get(&key(k))?;
                let m = self.model.get_mut(&k).unwrap();
                assert!(
                    now == m.latest || now == to,
                    "key {k} after a put out of space"
                );
                m.latest = now;
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// One random operation; `Err` only from a power cut.
    fn step(&mut self) -> Result<(), KvError> {
        let k = (self.rng.next_u64() % u64::from(KEYS)) as u32;
        match self.rng.next_u64() % 100 {
            0..=54 => {
                let n = self.next_value;
                self.next_value += 1;
                let len = (self.rng.next_u64() % 4097) as usize;
                self.change(k, Some(value(k, n, len)))?;
            }
            55..=69 => self.change(k, None)?,
            70..=89 => {
                let got = self.store().get(&key(k))?;
                assert_eq!(got, self.model[&k].latest, "get of key {k}");
            }
            _ => {
                self.store().sync()?;
                for m in self.model.values_mut() {
                    m.allowed = vec![m.latest.clone()];
                }
            }
        }
        Ok(())
    }

    fn arm(&mut self) {
        let after = 1 + self.rng.next_u64() % 600;
        let seed = self.rng.next_u64();
        self.store().volume_mut().backend_mut().set_faults(Faults {
            seed,
            power_cut: PowerCut::AfterSubmits(after),
            shuffle_completions: true,
            ..Faults::default()
        });
        self.armed = true;
    }

    fn crash_and_check(&mut self) {
        self.cuts += 1;
        self.migrated += self.store().volume_mut().stats().nameless_migrated_blocks;
        let mut dev = self.store.take().unwrap().into_volume().into_backend();
        self.armed = false;
        loop {
            dev.power_cut();
            dev.power_on().unwrap();
            dev.set_faults(Faults::default());
            let mut volume = Driver::mount(dev, self.cfg.clone()).expect("mount after a cut");
            if self.rng.next_u64().is_multiple_of(2) {
                // Another cut while the store opens (and takes the hand-over)
                // over the borrowed volume; if it came, cut and mount again.
                let after = 1 + self.rng.next_u64() % 16;
                let seed = self.rng.next_u64();
                volume.backend_mut().set_faults(Faults {
                    seed,
                    power_cut: PowerCut::AfterSubmits(after),
                    shuffle_completions: true,
                    ..Faults::default()
                });
                match Store::open(&mut volume, 0, MAX_REPLACED) {
                    Ok(_) => volume.backend_mut().set_faults(Faults::default()),
                    Err(KvError::Io(IoError::DeviceGone | IoError::ReadOnly)) => {
                        self.open_cuts += 1;
                        dev = volume.into_backend();
                        continue;
                    }
                    Err(e) => panic!("open failed without a power cut: {e}"),
                }
            }
            let store = Store::open(volume, 0, MAX_REPLACED).expect("open after a cut");
            self.store = Some(store);
            break;
        }
        self.check_after_cut();
    }

    /// Every key holds what the model allows; that is durable from here.
    fn check_after_cut(&mut self) {
        let mut present = 0;
        for k in 0..KEYS {
            let got = self
                .store()
                .get(&key(k))
                .unwrap_or_else(|e| panic!("get of key {k} after a cut: {e}"));
            let m = self.model.get_mut(&k).unwrap();
            assert!(
                m.allowed.contains(&got),
                "key {k} holds {:?} after a cut; allowed {:?}",
                got.as_ref().map(|v| v.len()),
                m.allowed
                    .iter()
                    .map(|a| a.as_ref().map(|v| v.len()))
                    .collect::<Vec<_>>()
            );
            present += usize::from(got.is_some());
            m.latest = got.clone();
            m.allowed = vec![got];
            self.keys_checked += 1;
        }
        let nameless = matches!(self.values, ValuePlacement::Nameless);
        let store = self.store();
        assert_eq!(store.len(), present, "entries the index holds");
        let s = store.volume_mut().stats();
        if nameless {
            // The open took the hand-over and committed: every live block
            // is a value an entry names.
            assert_eq!(
                s.nameless_live_blocks, present as u64,
                "nameless blocks live after the hand-over, keys held"
            );
        } else {
            assert!(s.mapped_blocks >= present as u64, "keys without a block");
        }
    }

    fn run(mut self, rounds: u32) -> Rig {
        for _ in 0..rounds {
            self.arm();
            for _ in 0..300 {
                match self.step() {
                    Ok(()) => {}
                    Err(KvError::Io(IoError::DeviceGone | IoError::ReadOnly)) if self.armed => {
                        self.crash_and_check();
                        break;
                    }
                    Err(e) => panic!("failed without a power cut: {e}"),
                }
            }
            if self.armed {
                self.crash_and_check();
            }
        }
        self
    }
}

/// The seeds to run: `ZFTL_SEED`, else `ZFTL_SEEDS` (`n` or `a..b`), else
/// `0..default`.
fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("ZFTL_SEED") {
        return vec![s.parse().expect("ZFTL_SEED must be a number")];
    }
    match std::env::var("ZFTL_SEEDS") {
        Ok(v) => match v.split_once("..") {
            Some((a, b)) => {
                (a.parse().expect("ZFTL_SEEDS a..b")..b.parse().expect("ZFTL_SEEDS a..b")).collect()
            }
            None => (0..v.parse().expect("ZFTL_SEEDS must be n or a..b")).collect(),
        },
        Err(_) => (0..default).collect(),
    }
}

/// Runs the torture on each seed with the values placed by `values`,
/// printing the replay command of a seed that fails.
fn torture(test: &str, default_seeds: u64, values: ValuePlacement, oob: bool) {
    let (mut cuts, mut open_cuts, mut checked, mut no_space, mut migrated) = (0, 0, 0, 0, 0);
    let seeds = seeds(default_seeds);
    for &seed in &seeds {
        let run = std::panic::catch_unwind(|| Rig::new(seed, values, oob).run(8));
        let rig = run.unwrap_or_else(|e| {
            eprintln!(
                "\n{test} FAILED at seed {seed}; replay: \
                 ZFTL_SEED={seed} cargo test --release -p zftl-kv --test power_cuts {test} -- --exact"
            );
            std::panic::resume_unwind(e)
        });
        cuts += rig.cuts;
        open_cuts += rig.open_cuts;
        checked += rig.keys_checked;
        no_space += rig.no_space;
        migrated += rig.migrated;
    }
    eprintln!(
        "{test}: {} seeds, {cuts} cuts ({open_cuts} more while opening), {checked} keys \
         checked after them, {no_space} puts out of space, {migrated} values moved by GC",
        seeds.len()
    );
    assert!(seeds.is_empty() || (cuts > 0 && checked > 0));
    // About one cut while opening per seed: a replay of one seed may have
    // none, a run of the default seeds has many.
    assert!(
        seeds.len() < 20 || open_cuts > 0,
        "no cut came while opening"
    );
    let nameless = matches!(values, ValuePlacement::Nameless);
    assert!(
        !nameless || seeds.len() < 20 || migrated > 0,
        "GC moved no value: the store's following of migrations went untested"
    );
}

#[test]
fn synced_values_survive_power_cuts() {
    torture(
        "synced_values_survive_power_cuts",
        40,
        ValuePlacement::Nameless,
        true,
    );
}

/// The same with tags in band: the store's values carry their md in the
/// log and the zones' md groups.
#[test]
fn synced_values_survive_power_cuts_in_band() {
    torture(
        "synced_values_survive_power_cuts_in_band",
        40,
        ValuePlacement::Nameless,
        false,
    );
}

/// The same store with its values in a logical value area (the baseline
/// `zftl bench nameless` measures against).
#[test]
fn synced_values_survive_power_cuts_with_logical_values() {
    let values = ValuePlacement::Logical {
        blocks: u64::from(KEYS) + 2 * MAX_REPLACED as u64,
    };
    torture(
        "synced_values_survive_power_cuts_with_logical_values",
        20,
        values,
        true,
    );
}
