//! Request header decode + validation, exactly as the transmission reader
//! runs them, under limits chosen by the input. Whatever validates must be
//! safe to hand to the volume: the request's own range, aligned to the
//! minimum block size (512; the volume's blocks may be larger), inside the
//! export, within the advertised payload size, FAST_ZERO only on whole
//! blocks, and no write on a read-only export.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zftl_nbd::fuzzing::{check, Limits, Op, RequestHeader, REQUEST_HEADER_BYTES};
use zftl_nbd::proto::*;

fn limits(k: &[u8]) -> Limits {
    let byte = |i: usize| k.get(i).copied().unwrap_or(0);
    // Block sizes the export table accepts: powers of two in 512..=65536.
    let block_size = 512u64 << (byte(0) % 8);
    let blocks = u64::from_be_bytes([
        byte(1),
        byte(2),
        byte(3),
        byte(4),
        byte(5),
        byte(6),
        byte(7),
        byte(8),
    ]);
    // Any size (a volume's logical_blocks * block_size saturates).
    let size_bytes = match byte(9) % 4 {
        0 => blocks.saturating_mul(block_size),
        1 => (blocks % (1 << 20)) * block_size,
        2 => u64::MAX,
        _ => blocks,
    };
    // The advertised maximum: a multiple of the block size, at least one block.
    let max_blocks = u32::from_be_bytes([byte(10), byte(11), byte(12), byte(13)]);
    let max_payload = (u64::from(max_blocks.max(1)) * block_size)
        .min(u64::from(u32::MAX / block_size as u32) * block_size) as u32;
    Limits {
        block_size,
        // What the server advertises: 512, or the block size if smaller.
        min_block_size: 512.min(block_size),
        size_bytes,
        max_payload,
        read_only: byte(14) & 1 != 0,
        structured: byte(14) & 2 != 0,
        meta_contexts: u32::from((byte(14) >> 2) & 3),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < REQUEST_HEADER_BYTES {
        return;
    }
    let (raw, knobs) = data.split_at(REQUEST_HEADER_BYTES);
    let raw: &[u8; REQUEST_HEADER_BYTES] = raw.try_into().unwrap();
    // Most inputs should get past the magic; force it on a knob bit.
    let mut raw = *raw;
    if knobs.get(15).is_some_and(|b| b & 1 != 0) {
        raw[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    }
    let h = match RequestHeader::decode(&raw) {
        Ok(h) => h,
        Err(BadRequestMagic(m)) => {
            assert_ne!(m, REQUEST_MAGIC);
            return;
        }
    };
    assert_eq!(h.encode(), raw, "header does not round-trip");
    let l = limits(knobs);
    let min = l.min_block_size;
    let in_range = |offset: u64, length: u32| {
        assert!(length > 0);
        assert_eq!((offset, length), (h.offset, h.length));
        assert_eq!(offset % min, 0, "{h:?} not aligned to {min}");
        assert_eq!(u64::from(length) % min, 0, "{h:?} not aligned to {min}");
        let end = offset.checked_add(u64::from(length)).expect("no overflow");
        assert!(end <= l.size_bytes, "{h:?} beyond {l:?}");
    };
    match check(&l, &h) {
        Ok(Op::Read { offset, length }) => {
            assert_eq!(h.command, CMD_READ);
            in_range(offset, length);
            assert!(h.length <= l.max_payload);
        }
        Ok(Op::Write {
            offset,
            length,
            fua,
        }) => {
            assert_eq!(h.command, CMD_WRITE);
            assert!(!l.read_only);
            in_range(offset, length);
            assert!(h.length <= l.max_payload);
            assert_eq!(fua, h.flags & CMD_FLAG_FUA != 0);
        }
        Ok(Op::Trim { offset, length, .. }) => {
            assert_eq!(h.command, CMD_TRIM);
            assert!(!l.read_only);
            in_range(offset, length);
        }
        Ok(Op::Zero {
            offset,
            length,
            no_hole,
            ..
        }) => {
            assert_eq!(h.command, CMD_WRITE_ZEROES);
            assert!(!l.read_only);
            in_range(offset, length);
            let fast = h.flags & CMD_FLAG_FAST_ZERO != 0;
            assert!(!(no_hole && fast));
            // A fast zeroing never reads and writes back part of a block.
            if fast {
                assert_eq!(offset % l.block_size, 0, "{h:?}");
                assert_eq!(u64::from(length) % l.block_size, 0, "{h:?}");
            }
        }
        Ok(Op::Flush) => {
            assert_eq!(h.command, CMD_FLUSH);
            assert_eq!((h.offset, h.length), (0, 0));
        }
        Ok(Op::BlockStatus { offset, length, .. }) => {
            assert_eq!(h.command, CMD_BLOCK_STATUS);
            assert!(l.structured && l.meta_contexts > 0);
            assert!(length > 0);
            let end = offset.checked_add(u64::from(length)).expect("no overflow");
            assert!(end <= l.size_bytes);
        }
        Ok(Op::Disc) => assert_eq!(h.command, CMD_DISC),
        Err((errno, message)) => {
            assert!(!message.is_empty());
            let _ = errno.code();
        }
    }
});
