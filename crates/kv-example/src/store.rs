//! `Store`: put, get, delete and sync over a [`Volume`].
//!
//! The index is an open-addressing hash table of buckets (one logical
//! block each) from `first_lba + 1`, all of it held in memory and written
//! through: a put writes its value, then its key's bucket. Values go to
//! the physical segment (nameless writes) or, for comparison, to a logical
//! value area with the store's own allocator.
//!
//! Nameless values leak nothing across power cuts, because every block
//! the store drops goes with a block the FTL hands back after a cut until
//! a commit covers it:
//!
//! - A put over a key writes its value with `nameless_overwrite`: the old
//!   value is freed with the new block, so a cut keeps both or neither.
//!   If it keeps them and loses the bucket, the bucket names a freed
//!   block, but the new block is uncommitted and the hand-over at the next
//!   open repoints the entry to it (its version is newer).
//! - A delete overwrites the value with a *tombstone* (a block of zeros
//!   whose md carries the length [`TOMBSTONE_LEN`]), and the next sync
//!   frees the tombstone after a flush has made the bucket durable and
//!   before its commit: until that commit the hand-over gives the
//!   tombstone back and the open drops the entry it outdates.
//! - Deferring the free of a dropped value to the sync instead (as this
//!   store did before the hand-over) cannot be made leak-free: a value a
//!   commit covered long ago is handed over by nothing, so a cut between
//!   the bucket's flush and its free's would keep it forever.
//!
//! Logical values (the comparison placement) keep the deferred frees: a
//! dropped value's LBA waits in `replaced` for the sync (flush, trim,
//! flush); a lost trim leaks nothing, as the allocator is rebuilt from the
//! entries at open.

use std::collections::{BTreeSet, HashMap};

use zftl::core::{IoError, NamelessAddr, NamelessError, NamelessEvent};

use crate::alloc::LbaAllocator;
use crate::bucket::{
    decode_value_md, entries_per_bucket, value_md, Bucket, Entry, MAX_KEY_BYTES, TOMBSTONE_LEN,
    VALUE_MD_BYTES,
};
use crate::error::KvError;
use crate::hash::{home_bucket, key_hash};
use crate::header::{Header, ValuePlacement};
use crate::volume::Volume;

/// Blocks read at once when the index is loaded.
const LOAD_BLOCKS: u32 = 64;
/// Hand-over events taken at once at open.
const HANDOVER_EVENTS: usize = 64;

/// How to create a store.
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    /// Buckets of the index: `buckets × entries_per_bucket` keys at most
    /// (46 per 4 KiB bucket).
    pub buckets: u32,
    /// Where the values go.
    pub values: ValuePlacement,
    /// Blocks waiting for a sync to be freed (tombstones of deletes;
    /// with logical values, replaced and deleted values); a put or delete
    /// that finds this many syncs first.
    pub max_replaced: usize,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            buckets: 256,
            values: ValuePlacement::Nameless,
            max_replaced: 4096,
        }
    }
}

/// Where the values are, and their allocator if logical.
#[derive(Debug)]
enum Values {
    Nameless,
    Logical(LbaAllocator),
}

/// A key-value store on a zftl volume. See the [crate docs](crate).
#[derive(Debug)]
pub struct Store<V: Volume> {
    volume: V,
    first_lba: u64,
    block_size: usize,
    buckets: Vec<Bucket>,
    values: Values,
    next_version: u64,
    /// Blocks no entry names any more, freed by the next sync once the
    /// buckets are durable.
    replaced: Vec<u64>,
    max_replaced: usize,
    /// Buckets whose write failed after the FTL had changed under them
    /// (an overwrite freed the old value): memory holds what they must
    /// say, and the next sync writes them before it commits.
    unwritten: BTreeSet<u32>,
}

/// Where a put goes: over an entry, or a new one in a bucket.
#[derive(Clone, Copy)]
enum Slot {
    Replace { bucket: u32, index: usize },
    Insert { bucket: u32 },
}

impl Slot {
    fn bucket(self) -> u32 {
        match self {
            Slot::Replace { bucket, .. } | Slot::Insert { bucket } => bucket,
        }
    }
}

impl<V: Volume> Store<V> {
    /// Creates an empty store at `first_lba` of `volume` and makes it
    /// durable. The blocks it takes must hold nothing (they read as
    /// zeros): the buckets are not written until used.
    pub fn create(mut volume: V, first_lba: u64, opts: StoreOptions) -> Result<Store<V>, KvError> {
        let block_size = volume.block_size();
        let header = Header {
            buckets: opts.buckets,
            block_size: u32::try_from(block_size).map_err(|_| layout("a block over 4 GiB"))?,
            values: opts.values,
        };
        check_layout(&volume, first_lba, &header, opts.max_replaced)?;
        volume.write(first_lba, &header.encode())?;
        volume.flush()?;
        Store::open_with(volume, first_lba, header, opts.max_replaced)
    }

    /// Opens the store at `first_lba`, after a clean shutdown or a power
    /// cut: the index is read from the logical segment and checked, then
    /// (nameless values) the FTL's hand-over is taken and committed: each
    /// block written since the last commit is recorded if it is newer than
    /// its key's entry, else freed.
    pub fn open(mut volume: V, first_lba: u64, max_replaced: usize) -> Result<Store<V>, KvError> {
        let block = volume.read(first_lba, 1)?;
        let header = Header::decode(&block, first_lba)?;
        if header.block_size as usize != volume.block_size() {
            return Err(layout("the volume's block size changed"));
        }
        check_layout(&volume, first_lba, &header, max_replaced)?;
        Store::open_with(volume, first_lba, header, max_replaced)
    }

    fn open_with(
        volume: V,
        first_lba: u64,
        header: Header,
        max_replaced: usize,
    ) -> Result<Store<V>, KvError> {
        let block_size = volume.block_size();
        let values = match header.values {
            ValuePlacement::Nameless => Values::Nameless,
            ValuePlacement::Logical { blocks } => {
                let area = first_lba + 1 + u64::from(header.buckets);
                Values::Logical(LbaAllocator::new(area, blocks))
            }
        };
        let mut store = Store {
            volume,
            first_lba,
            block_size,
            buckets: Vec::new(),
            values,
            next_version: 1,
            replaced: Vec::new(),
            max_replaced,
            unwritten: BTreeSet::new(),
        };
        store.load_index(header.buckets)?;
        store.drop_duplicates()?;
        store.count_probes();
        store.take_value_blocks()?;
        store.take_handover()?;
        Ok(store)
    }

    /// The post-crash hand-over (after every mount, clean or not): each
    /// `Unrecorded` block is taken or freed, then the sync commits, so
    /// none comes again. A cut before the commit hands them all over
    /// again, and taking them twice gives the same index.
    fn take_handover(&mut self) -> Result<(), KvError> {
        if !matches!(self.values, Values::Nameless) {
            return Ok(());
        }
        // Key hash to bucket and key: entries move within a bucket as
        // others go, but not between buckets.
        let mut by_hash: HashMap<u128, (u32, Vec<u8>)> = HashMap::new();
        for (b, bucket) in self.buckets.iter().enumerate() {
            for e in &bucket.entries {
                by_hash.insert(key_hash(&e.key), (b as u32, e.key.clone()));
            }
        }
        loop {
            let events = match self.volume.next_events(HANDOVER_EVENTS) {
                // A volume without the physical segment holds no value:
                // the first put answers its error.
                Err(IoError::Nameless(NamelessError::Unsupported { .. })) => return Ok(()),
                other => other?,
            };
            if events.is_empty() {
                break;
            }
            for event in events {
                match event {
                    NamelessEvent::Unrecorded { addr, md } => {
                        self.take_unrecorded(&by_hash, addr, &md)?
                    }
                    NamelessEvent::Migrated { old, new, md } => self.take_moved(old, new, &md)?,
                    other => return Err(KvError::UnexpectedEvent(format!("{other:?}"))),
                }
            }
        }
        self.sync()
    }

    /// Follows the moves GC made since the last call (nameless values):
    /// each entry or tombstone that names a moved block is repointed. The
    /// next commit acknowledges the moves once the buckets are durable.
    fn follow_moves(&mut self) -> Result<(), KvError> {
        loop {
            let events = self.volume.next_events(HANDOVER_EVENTS)?;
            if events.is_empty() {
                return Ok(());
            }
            for event in events {
                match event {
                    NamelessEvent::Migrated { old, new, md } => self.take_moved(old, new, &md)?,
                    other => return Err(KvError::UnexpectedEvent(format!("{other:?}"))),
                }
            }
        }
    }

    /// GC moved the block at `old` to `new`: the entry (or the tombstone
    /// waiting for the sync) that names `old` names `new` from now on. A
    /// move of a block the store does not name (one it freed since, or
    /// handed over and freed at open) changes nothing.
    fn take_moved(
        &mut self,
        old: NamelessAddr,
        new: NamelessAddr,
        md: &[u8],
    ) -> Result<(), KvError> {
        let (o, a) = (old.to_u64(), new.to_u64());
        if let Some(t) = self.replaced.iter_mut().find(|t| **t == o) {
            *t = a;
            return Ok(());
        }
        let mismatch = |reason: String| KvError::ValueMismatch { addr: a, reason };
        let (hash, _, _) = decode_value_md(md).map_err(mismatch)?;
        let n = self.buckets.len() as u32;
        let mut b = home_bucket(hash, n);
        for _ in 0..n {
            let bucket = &self.buckets[b as usize];
            if let Some(i) = bucket.entries.iter().position(|e| e.addr == o) {
                let mut changed = bucket.clone();
                changed.entries[i].addr = a;
                return self.write_bucket_or_later(b, changed);
            }
            if bucket.probes_past == 0 {
                break;
            }
            b = (b + 1) % n;
        }
        Ok(())
    }

    /// One handed-over block: the entry its md's key hash names is
    /// repointed to it (a value) or dropped (a tombstone) if the block is
    /// newer; a block the entry already names stays; any other is freed.
    fn take_unrecorded(
        &mut self,
        by_hash: &HashMap<u128, (u32, Vec<u8>)>,
        addr: NamelessAddr,
        md: &[u8],
    ) -> Result<(), KvError> {
        let a = addr.to_u64();
        let mismatch = |reason: String| KvError::ValueMismatch { addr: a, reason };
        let (hash, version, len) = decode_value_md(md).map_err(mismatch)?;
        if len != TOMBSTONE_LEN && len as usize > self.block_size {
            return Err(mismatch(format!("a value of {len} bytes")));
        }
        // Freed or not, its version is never handed out again.
        self.next_version = self.next_version.max(version.saturating_add(1));
        let found = by_hash
            .get(&hash)
            .and_then(|(b, key)| Some((*b, self.buckets[*b as usize].find(key)?)));
        let Some((b, i)) = found else {
            // No entry (a put of a new key whose bucket a cut lost: the md
            // has no key to make one), or a tombstone of a gone entry.
            return free_live(&mut self.volume, vec![addr]);
        };
        let entry = &self.buckets[b as usize].entries[i];
        if entry.addr == a {
            return Ok(()); // recorded before the cut
        }
        if entry.version == version {
            // The block the entry names, moved by GC (versions are never
            // handed out twice): the entry follows it now, as its
            // `Migrated` event would.
            let mut changed = self.buckets[b as usize].clone();
            changed.entries[i].addr = a;
            return self.write_bucket_or_later(b, changed);
        }
        // Versions are never handed out twice: an equal one is no newer.
        if entry.version >= version {
            return free_live(&mut self.volume, vec![addr]);
        }
        // The entry's own block went with this one (an overwrite), or goes
        // now: the block stays uncommitted, and so handed over again, until
        // the sync below has made the bucket durable.
        let old = NamelessAddr::from_u64(entry.addr);
        let mut changed = self.buckets[b as usize].clone();
        changed.max_version = changed.max_version.max(version);
        if len == TOMBSTONE_LEN {
            let gone = changed.entries.remove(i);
            self.write_bucket(b, changed)?;
            self.pass(&gone.key, b, -1);
            // Past `max_replaced` if need be: the FTL's bound on the
            // blocks it hands over bounds these.
            self.replaced.push(a);
        } else {
            changed.entries[i].addr = a;
            changed.entries[i].version = version;
            changed.entries[i].value_len = len;
            self.write_bucket(b, changed)?;
        }
        free_live(&mut self.volume, vec![old])
    }

    /// Reads and decodes every bucket; the next version is past every
    /// version any bucket has seen.
    fn load_index(&mut self, buckets: u32) -> Result<(), KvError> {
        let max_value_len = self.block_size as u32;
        let mut index = 0u32;
        while index < buckets {
            let n = LOAD_BLOCKS.min(buckets - index);
            let data = self.volume.read(self.bucket_lba(index), n)?;
            for block in data.chunks_exact(self.block_size) {
                let bucket = Bucket::decode(block, index, max_value_len).map_err(|reason| {
                    KvError::CorruptBucket {
                        bucket: index,
                        lba: self.bucket_lba(index),
                        reason,
                    }
                })?;
                self.next_version = self.next_version.max(bucket.max_version + 1);
                self.buckets.push(bucket);
                index += 1;
            }
        }
        Ok(())
    }

    /// A power cut between a delete and a later put of the same key into
    /// an earlier bucket can leave the key in two buckets: the newer entry
    /// stays, the older one goes (its value with the next sync).
    fn drop_duplicates(&mut self) -> Result<(), KvError> {
        let mut newest: HashMap<Vec<u8>, (u32, u64, u64)> = HashMap::new();
        let mut stale: Vec<(u32, Vec<u8>, u64)> = Vec::new();
        for (b, bucket) in self.buckets.iter().enumerate() {
            for e in &bucket.entries {
                let here = (b as u32, e.version, e.addr);
                let Some(other) = newest.insert(e.key.clone(), here) else {
                    continue;
                };
                // Every put takes a new version and a new block: two
                // entries sharing either are damage, not a cut.
                if other.1 == e.version || other.2 == e.addr {
                    return Err(KvError::CorruptBucket {
                        bucket: b as u32,
                        lba: self.bucket_lba(b as u32),
                        reason: format!(
                            "a key also in bucket {} with its version or value",
                            other.0
                        ),
                    });
                }
                let older = if other.1 > e.version {
                    newest.insert(e.key.clone(), other);
                    here
                } else {
                    other
                };
                stale.push((older.0, e.key.clone(), older.1));
            }
        }
        for (b, key, version) in stale {
            let mut bucket = self.buckets[b as usize].clone();
            let i = bucket
                .entries
                .iter()
                .position(|e| e.key == key && e.version == version)
                .expect("the stale entry is in its bucket");
            let gone = bucket.entries.remove(i);
            self.write_bucket(b, bucket)?;
            self.replaced.push(gone.addr);
        }
        Ok(())
    }

    /// Counts `probes_past` from where each entry sits.
    fn count_probes(&mut self) {
        let n = self.buckets.len() as u32;
        for b in &mut self.buckets {
            b.probes_past = 0;
        }
        let mut passes = Vec::new();
        for (at, bucket) in self.buckets.iter().enumerate() {
            for e in &bucket.entries {
                let home = home_bucket(key_hash(&e.key), n);
                let mut b = home;
                while b != at as u32 {
                    passes.push(b);
                    b = (b + 1) % n;
                }
            }
        }
        for b in passes {
            self.buckets[b as usize].probes_past += 1;
        }
    }

    /// Logical values: the allocator learns the blocks the entries name.
    fn take_value_blocks(&mut self) -> Result<(), KvError> {
        let Values::Logical(alloc) = &mut self.values else {
            return Ok(());
        };
        for (b, bucket) in self.buckets.iter().enumerate() {
            for e in &bucket.entries {
                if !alloc.take(e.addr) {
                    return Err(KvError::CorruptBucket {
                        bucket: b as u32,
                        lba: self.first_lba + 1 + b as u64,
                        reason: format!("value LBA {} outside the area or named twice", e.addr),
                    });
                }
            }
        }
        for &lba in &self.replaced {
            if !alloc.take(lba) {
                return Err(KvError::CorruptBucket {
                    bucket: 0,
                    lba: self.first_lba + 1,
                    reason: format!("a duplicate entry names value LBA {lba}, named twice"),
                });
            }
        }
        Ok(())
    }

    /// Stores `value` under `key`, replacing what it held. Durable after
    /// the next [`Store::sync`].
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), KvError> {
        check_key(key)?;
        if value.len() > self.block_size {
            return Err(KvError::ValueTooLarge {
                len_bytes: value.len(),
                max_bytes: self.block_size,
            });
        }
        let slot = self.slot_for(key)?;
        if self.replaced.len() >= self.max_replaced {
            self.sync()?;
        }
        let old = match slot {
            Slot::Replace { bucket, index } => {
                Some(self.buckets[bucket as usize].entries[index].addr)
            }
            Slot::Insert { .. } => None,
        };
        let version = self.next_version;
        let addr = self.write_value(key, value, version, old)?;
        self.next_version += 1;
        let entry = Entry {
            key: key.to_vec(),
            version,
            addr,
            value_len: value.len() as u32,
        };
        let mut changed = self.buckets[slot.bucket() as usize].clone();
        let old_addr = match slot {
            Slot::Replace { index, .. } => {
                Some(std::mem::replace(&mut changed.entries[index], entry).addr)
            }
            Slot::Insert { .. } => {
                changed.entries.push(entry);
                None
            }
        };
        changed.max_version = changed.max_version.max(version);
        let nameless = matches!(self.values, Values::Nameless);
        match old_addr {
            // The overwrite freed the old value: memory follows the FTL
            // whether or not the bucket reached the volume.
            Some(_) if nameless => self.write_bucket_or_later(slot.bucket(), changed),
            Some(old) => {
                if let Err(e) = self.write_bucket(slot.bucket(), changed) {
                    self.forget_value(addr);
                    return Err(e);
                }
                self.replaced.push(old);
                Ok(())
            }
            None => {
                if let Err(e) = self.write_bucket(slot.bucket(), changed) {
                    self.forget_value(addr);
                    return Err(e);
                }
                self.pass(key, slot.bucket(), 1);
                Ok(())
            }
        }
    }

    /// The value under `key`, if any.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        check_key(key)?;
        let Some((b, i)) = self.locate(key) else {
            return Ok(None);
        };
        let e = self.buckets[b as usize].entries[i].clone();
        let mut value = match self.values {
            Values::Nameless => {
                let (data, md) = self.volume.nameless_read(NamelessAddr::from_u64(e.addr))?;
                let mismatch = |reason: String| KvError::ValueMismatch {
                    addr: e.addr,
                    reason,
                };
                let (hash, version, len) = decode_value_md(&md).map_err(mismatch)?;
                if (hash, version, len) != (key_hash(key), e.version, e.value_len) {
                    return Err(mismatch(format!(
                        "metadata names version {version} of {len} bytes of hash {hash:#x}, \
                         the entry version {} of {} bytes",
                        e.version, e.value_len
                    )));
                }
                data
            }
            Values::Logical(_) => self.volume.read(e.addr, 1)?,
        };
        value.truncate(e.value_len as usize);
        Ok(Some(value))
    }

    /// Removes `key`; whether it was there. Durable after the next
    /// [`Store::sync`].
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, KvError> {
        check_key(key)?;
        let Some((b, i)) = self.locate(key) else {
            return Ok(false);
        };
        if self.replaced.len() >= self.max_replaced {
            self.sync()?;
        }
        let mut changed = self.buckets[b as usize].clone();
        let gone = changed.entries.remove(i);
        if let Values::Logical(_) = self.values {
            self.write_bucket(b, changed)?;
            self.pass(key, b, -1);
            self.replaced.push(gone.addr);
            return Ok(true);
        }
        let version = self.next_version;
        let tombstone = self.write_tombstone(key, version, gone.addr)?;
        self.next_version += 1;
        changed.max_version = changed.max_version.max(version);
        self.replaced.push(tombstone);
        self.pass(key, b, -1);
        self.write_bucket_or_later(b, changed)?;
        Ok(true)
    }

    /// Makes every put and delete answered before it durable and frees
    /// what they dropped. Nameless values: a flush (only if deletes left
    /// tombstones), their frees, then a commit (which flushes first, so
    /// one flush without deletes). Logical values: a flush, then (if any
    /// value was dropped) the trims and a second flush.
    pub fn sync(&mut self) -> Result<(), KvError> {
        for b in self.unwritten.clone() {
            let block = self.buckets[b as usize].encode(b, self.block_size);
            self.volume.write(self.bucket_lba(b), &block)?;
            self.unwritten.remove(&b);
        }
        if matches!(self.values, Values::Nameless) {
            self.follow_moves()?;
        }
        match &mut self.values {
            Values::Nameless => {
                if !self.replaced.is_empty() {
                    // The buckets that no longer name them are durable
                    // before the frees; the commit after makes the frees
                    // durable, and until it the tombstones come back.
                    self.volume.flush()?;
                    let addrs = self.replaced.iter().map(|&a| NamelessAddr::from_u64(a));
                    free_live(&mut self.volume, addrs.collect())?;
                    self.replaced.clear();
                }
                self.volume.nameless_commit()?;
            }
            Values::Logical(alloc) => {
                self.volume.flush()?;
                if self.replaced.is_empty() {
                    return Ok(());
                }
                for &lba in &self.replaced {
                    self.volume.trim(lba, 1)?;
                    alloc.release(lba);
                }
                self.replaced.clear();
                self.volume.flush()?;
            }
        }
        Ok(())
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.buckets.iter().map(|b| b.entries.len()).sum()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys the index can hold.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * entries_per_bucket(self.block_size)
    }

    /// The volume, to watch it or (in tests) to inject faults.
    pub fn volume_mut(&mut self) -> &mut V {
        &mut self.volume
    }

    /// Syncs and hands the volume back.
    pub fn close(mut self) -> Result<V, KvError> {
        self.sync()?;
        Ok(self.volume)
    }

    /// The volume as it is, without a sync (what a crash leaves).
    pub fn into_volume(self) -> V {
        self.volume
    }

    fn bucket_lba(&self, bucket: u32) -> u64 {
        self.first_lba + 1 + u64::from(bucket)
    }

    /// The bucket and slot of `key`.
    fn locate(&self, key: &[u8]) -> Option<(u32, usize)> {
        let n = self.buckets.len() as u32;
        let mut b = home_bucket(key_hash(key), n);
        for _ in 0..n {
            let bucket = &self.buckets[b as usize];
            if let Some(i) = bucket.find(key) {
                return Some((b, i));
            }
            if bucket.probes_past == 0 {
                return None;
            }
            b = (b + 1) % n;
        }
        None
    }

    /// Where a put of `key` goes: its entry, or the first bucket with room
    /// from its home.
    fn slot_for(&self, key: &[u8]) -> Result<Slot, KvError> {
        if let Some((bucket, index)) = self.locate(key) {
            return Ok(Slot::Replace { bucket, index });
        }
        let n = self.buckets.len() as u32;
        let per = entries_per_bucket(self.block_size);
        let mut b = home_bucket(key_hash(key), n);
        for _ in 0..n {
            if self.buckets[b as usize].entries.len() < per {
                return Ok(Slot::Insert { bucket: b });
            }
            b = (b + 1) % n;
        }
        Err(KvError::IndexFull {
            buckets: n,
            entries_per_bucket: per,
        })
    }

    /// Adds `delta` to `probes_past` of the buckets from `key`'s home up
    /// to `at`, not included.
    fn pass(&mut self, key: &[u8], at: u32, delta: i32) {
        let n = self.buckets.len() as u32;
        let mut b = home_bucket(key_hash(key), n);
        while b != at {
            let p = &mut self.buckets[b as usize].probes_past;
            *p = p
                .checked_add_signed(delta)
                .expect("probe counts match the entries");
            b = (b + 1) % n;
        }
    }

    /// Writes `bucket` as bucket `b`; on success it replaces the one in
    /// memory.
    fn write_bucket(&mut self, b: u32, bucket: Bucket) -> Result<(), KvError> {
        let block = bucket.encode(b, self.block_size);
        self.volume.write(self.bucket_lba(b), &block)?;
        self.unwritten.remove(&b);
        self.set_bucket(b, bucket);
        Ok(())
    }

    /// Writes `bucket` as bucket `b` after the FTL already changed under
    /// it: memory takes it either way, and a failed write is retried by
    /// the next sync (the error is still returned: the change is in memory,
    /// durable only once a sync succeeds).
    fn write_bucket_or_later(&mut self, b: u32, bucket: Bucket) -> Result<(), KvError> {
        let block = bucket.encode(b, self.block_size);
        self.set_bucket(b, bucket);
        if let Err(e) = self.volume.write(self.bucket_lba(b), &block) {
            self.unwritten.insert(b);
            return Err(e.into());
        }
        self.unwritten.remove(&b);
        Ok(())
    }

    /// `bucket` as bucket `b` in memory, keeping its probe count.
    fn set_bucket(&mut self, b: u32, bucket: Bucket) {
        let probes_past = self.buckets[b as usize].probes_past;
        self.buckets[b as usize] = Bucket {
            probes_past,
            ..bucket
        };
    }

    /// Writes a value block (nameless: over `old`, freed with it); its
    /// address.
    fn write_value(
        &mut self,
        key: &[u8],
        value: &[u8],
        version: u64,
        old: Option<u64>,
    ) -> Result<u64, KvError> {
        let mut block = vec![0u8; self.block_size];
        block[..value.len()].copy_from_slice(value);
        match &mut self.values {
            Values::Nameless => {
                let md = value_md(key, version, value.len() as u32);
                debug_assert_eq!(md.len(), VALUE_MD_BYTES);
                self.write_nameless(&block, &md, old)
            }
            Values::Logical(alloc) => {
                let lba = alloc.allocate().ok_or(KvError::ValueAreaFull {
                    blocks: alloc.blocks(),
                })?;
                if let Err(e) = self.volume.write(lba, &block) {
                    alloc.release(lba);
                    return Err(e.into());
                }
                Ok(lba)
            }
        }
    }

    /// Overwrites `key`'s value at `old` with a tombstone; its address.
    fn write_tombstone(&mut self, key: &[u8], version: u64, old: u64) -> Result<u64, KvError> {
        let block = vec![0u8; self.block_size];
        let md = value_md(key, version, TOMBSTONE_LEN);
        self.write_nameless(&block, &md, Some(old))
    }

    /// One nameless block, over `old` if given; its address. An old block
    /// the FTL no longer holds (one whose hand-over read failed) is not
    /// freed again: the block is written alone. A full uncommitted set
    /// (`Busy`) is emptied, and moves holding the room
    /// (`MovesUnacknowledged`) acknowledged, by a sync, once.
    fn write_nameless(
        &mut self,
        block: &[u8],
        md: &[u8],
        old: Option<u64>,
    ) -> Result<u64, KvError> {
        let mut synced = false;
        loop {
            let written = match old {
                Some(old) => {
                    let old = [NamelessAddr::from_u64(old)];
                    match self.volume.nameless_overwrite(&old, block, md) {
                        Err(IoError::Nameless(
                            NamelessError::NotLive { .. } | NamelessError::Stale { .. },
                        )) => self.volume.nameless_write(block, md),
                        other => other,
                    }
                }
                None => self.volume.nameless_write(block, md),
            };
            match written {
                // A full uncommitted set, or moves the sync acknowledges
                // holding the room.
                Err(
                    IoError::Busy | IoError::Nameless(NamelessError::MovesUnacknowledged { .. }),
                ) if !synced => {
                    self.sync()?;
                    synced = true;
                }
                Err(e) => return Err(e.into()),
                Ok(addrs) => {
                    assert_eq!(addrs.len(), 1, "one address per block");
                    return Ok(addrs[0].to_u64());
                }
            }
        }
    }

    /// A value written for a put whose bucket write failed: no entry names
    /// it, so it goes with the next sync (before its commit).
    fn forget_value(&mut self, addr: u64) {
        self.replaced.push(addr);
    }
}

/// Frees `addrs`, leaving out any the FTL says are no longer live (a
/// block a power cut lost): the rest are freed all the same.
fn free_live<V: Volume>(volume: &mut V, mut addrs: Vec<NamelessAddr>) -> Result<(), KvError> {
    while !addrs.is_empty() {
        match volume.nameless_free(&addrs) {
            Ok(()) => return Ok(()),
            Err(IoError::Nameless(
                NamelessError::NotLive { addr } | NamelessError::Stale { addr, .. },
            )) if addrs.contains(&addr) => addrs.retain(|&a| a != addr),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn check_key(key: &[u8]) -> Result<(), KvError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(KvError::KeyTooLong {
            len_bytes: key.len(),
            max_bytes: MAX_KEY_BYTES,
        });
    }
    Ok(())
}

fn layout(why: &str) -> KvError {
    KvError::Layout(why.to_string())
}

/// The store's blocks fit the logical segment and its buckets hold keys.
fn check_layout<V: Volume>(
    volume: &V,
    first_lba: u64,
    header: &Header,
    max_replaced: usize,
) -> Result<(), KvError> {
    if header.buckets == 0 || max_replaced == 0 {
        return Err(layout("at least one bucket and one replaced value"));
    }
    if entries_per_bucket(volume.block_size()) == 0 {
        return Err(layout("a block too small for one index entry"));
    }
    let value_blocks = match header.values {
        ValuePlacement::Nameless => 0,
        ValuePlacement::Logical { blocks } => blocks,
    };
    let end = first_lba
        .checked_add(1 + u64::from(header.buckets))
        .and_then(|x| x.checked_add(value_blocks));
    match end {
        Some(end) if end <= volume.logical_blocks() => Ok(()),
        _ => Err(KvError::Layout(format!(
            "{} buckets and {value_blocks} value blocks from LBA {first_lba} pass the \
             volume's {} blocks",
            header.buckets,
            volume.logical_blocks()
        ))),
    }
}
