//! The NAND media: page contents, OOB bytes, the page-state table and the
//! erase-block table, held in memory or written through to an image file.
//!
//! The media knows pages and erase blocks, never zones; program order and
//! zone rules are the device's business. It asserts the one physical rule
//! that a bug could break: a page is programmed only when erased.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use zftl_core::ZoneState;

use crate::config::SimConfig;
use crate::error::SimError;
use crate::image::{self, ImageLayout, PageState, ERASE_ENTRY_BYTES, ZONE_ENTRY_BYTES};
use crate::{hugepages, streaming};

/// Page bytes in memory start on this boundary: copies to and from
/// aligned pages run faster.
const PAGE_ALIGN_BYTES: usize = 4096;

/// Where page bytes live.
enum Store {
    /// `vec![0; n]` is allocated lazily by the OS, so a 16 GiB device costs
    /// only what is written (in 2 MiB huge pages if the media is large:
    /// `hugepages`).
    Memory {
        data: Vec<u8>,
        /// Where page 0 starts in `data`: the first 4 KiB boundary.
        base: usize,
        oob: Vec<u8>,
    },
    /// Write-through positional I/O on the image file.
    File {
        file: File,
        path: PathBuf,
        layout: ImageLayout,
    },
}

/// Page contents plus the per-page and per-erase-block tables.
pub(crate) struct Media {
    store: Store,
    page_size: usize,
    oob_size: usize,
    pages_per_block: u64,
    page_state: Vec<u8>,
    erase_count: Vec<u32>,
    eb_flags: Vec<u8>,
    /// Gathers the units of one run (file mode), reused across programs.
    scratch: Vec<u8>,
}

/// Whether every byte is zero (an empty slice is: empty OOB means zeros).
fn is_zero(bytes: &[u8]) -> bool {
    let (words, rest) = bytes.as_chunks::<16>();
    words.iter().all(|w| u128::from_ne_bytes(*w) == 0) && rest.iter().all(|&b| b == 0)
}

/// Makes `len` bytes at `offset` of the image read as zeros without
/// holding disk: a hole where the file system can, else written zeros.
fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{fallocate, FallocateFlags};
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        match fallocate(file, flags, offset, len) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP => {}
            Err(e) => return Err(e.into()),
        }
    }
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(ZEROS.len() as u64);
        file.write_all_at(&ZEROS[..n as usize], offset + at)?;
        at += n;
    }
    Ok(())
}

/// Reads `buf.len()` bytes at `offset`, as `read_exact_at` does, but
/// fills the file's holes (blocks programmed with zeros, see
/// [`punch_hole`]) with zeros here instead of reading them: a read of a
/// hole makes the kernel allocate and zero a page-cache page per 4 KiB,
/// which on a mostly-zero image cost more than the reads of the data.
/// Where the file system cannot say where its holes are, everything is
/// read.
fn read_exact_at_sparse(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{seek, SeekFrom};
        let end = offset + buf.len() as u64;
        let mut at = offset;
        while at < end {
            let data = match seek(file, SeekFrom::Data(at)) {
                Ok(d) => d.clamp(at, end),
                // No data from `at` to the end of the file.
                Err(e) if e == rustix::io::Errno::NXIO => end,
                Err(_) => return file.read_exact_at(&mut buf[(at - offset) as usize..], at),
            };
            buf[(at - offset) as usize..(data - offset) as usize].fill(0);
            if data == end {
                break;
            }
            let hole = match seek(file, SeekFrom::Hole(data)) {
                Ok(h) => h.clamp(data + 1, end),
                Err(_) => end,
            };
            file.read_exact_at(
                &mut buf[(data - offset) as usize..(hole - offset) as usize],
                data,
            )?;
            at = hole;
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    file.read_exact_at(buf, offset)
}

/// One program unit of a command: its first global page, its data and its
/// OOB bytes (empty = zeros).
pub(crate) type Piece<'a> = (u64, &'a [u8], &'a [u8]);

fn to_usize(n: u64, what: &str) -> Result<usize, SimError> {
    usize::try_from(n).map_err(|_| SimError::InvalidConfig {
        reason: format!("{what} of {n} bytes does not fit in memory on this host"),
    })
}

impl Media {
    /// Fresh, fully erased media in memory.
    pub fn new_memory(cfg: &SimConfig) -> Result<Self, SimError> {
        let pages = cfg.page_count();
        let bytes = to_usize(pages * u64::from(cfg.page_size_bytes), "data")?;
        let mut data = vec![0u8; bytes + PAGE_ALIGN_BYTES];
        // Advisory: without transparent huge pages nothing changes.
        let _ = hugepages::advise(&mut data);
        let base = match data.as_ptr().align_offset(PAGE_ALIGN_BYTES) {
            b if b < PAGE_ALIGN_BYTES => b,
            _ => 0, // may not be computable: alignment only saves time
        };
        let oob = vec![0u8; to_usize(pages * u64::from(cfg.oob_size_bytes), "oob")?];
        Self::with_store(cfg, Store::Memory { data, base, oob })
    }

    /// Fresh, fully erased media on a just-created, zero-filled image file
    /// (zero is "erased" in every table).
    pub fn new_file(cfg: &SimConfig, file: File, path: &Path) -> Result<Self, SimError> {
        let layout = ImageLayout::for_config(cfg);
        Self::with_store(
            cfg,
            Store::File {
                file,
                path: path.to_path_buf(),
                layout,
            },
        )
    }

    fn with_store(cfg: &SimConfig, store: Store) -> Result<Self, SimError> {
        let erase_blocks = to_usize(cfg.erase_block_count(), "erase table")?;
        Ok(Media {
            store,
            page_size: cfg.page_size_bytes as usize,
            oob_size: cfg.oob_size_bytes as usize,
            pages_per_block: u64::from(cfg.pages_per_block),
            page_state: vec![0u8; to_usize(cfg.page_count(), "page-state table")?],
            erase_count: vec![0; erase_blocks],
            eb_flags: vec![0; erase_blocks],
            scratch: Vec::new(),
        })
    }

    /// Media of an existing image: loads and range-checks the erase-block
    /// and page-state tables. Returns the raw zone table for the device.
    pub fn open_file(
        cfg: &SimConfig,
        file: File,
        path: &Path,
        layout: ImageLayout,
    ) -> Result<(Self, Vec<u8>), SimError> {
        let mut media = Self::new_file(cfg, file, path)?;
        let read = |off: u64, len: u64| -> Result<Vec<u8>, SimError> {
            let mut buf = vec![0u8; to_usize(len, "table")?];
            media
                .file()?
                .read_exact_at(&mut buf, off)
                .map_err(|e| SimError::io("read", path, e))?;
            Ok(buf)
        };
        let erase_table = read(
            layout.erase_table_offset,
            cfg.erase_block_count() * ERASE_ENTRY_BYTES,
        )?;
        let zones = cfg.erase_block_count() / u64::from(cfg.zone_width_luns);
        let zone_table = read(layout.zone_table_offset, zones * ZONE_ENTRY_BYTES)?;
        let page_state = read(layout.page_state_offset, cfg.page_count())?;
        for (i, entry) in erase_table
            .chunks_exact(ERASE_ENTRY_BYTES as usize)
            .enumerate()
        {
            let (count, flags) =
                image::decode_erase_entry(entry).ok_or(SimError::CorruptTable {
                    what: "erase-block entry",
                    index: i as u64,
                })?;
            media.erase_count[i] = count;
            media.eb_flags[i] = flags;
        }
        if let Some(i) = page_state
            .iter()
            .position(|&b| PageState::from_byte(b).is_none())
        {
            return Err(SimError::CorruptTable {
                what: "page state",
                index: i as u64,
            });
        }
        media.page_state = page_state;
        Ok((media, zone_table))
    }

    /// Whether the pages live in an image file.
    pub fn is_file(&self) -> bool {
        matches!(self.store, Store::File { .. })
    }

    fn file(&self) -> Result<&File, SimError> {
        match &self.store {
            Store::File { file, .. } => Ok(file),
            Store::Memory { .. } => Err(SimError::InvalidConfig {
                reason: "not an image".into(),
            }),
        }
    }

    pub fn page_state(&self, page: u64) -> PageState {
        PageState::from_byte(self.page_state[page as usize]).expect("page states are validated")
    }

    /// Programs `data.len() / page_size` consecutive pages of one erase block.
    /// `oob` empty writes zero OOB bytes.
    #[cfg(test)]
    pub fn program(&mut self, first_page: u64, data: &[u8], oob: &[u8]) -> io::Result<()> {
        self.program_many(&[(first_page, data, oob)])
    }

    /// Programs the units of one command (in any page order; each unit
    /// stays inside one erase block). In file mode the units that are
    /// consecutive pages of one erase block go out as one run: one write for
    /// their data, one for their OOB bytes, one for their page states
    /// (instead of three per unit). Each run's pages are programmed before
    /// their states say so; the caller's zone entry commits them all.
    pub fn program_many(&mut self, pieces: &[Piece<'_>]) -> io::Result<()> {
        for &(first_page, data, oob) in pieces {
            self.check_program(first_page, data, oob);
        }
        if let Store::Memory { .. } = self.store {
            // In memory a unit costs the same alone as in a run.
            for i in 0..pieces.len() {
                self.program_run(pieces, &[i])?;
            }
            return Ok(());
        }
        let mut order: Vec<usize> = (0..pieces.len()).collect();
        order.sort_unstable_by_key(|&i| pieces[i].0);
        let mut start = 0;
        while start < order.len() {
            let mut end = start + 1;
            while end < order.len() && self.continues(&pieces[order[end - 1]], pieces[order[end]].0)
            {
                end += 1;
            }
            self.program_run(pieces, &order[start..end])?;
            start = end;
        }
        Ok(())
    }

    fn check_program(&self, first_page: u64, data: &[u8], oob: &[u8]) {
        let count = data.len() / self.page_size;
        assert!(count > 0 && data.len().is_multiple_of(self.page_size));
        assert!(oob.is_empty() || oob.len() == count * self.oob_size);
        assert_eq!(
            first_page / self.pages_per_block,
            (first_page + count as u64 - 1) / self.pages_per_block,
            "a program stays inside one erase block"
        );
        let first = first_page as usize;
        for p in first..first + count {
            assert_eq!(
                self.page_state[p],
                PageState::Erased as u8,
                "program of non-erased page {p}"
            );
        }
    }

    /// Whether a unit at `next_page` directly follows `prev` in its erase block.
    fn continues(&self, prev: &Piece<'_>, next_page: u64) -> bool {
        let end = prev.0 + (prev.1.len() / self.page_size) as u64;
        end == next_page && prev.0 / self.pages_per_block == next_page / self.pages_per_block
    }

    /// Programs units of consecutive pages (`run` indexes `pieces`, in page order).
    fn program_run(&mut self, pieces: &[Piece<'_>], run: &[usize]) -> io::Result<()> {
        let first_page = pieces[run[0]].0;
        let count: usize = run.iter().map(|&i| pieces[i].1.len()).sum::<usize>() / self.page_size;
        let (ps, os) = (self.page_size, self.oob_size);
        let first = first_page as usize;
        match &mut self.store {
            Store::Memory {
                data: d,
                base,
                oob: o,
            } => {
                let mut copier = streaming::Copier::new();
                for &i in run {
                    let (page, data, oob) = pieces[i];
                    let (p, n) = (page as usize, data.len() / ps);
                    copier.copy(&mut d[*base + p * ps..*base + (p + n) * ps], data);
                    let dst = &mut o[p * os..(p + n) * os];
                    if oob.is_empty() {
                        dst.fill(0);
                    } else {
                        dst.copy_from_slice(oob);
                    }
                }
            }
            Store::File { file, layout, .. } => {
                let scratch = &mut self.scratch;
                let data_at = layout.data_offset + first_page * ps as u64;
                if run.iter().all(|&i| is_zero(pieces[i].1)) {
                    // Zeros stay a hole: a fully written volume of zero
                    // blocks costs no disk (`zftl bench recovery`).
                    punch_hole(file, data_at, (count * ps) as u64)?;
                } else if let [only] = run {
                    file.write_all_at(pieces[*only].1, data_at)?;
                } else {
                    scratch.clear();
                    for &i in run {
                        scratch.extend_from_slice(pieces[i].1);
                    }
                    file.write_all_at(scratch, data_at)?;
                }
                if os > 0 {
                    let oob_at = layout.oob_offset + first_page * os as u64;
                    if run.iter().all(|&i| is_zero(pieces[i].2)) {
                        punch_hole(file, oob_at, (count * os) as u64)?;
                    } else {
                        scratch.clear();
                        for &i in run {
                            let (_, data, oob) = pieces[i];
                            if oob.is_empty() {
                                scratch.resize(scratch.len() + data.len() / ps * os, 0);
                            } else {
                                scratch.extend_from_slice(oob);
                            }
                        }
                        file.write_all_at(scratch, oob_at)?;
                    }
                }
            }
        }
        debug_assert!(first + count <= self.page_state.len());
        self.set_states(first_page, count as u64, PageState::Programmed)
    }

    /// Sets the state of `count` consecutive pages (write-through).
    pub fn set_states(&mut self, first_page: u64, count: u64, state: PageState) -> io::Result<()> {
        let range = first_page as usize..(first_page + count) as usize;
        self.page_state[range.clone()].fill(state as u8);
        if let Store::File { file, layout, .. } = &self.store {
            file.write_all_at(
                &self.page_state[range],
                layout.page_state_offset + first_page,
            )?;
        }
        Ok(())
    }

    /// Appends `pages` consecutive pages to `data` and their OOB to `oob`
    /// (nothing there when the media has no OOB). Erased pages read as
    /// 0xFF. Returns the index (within the run) of the first torn or failed
    /// page, whose bytes and those after it are not appended.
    ///
    /// Appending, not filling a zeroed buffer: zeroing every read buffer
    /// first was 1.3 % of `zftl serve`'s CPU under 4 KiB random writes,
    /// where garbage collection reads what it moves.
    pub fn read(
        &self,
        first_page: u64,
        pages: usize,
        data: &mut Vec<u8>,
        oob: &mut Vec<u8>,
    ) -> io::Result<Option<u64>> {
        let (ps, os) = (self.page_size, self.oob_size);
        data.reserve(pages * ps);
        oob.reserve(pages * os);
        for i in 0..pages {
            let page = first_page + i as u64;
            match self.page_state(page) {
                PageState::Erased => {
                    data.resize(data.len() + ps, 0xFF);
                    oob.resize(oob.len() + os, 0xFF);
                }
                PageState::Torn | PageState::Failed => return Ok(Some(i as u64)),
                PageState::Programmed => self.read_page(page, data, oob)?,
            }
        }
        Ok(None)
    }

    /// Appends the pages of `runs` (each a first page and a count of
    /// consecutive pages), in that order, as [`Self::read`] does for one
    /// run; returns the index (within all of them) of the first torn or
    /// failed page, and then appends nothing. On an image, pages that are
    /// consecutive on the media are read with one call however the runs
    /// interleave them (a zone striped over LUNs hands its offsets out
    /// round the LUNs): a page at a time, a scan of a zone's tags took four
    /// times what the file's reads do.
    pub fn read_runs(
        &mut self,
        runs: &[(u64, usize)],
        data: &mut Vec<u8>,
        oob: &mut Vec<u8>,
    ) -> io::Result<Option<u64>> {
        let mut index = 0u64;
        for &(first, pages) in runs {
            for p in first..first + pages as u64 {
                if matches!(self.page_state(p), PageState::Torn | PageState::Failed) {
                    return Ok(Some(index));
                }
                index += 1;
            }
        }
        if let Store::Memory { .. } = self.store {
            for &(first, pages) in runs {
                let bad = self.read(first, pages, data, oob)?;
                debug_assert!(bad.is_none(), "states checked above");
            }
            return Ok(None);
        }
        let (ps, os) = (self.page_size, self.oob_size);
        let (d0, o0) = (data.len(), oob.len());
        let total = index as usize;
        data.resize(d0 + total * ps, 0);
        oob.resize(o0 + total * os, 0);
        // Each run's place in the output, in media order.
        let mut at = Vec::with_capacity(runs.len());
        let mut out = 0usize;
        for &(first, pages) in runs {
            at.push((first, pages, out));
            out += pages;
        }
        at.sort_unstable_by_key(|&(first, _, _)| first);
        let Store::File { file, layout, .. } = &self.store else {
            unreachable!("memory handled above")
        };
        let scratch = &mut self.scratch;
        let mut i = 0;
        while i < at.len() {
            // A span of runs that follow each other on the media.
            let (start, _, _) = at[i];
            let mut end = i + 1;
            let mut next = start + at[i].1 as u64;
            while end < at.len() && at[end].0 == next {
                next += at[end].1 as u64;
                end += 1;
            }
            let span = (next - start) as usize;
            if end == i + 1 {
                // One run: read straight into its place in the output.
                let out = at[i].2;
                read_exact_at_sparse(
                    file,
                    &mut data[d0 + out * ps..d0 + (out + span) * ps],
                    layout.data_offset + start * ps as u64,
                )?;
                if os > 0 {
                    file.read_exact_at(
                        &mut oob[o0 + out * os..o0 + (out + span) * os],
                        layout.oob_offset + start * os as u64,
                    )?;
                }
                i = end;
                continue;
            }
            scratch.resize(span * ps.max(os), 0);
            read_exact_at_sparse(
                file,
                &mut scratch[..span * ps],
                layout.data_offset + start * ps as u64,
            )?;
            for &(first, pages, out) in &at[i..end] {
                let from = (first - start) as usize * ps;
                data[d0 + out * ps..d0 + (out + pages) * ps]
                    .copy_from_slice(&scratch[from..from + pages * ps]);
            }
            if os > 0 {
                file.read_exact_at(
                    &mut scratch[..span * os],
                    layout.oob_offset + start * os as u64,
                )?;
                for &(first, pages, out) in &at[i..end] {
                    let from = (first - start) as usize * os;
                    oob[o0 + out * os..o0 + (out + pages) * os]
                        .copy_from_slice(&scratch[from..from + pages * os]);
                }
            }
            i = end;
        }
        // Erased pages read as 0xFF whatever the file holds.
        for &(first, pages, out) in &at {
            for k in 0..pages {
                if self.page_state[(first + k as u64) as usize] == PageState::Erased as u8 {
                    let o = out + k;
                    data[d0 + o * ps..d0 + (o + 1) * ps].fill(0xFF);
                    oob[o0 + o * os..o0 + (o + 1) * os].fill(0xFF);
                }
            }
        }
        Ok(None)
    }

    fn read_page(&self, page: u64, d: &mut Vec<u8>, o: &mut Vec<u8>) -> io::Result<()> {
        let (ps, os) = (self.page_size, self.oob_size);
        let p = page as usize;
        match &self.store {
            Store::Memory { data, base, oob } => {
                d.extend_from_slice(&data[base + p * ps..base + (p + 1) * ps]);
                o.extend_from_slice(&oob[p * os..(p + 1) * os]);
            }
            Store::File { file, layout, .. } => {
                let (at_d, at_o) = (d.len(), o.len());
                d.resize(at_d + ps, 0);
                read_exact_at_sparse(file, &mut d[at_d..], layout.data_offset + page * ps as u64)?;
                o.resize(at_o + os, 0);
                if os > 0 {
                    file.read_exact_at(&mut o[at_o..], layout.oob_offset + page * os as u64)?;
                }
            }
        }
        Ok(())
    }

    pub fn erase_count(&self, erase_block: u64) -> u32 {
        self.erase_count[erase_block as usize]
    }

    pub fn erase_counts(&self) -> &[u32] {
        &self.erase_count
    }

    pub fn is_bad(&self, erase_block: u64) -> bool {
        self.eb_flags[erase_block as usize] != 0
    }

    pub fn bad_block_count(&self) -> u64 {
        self.eb_flags.iter().filter(|&&f| f != 0).count() as u64
    }

    /// Counts one erase of the block (the erase-table half of an erase; the
    /// page states are cleared by `clear_block` after the zone commit).
    pub fn count_erase(&mut self, erase_block: u64) -> io::Result<()> {
        let i = erase_block as usize;
        self.erase_count[i] = self.erase_count[i].saturating_add(1);
        self.store_erase_entry(erase_block)
    }

    /// Marks the block bad with `flag` (`EB_FACTORY_BAD` or `EB_GROWN_BAD`).
    pub fn mark_bad(&mut self, erase_block: u64, flag: u8) -> io::Result<()> {
        self.eb_flags[erase_block as usize] |= flag;
        self.store_erase_entry(erase_block)
    }

    /// Every page of the block back to erased.
    pub fn clear_block(&mut self, erase_block: u64) -> io::Result<()> {
        let first = erase_block * self.pages_per_block;
        let range = first as usize..(first + self.pages_per_block) as usize;
        if self.page_state[range]
            .iter()
            .all(|&s| s == PageState::Erased as u8)
        {
            return Ok(());
        }
        self.set_states(first, self.pages_per_block, PageState::Erased)
    }

    fn store_erase_entry(&self, erase_block: u64) -> io::Result<()> {
        if let Store::File { file, layout, .. } = &self.store {
            let i = erase_block as usize;
            let entry = image::encode_erase_entry(self.erase_count[i], self.eb_flags[i]);
            file.write_all_at(
                &entry,
                layout.erase_table_offset + erase_block * ERASE_ENTRY_BYTES,
            )?;
        }
        Ok(())
    }

    /// Persists one zone table entry: the commit point of every zone change.
    pub fn store_zone(&self, zone: u32, state: ZoneState, wp_blocks: u64) -> io::Result<()> {
        if let Store::File { file, layout, .. } = &self.store {
            let entry = image::encode_zone_entry(state, wp_blocks);
            file.write_all_at(
                &entry,
                layout.zone_table_offset + u64::from(zone) * ZONE_ENTRY_BYTES,
            )?;
        }
        Ok(())
    }

    /// Writes the header block (file mode only).
    pub fn store_header(&self, header: &[u8]) -> Result<(), SimError> {
        if let Store::File { file, path, .. } = &self.store {
            file.write_all_at(header, 0)
                .map_err(|e| SimError::io("write header", path, e))?;
        }
        Ok(())
    }

    /// fsync data and tables (file mode); a no-op in memory.
    pub fn sync(&self) -> Result<(), SimError> {
        if let Store::File { file, path, .. } = &self.store {
            file.sync_all()
                .map_err(|e| SimError::io("fsync", path, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erased_pages_read_ff_and_programmed_pages_read_back() {
        let cfg = SimConfig::small_for_tests();
        let mut m = Media::new_memory(&cfg).expect("media");
        let (mut d, mut o) = (Vec::new(), Vec::new());
        assert_eq!(m.read(0, 2, &mut d, &mut o).expect("read"), None);
        assert_eq!((d.len(), o.len()), (4096 * 2, 16 * 2));
        assert!(d.iter().chain(&o).all(|&b| b == 0xFF));
        m.program(0, &[7u8; 4096], &[9u8; 16]).expect("program");
        let (mut d, mut o) = (vec![1u8; 3], vec![2u8; 5]); // appended to
        m.read(0, 2, &mut d, &mut o).expect("read");
        assert_eq!((d.len(), o.len()), (3 + 4096 * 2, 5 + 16 * 2));
        assert!(d[..3] == [1; 3] && o[..5] == [2; 5]);
        assert!(d[3..4099].iter().all(|&b| b == 7) && d[4099..].iter().all(|&b| b == 0xFF));
        assert!(o[5..21].iter().all(|&b| b == 9) && o[21..].iter().all(|&b| b == 0xFF));
        m.set_states(1, 1, PageState::Torn).expect("mark");
        let (mut d, mut o) = (Vec::new(), Vec::new());
        assert_eq!(m.read(0, 2, &mut d, &mut o).expect("read"), Some(1));
        assert_eq!(
            (d.len(), o.len()),
            (4096, 16),
            "only the page before the torn one"
        );
    }

    /// The same media on a new image file at `path` and in memory.
    fn file_and_memory(cfg: &SimConfig, path: &Path) -> [Media; 2] {
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .expect("create");
        file.set_len(ImageLayout::for_config(cfg).image_size_bytes)
            .expect("size");
        [
            Media::new_file(cfg, file, path).expect("media"),
            Media::new_memory(cfg).expect("media"),
        ]
    }

    /// Units of two erase blocks, interleaved as a striped zone hands them
    /// over, land where a unit-at-a-time program would put them.
    #[test]
    fn batched_runs_match_unit_programs() {
        let cfg = SimConfig::small_for_tests();
        let (ps, os) = (cfg.page_size_bytes as usize, cfg.oob_size_bytes as usize);
        let ppb = u64::from(cfg.pages_per_block);
        let dir = tempfile::tempdir().expect("tempdir");
        let stores = file_and_memory(&cfg, &dir.path().join("m.img"));
        for mut m in stores {
            program_and_read_back(&mut m, ps, os, ppb);
        }
    }

    /// Programs units out of page order, in and across erase blocks, and
    /// one without OOB bytes; each reads back as programmed.
    fn program_and_read_back(m: &mut Media, ps: usize, os: usize, ppb: u64) {
        let pages = [0, ppb, 1, ppb + 1, 2, ppb + 2];
        let data: Vec<Vec<u8>> = (0..pages.len()).map(|i| vec![i as u8 + 1; ps]).collect();
        let oob: Vec<Vec<u8>> = (0..pages.len()).map(|i| vec![i as u8 + 0x40; os]).collect();
        let pieces: Vec<Piece<'_>> = pages
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, &data[i][..], &oob[i][..]))
            .collect();
        m.program_many(&pieces).expect("program");
        m.program_many(&[(3, &data[0][..], &[][..])])
            .expect("program");
        for (i, &p) in pages.iter().enumerate() {
            let (mut d, mut o) = (Vec::new(), Vec::new());
            assert_eq!(m.read(p, 1, &mut d, &mut o).expect("read"), None);
            assert_eq!((d, o), (data[i].clone(), oob[i].clone()), "page {p}");
        }
        let (mut d, mut o) = (Vec::new(), Vec::new());
        m.read(3, 1, &mut d, &mut o).expect("read");
        assert!(d == data[0] && o.iter().all(|&b| b == 0));
        assert_eq!(m.page_state(4), PageState::Erased);
    }

    /// Runs read together give what reading them one by one gives, on an
    /// image as in memory: interleaved runs of two erase blocks, erased
    /// pages among them; a torn page fails the whole read at its index.
    #[test]
    fn read_runs_match_single_reads() {
        let cfg = SimConfig::small_for_tests();
        let (ps, os) = (cfg.page_size_bytes as usize, cfg.oob_size_bytes as usize);
        let ppb = u64::from(cfg.pages_per_block);
        let dir = tempfile::tempdir().expect("tempdir");
        let stores = file_and_memory(&cfg, &dir.path().join("r.img"));
        for mut m in stores {
            for p in (0..6).chain(ppb..ppb + 4) {
                let data = vec![p as u8 + 1; ps];
                let oob = vec![p as u8 + 0x80; os];
                m.program(p, &data, &oob).expect("program");
            }
            // Pages 6, 7 and ppb + 4 are erased.
            let runs = [(0, 2), (ppb, 3), (2, 6), (ppb + 3, 2)];
            let (mut d, mut o) = (vec![9u8], Vec::new());
            assert_eq!(m.read_runs(&runs, &mut d, &mut o).expect("read"), None);
            let (mut d1, mut o1) = (vec![9u8], Vec::new());
            for &(first, pages) in &runs {
                assert_eq!(m.read(first, pages, &mut d1, &mut o1).expect("read"), None);
            }
            assert!(d == d1 && o == o1);
            // Output blocks 9, 10 and 12 are the erased pages.
            for i in [9, 10, 12] {
                assert!(d[1 + i * ps..1 + (i + 1) * ps].iter().all(|&b| b == 0xFF));
                assert!(o[i * os..(i + 1) * os].iter().all(|&b| b == 0xFF));
            }
            assert!(d[1 + 11 * ps..1 + 12 * ps]
                .iter()
                .all(|&b| b == (ppb + 4) as u8));
            m.set_states(ppb + 1, 1, PageState::Torn).expect("tear");
            let (mut d, mut o) = (Vec::new(), Vec::new());
            assert_eq!(m.read_runs(&runs, &mut d, &mut o).expect("read"), Some(3));
        }
    }

    /// Zero pages stay holes in the image, also over a page that held data
    /// before its erase block was erased, and read back as zeros.
    #[test]
    fn zero_pages_are_holes_in_the_image() {
        use std::os::unix::fs::MetadataExt;
        let cfg = SimConfig::small_for_tests();
        let (ps, ppb) = (cfg.page_size_bytes as usize, u64::from(cfg.pages_per_block));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("z.img");
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create");
        file.set_len(ImageLayout::for_config(&cfg).image_size_bytes)
            .expect("size");
        let mut m = Media::new_file(&cfg, file, &path).expect("media");
        let allocated = || std::fs::metadata(&path).expect("stat").blocks() * 512;
        let data = vec![7u8; ps * ppb as usize];
        m.program(0, &data, &[]).expect("program");
        assert!(allocated() >= data.len() as u64, "data takes disk");
        m.clear_block(0).expect("erase");
        let zeros = vec![0u8; ps * ppb as usize];
        m.program(0, &zeros, &[]).expect("program zeros");
        m.program(ppb, &zeros, &[]).expect("program zeros");
        assert!(
            allocated() < data.len() as u64,
            "{} bytes allocated after programming zeros over the data",
            allocated()
        );
        for page in [0, ppb - 1, ppb] {
            let (mut d, mut o) = (Vec::new(), Vec::new());
            assert_eq!(m.read(page, 1, &mut d, &mut o).expect("read"), None);
            assert!(d.iter().chain(&o).all(|&b| b == 0), "page {page}");
        }
    }

    /// Reads that cross holes (zero pages) and data give the bytes
    /// programmed, however they are split: one run, runs gathered through
    /// the reused scratch buffer after it held data, a page at a time.
    #[test]
    fn reads_across_holes_return_zeros_and_data() {
        let cfg = SimConfig::small_for_tests();
        let (ps, os) = (cfg.page_size_bytes as usize, cfg.oob_size_bytes as usize);
        let ppb = u64::from(cfg.pages_per_block);
        let dir = tempfile::tempdir().expect("tempdir");
        let [mut m, _] = file_and_memory(&cfg, &dir.path().join("h.img"));
        // Pages 0..6 of the first erase block: data, zeros, zeros, data,
        // zeros, data.
        let fill = |p: u64| -> u8 { [1, 0, 0, 4, 0, 6][p as usize] };
        for p in 0..6 {
            m.program(p, &vec![fill(p); ps], &vec![0x80 | p as u8; os])
                .expect("program");
        }
        let want =
            |pages: &[u64]| -> Vec<u8> { pages.iter().flat_map(|&p| vec![fill(p); ps]).collect() };
        let (mut d, mut o) = (Vec::new(), Vec::new());
        assert_eq!(m.read_runs(&[(0, 6)], &mut d, &mut o).expect("read"), None);
        assert!(d == want(&[0, 1, 2, 3, 4, 5]), "one run");
        // Two spans gathered through the scratch buffer: the first leaves
        // data in it where the second has a hole.
        let runs = [(3, 1), (0, 3), (5, 1), (4, 1)];
        let (mut d, mut o) = (Vec::new(), Vec::new());
        assert_eq!(m.read_runs(&runs, &mut d, &mut o).expect("read"), None);
        assert!(d == want(&[3, 0, 1, 2, 5, 4]), "gathered runs");
        let runs = [(1, 2), (ppb, 1)];
        let (mut d, mut o) = (vec![9u8; 3], Vec::new());
        assert_eq!(m.read_runs(&runs, &mut d, &mut o).expect("read"), None);
        assert_eq!(&d[..3], &[9; 3]);
        assert!(d[3..3 + 2 * ps].iter().all(|&b| b == 0), "holes");
        assert!(d[3 + 2 * ps..].iter().all(|&b| b == 0xFF), "erased");
        for p in 0..6 {
            let (mut d, mut o) = (vec![0xAAu8; 5], Vec::new());
            assert_eq!(m.read(p, 1, &mut d, &mut o).expect("read"), None);
            assert!(d[5..] == want(&[p])[..], "page {p}");
            assert!(o.iter().all(|&b| b == 0x80 | p as u8));
        }
    }

    #[test]
    #[should_panic(expected = "program of non-erased page")]
    fn reprogram_without_erase_is_a_bug() {
        let cfg = SimConfig::small_for_tests();
        let mut m = Media::new_memory(&cfg).expect("media");
        m.program(3, &[1u8; 4096], &[]).expect("program");
        let _ = m.program(3, &[1u8; 4096], &[]);
    }
}
