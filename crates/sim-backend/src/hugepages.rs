//! Transparent huge pages for large in-memory media.
//!
//! Garbage collection reads live blocks scattered over the whole media, and
//! with 4 KiB pages nearly every such read also misses the TLB; advising
//! huge pages makes those reads and the copies out of the media cheaper
//! (the figures: docs/bench-nbd.md, "What sets the defaults"). Small media
//! are left alone: they fit the TLB's reach anyway, and a huge page zeroes
//! 2 MiB on first touch where tests write a few scattered pages of many
//! small devices.

use std::io;

/// Media at least this large ask for huge pages.
pub(crate) const HUGE_PAGE_MIN_BYTES: usize = 256 << 20;

/// The base page size madvise's range is aligned to (4 KiB on x86_64 and
/// most arm64 kernels; with a larger one the call fails, harmlessly).
const BASE_PAGE_BYTES: usize = 4096;

/// Asks the kernel to back `memory` with transparent huge pages, if it is
/// at least [`HUGE_PAGE_MIN_BYTES`]. Advisory: the caller may drop the
/// error (a kernel without THP refuses, and nothing changes).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn advise(memory: &mut [u8]) -> io::Result<()> {
    if memory.len() < HUGE_PAGE_MIN_BYTES {
        return Ok(());
    }
    let range = page_aligned(memory);
    // SAFETY: the range lies inside `memory`, which this call borrows
    // mutably, so no other reference observes it; MADV_HUGEPAGE only
    // changes how the kernel backs the pages, never their contents.
    unsafe {
        rustix::mm::madvise(
            range.as_mut_ptr().cast(),
            range.len(),
            rustix::mm::Advice::LinuxHugepage,
        )
    }
    .map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn advise(_memory: &mut [u8]) -> io::Result<()> {
    Ok(())
}

/// The whole base pages inside `memory`: madvise wants a page-aligned
/// start, and an allocator's block does not begin on one.
fn page_aligned(memory: &mut [u8]) -> &mut [u8] {
    let skip = memory
        .as_ptr()
        .align_offset(BASE_PAGE_BYTES)
        .min(memory.len());
    let rest = &mut memory[skip..];
    let len = rest.len() - rest.len() % BASE_PAGE_BYTES;
    &mut rest[..len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advised_range_is_the_whole_pages_inside_the_buffer() {
        let mut buf = vec![0u8; 5 * BASE_PAGE_BYTES];
        let start = buf.as_ptr() as usize;
        for (from, to) in [(0, buf.len()), (1, buf.len() - 3), (7, 2 * BASE_PAGE_BYTES)] {
            let range = page_aligned(&mut buf[from..to]);
            let at = range.as_ptr() as usize;
            assert_eq!(at % BASE_PAGE_BYTES, 0);
            assert_eq!(range.len() % BASE_PAGE_BYTES, 0);
            assert!(at >= start + from && at + range.len() <= start + to);
            assert!(at - (start + from) < BASE_PAGE_BYTES);
            assert!(start + to - (at + range.len()) < BASE_PAGE_BYTES);
        }
        assert!(page_aligned(&mut buf[1..9]).is_empty());
    }

    /// MADV_HUGEPAGE succeeds on any kernel built with THP (the sysfs
    /// directory exists), whatever its mode: a refusal here means the
    /// range is wrong, as an unaligned start once made it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_kernel_with_thp_accepts_the_advice_and_the_memory_stays_usable() {
        let mut memory = vec![0u8; HUGE_PAGE_MIN_BYTES + 12_345];
        let result = advise(&mut memory);
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            result.expect("MADV_HUGEPAGE on the media's memory");
        }
        memory[HUGE_PAGE_MIN_BYTES / 2] = 7;
        assert_eq!(memory[HUGE_PAGE_MIN_BYTES / 2], 7);
        assert_eq!(memory[HUGE_PAGE_MIN_BYTES / 2 + 1], 0);
    }
}
