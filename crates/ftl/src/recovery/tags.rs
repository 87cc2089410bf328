//! Mount step 4 (OOB tags): the tags of host blocks written since the
//! checkpoint, read from the data zones that may hold them.

use super::log_reader::read_one;
use super::replay::Event;
use super::{zone_use_code, RecordKind};
use crate::addr::{Ppa, Seq};
use crate::backend::{Backend, BackendExt, DeviceError, Geometry, ZoneId, ZoneState};
use crate::checkpoint::CheckpointImage;
use crate::error::MountError;
use crate::layout::Layout;
use crate::nameless::{decode_any_tag, AnyTag, NamelessTagKind};
use crate::tag::{DataCrcImpl, TagKind};
use crate::zone::ZoneUse;
use std::collections::HashMap;

/// Step 4 (OOB mode): tags of host blocks written since the checkpoint, in
/// zones that were open or empty then, or reset after it.
pub(super) fn scan_tags<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    layout: &Layout,
    image: &CheckpointImage,
    reports: &[crate::backend::ZoneInfo],
    resets: &HashMap<ZoneId, Seq>,
    crc: DataCrcImpl,
) -> Result<Vec<Event>, MountError> {
    let mut events = Vec::new();
    for z in layout.first_data_zone()..g.zone_count {
        let rec = &image.zones[z as usize];
        let report = &reports[z as usize];
        let was_full = rec.state == zone_use_code(ZoneUse::Full) && rec.kind != RecordKind::Free;
        if report.write_pointer_blocks == 0
            || report.state == ZoneState::Offline
            || (was_full && !resets.contains_key(&z))
        {
            continue;
        }
        let min_seq = resets
            .get(&z)
            .map_or(image.next_seq, |&r| r.max(image.next_seq));
        let scan = ZoneScan {
            g,
            zone: z,
            min_seq,
            crc,
        };
        scan_zone(backend, &scan, report.write_pointer_blocks, &mut events)?;
    }
    Ok(events)
}

/// One data zone's scan: the tags of host blocks of seq `min_seq` and
/// later whose data matches their CRC (taken with `crc`).
struct ZoneScan<'a> {
    g: &'a Geometry,
    zone: ZoneId,
    min_seq: Seq,
    crc: DataCrcImpl,
}

fn scan_zone<B: Backend>(
    backend: &mut B,
    scan: &ZoneScan,
    wp: u64,
    out: &mut Vec<Event>,
) -> Result<(), MountError> {
    let zone = scan.zone;
    let chunk = u64::from(scan.g.max_transfer_blocks);
    let mut off = 0;
    while off < wp {
        let n = chunk.min(wp - off);
        match backend.read_blocks(zone, off, n as u32) {
            Ok((data, oob)) => collect_tags(scan, off, &data, &oob, out),
            // A torn block fails the whole read, an aborted one may have
            // failed for the host: retry block by block.
            Err(DeviceError::UncorrectableRead { .. } | DeviceError::HostIo { .. }) => {
                for o in off..off + n {
                    if let Some((data, oob)) = read_one(backend, zone, o, "mount: scanning tags")? {
                        collect_tags(scan, o, &data, &oob, out);
                    }
                }
            }
            Err(e) => {
                return Err(MountError::Device {
                    step: "mount: scanning tags",
                    source: e,
                })
            }
        }
        off += n;
    }
    Ok(())
}

fn collect_tags(scan: &ZoneScan, first: u64, data: &[u8], oob: &[u8], out: &mut Vec<Event>) {
    let g = scan.g;
    let bs = g.block_size_bytes as usize;
    let ob = g.oob_size_bytes as usize;
    for i in 0..data.len() / bs {
        let block = &data[i * bs..(i + 1) * bs];
        let tag = match decode_any_tag(&oob[i * ob..(i + 1) * ob]) {
            Ok(Some(AnyTag::Block(tag))) => tag,
            Ok(Some(AnyTag::Nameless(tag, _))) => {
                // Moved and staged copies never count (format.md §11).
                if tag.kind == NamelessTagKind::Data
                    && tag.seq >= scan.min_seq
                    && scan.crc.checksum(block) == tag.data_crc
                {
                    out.push(Event::NamelessTag {
                        seq: tag.seq,
                        ppa: Ppa::new(scan.zone, first + i as u64, g.zone_capacity_blocks),
                        birth_gen: tag.birth_gen,
                        link: tag.link,
                    });
                }
                continue;
            }
            _ => continue,
        };
        if tag.kind != TagKind::HostData
            || tag.seq < scan.min_seq
            || scan.crc.checksum(block) != tag.data_crc
        {
            continue;
        }
        let ppa = Ppa::new(scan.zone, first + i as u64, g.zone_capacity_blocks);
        out.push(Event::Tag {
            seq: tag.seq,
            lba: tag.lba,
            ppa,
            crc: tag.data_crc,
        });
    }
}
