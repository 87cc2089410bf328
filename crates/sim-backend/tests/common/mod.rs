//! Helpers shared by the integration tests.
#![allow(dead_code)]

use zftl_core::{Backend, Completion, DeviceError, Geometry};

/// A recognisable block: every byte derives from (zone, offset, salt).
pub fn block(g: &Geometry, zone: u32, offset: u64, salt: u8) -> Vec<u8> {
    let seed = (zone as u8).wrapping_mul(31) ^ (offset as u8).wrapping_mul(7) ^ salt;
    (0..g.block_size_bytes as usize)
        .map(|i| seed.wrapping_add(i as u8))
        .collect()
}

pub fn blocks(g: &Geometry, zone: u32, offset: u64, count: u64, salt: u8) -> Vec<u8> {
    (offset..offset + count)
        .flat_map(|b| block(g, zone, b, salt))
        .collect()
}

pub fn oob(g: &Geometry, zone: u32, offset: u64, count: u64) -> Vec<u8> {
    (offset..offset + count)
        .flat_map(|b| vec![(zone as u8) ^ (b as u8) ^ 0x5A; g.oob_size_bytes as usize])
        .collect()
}

/// Reaps everything in flight.
pub fn drain(dev: &mut impl Backend) -> Vec<Completion> {
    let mut out = Vec::new();
    while dev.in_flight() > 0 {
        if dev.reap(&mut out, usize::MAX) == 0 {
            dev.wait().expect("wait");
        }
    }
    out
}

pub fn is_uncorrectable(r: &Result<(Vec<u8>, Vec<u8>), DeviceError>) -> bool {
    matches!(r, Err(DeviceError::UncorrectableRead { .. }))
}
