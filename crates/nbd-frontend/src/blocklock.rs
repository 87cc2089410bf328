//! Ordering of the writes to one export that touch the same blocks, so a
//! read-modify-write of a block never loses another request's sectors.
//!
//! A client may write 512-byte sectors; the volume writes whole blocks
//! (4 KiB). A write that covers part of a block reads the block, overlays
//! its sectors and writes the block back. Between that read and that write
//! no other request may write the block, or one of the two loses its
//! sectors: two partial writes of different sectors, or a whole-block write
//! whose other sectors the read-modify-write would put back to the old
//! data. So every write, trim and zeroing takes a lock on the blocks it
//! touches before it reaches the volume and keeps it until the volume has
//! answered: shared for whole blocks (such writes may run together; each
//! block write is atomic in the volume), exclusive for a request with a
//! partial block (its whole block range). Reads take none: the volume
//! answers each block with one version of it.
//!
//! Requests are served in the order they asked: one waits only for earlier
//! requests whose ranges overlap its own and conflict (one of the two is
//! exclusive), so no request starves and no two wait for each other. The
//! table holds at most `capacity` requests (set by the server from its
//! bounds); when it is full a new request waits for room.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// One request in the table.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Arrival order: a request waits only for earlier ones.
    seq: u64,
    first: u64,
    end: u64,
    exclusive: bool,
}

impl Entry {
    fn overlaps(&self, other: &Entry) -> bool {
        self.first < other.end && other.first < self.end
    }
}

#[derive(Debug, Default)]
struct Table {
    /// A slab: `None` slots are in `free`.
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// Slots of the exclusive entries (few: only requests with a partial
    /// block), which are all a shared request has to look at.
    exclusive: Vec<usize>,
    used: usize,
    /// The capacity the last request asked with (the server's, constant):
    /// a table this full may have requests waiting for room.
    capacity: usize,
    next_seq: u64,
}

impl Table {
    fn insert(&mut self, first: u64, end: u64, exclusive: bool) -> usize {
        let entry = Entry {
            seq: self.next_seq,
            first,
            end,
            exclusive,
        };
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                assert!(self.slots[slot].is_none(), "free slot {slot} in use");
                self.slots[slot] = Some(entry);
                slot
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        if exclusive {
            self.exclusive.push(slot);
        }
        self.used += 1;
        slot
    }

    fn remove(&mut self, slot: usize) -> Entry {
        let entry = self.slots[slot].take().expect("a held slot");
        if entry.exclusive {
            let at = self
                .exclusive
                .iter()
                .position(|&s| s == slot)
                .expect("an exclusive entry is listed");
            self.exclusive.swap_remove(at);
        }
        self.free.push(slot);
        self.used -= 1;
        entry
    }

    /// Whether an earlier request that conflicts with the one in `slot` is
    /// still in the table.
    fn blocked(&self, slot: usize) -> bool {
        let me = self.slots[slot].expect("a held slot");
        let earlier_conflict = |other: &Entry| other.seq < me.seq && other.overlaps(&me);
        if me.exclusive {
            self.slots.iter().flatten().any(&earlier_conflict)
        } else {
            self.exclusive
                .iter()
                .filter_map(|&s| self.slots[s].as_ref())
                .any(earlier_conflict)
        }
    }
}

/// The lock table of one export (shared by every connection to it).
#[derive(Debug, Default)]
pub(crate) struct BlockLocks {
    table: Mutex<Table>,
    /// Woken when an entry leaves while someone may be waiting.
    released: Notify,
}

/// A request's place in the table; leaving it (drop) lets later
/// conflicting requests go.
pub(crate) struct BlockLock {
    locks: Arc<BlockLocks>,
    slot: usize,
}

impl BlockLocks {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic under this lock is a bug (one of the table's assertions);
        // later requests go on with the table rather than fail on it.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks blocks `first..end` (shared, or `exclusive`), waiting for room
    /// in the table (at most `capacity` requests) and then for every
    /// earlier conflicting request to leave.
    pub(crate) async fn lock(
        self: &Arc<Self>,
        first: u64,
        end: u64,
        exclusive: bool,
        capacity: usize,
    ) -> BlockLock {
        assert!(first < end, "an empty block range {first}..{end}");
        let capacity = capacity.max(1);
        let insert = || {
            let mut t = self.table();
            t.capacity = capacity;
            (t.used < capacity).then(|| {
                let slot = t.insert(first, end, exclusive);
                (slot, t.blocked(slot))
            })
        };
        // The common case takes the table's lock once: room, and no
        // earlier conflicting request.
        let (slot, mut blocked) = match insert() {
            Some(placed) => placed,
            None => loop {
                let released = self.released.notified();
                let mut released = std::pin::pin!(released);
                // Registered before the check: a release after it wakes us.
                released.as_mut().enable();
                if let Some(placed) = insert() {
                    break placed;
                }
                released.await;
            },
        };
        let lock = BlockLock {
            locks: Arc::clone(self),
            slot,
        };
        while blocked {
            let released = self.released.notified();
            let mut released = std::pin::pin!(released);
            released.as_mut().enable();
            blocked = self.table().blocked(slot);
            if blocked {
                released.await;
            }
        }
        lock
    }

    /// Requests in the table (held or waiting).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().used
    }
}

impl Drop for BlockLock {
    fn drop(&mut self) {
        let mut t = self.locks.table();
        let was_full = t.used >= t.capacity;
        let gone = t.remove(self.slot);
        // Someone can only be waiting for this entry if it or another
        // entry is exclusive, or for room if the table was full. Waking
        // costs a lock of the Notify; shared-only traffic skips it.
        let someone_may_wait = gone.exclusive || !t.exclusive.is_empty() || was_full;
        drop(t);
        if someone_may_wait {
            self.locks.released.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    /// Polls `f` once; `Some` if it finished.
    fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let mut cx = Context::from_waker(Waker::noop());
        match f.poll(&mut cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }

    #[test]
    fn shared_locks_overlap_exclusive_ones_wait_in_order() {
        let locks = Arc::new(BlockLocks::default());
        let a = poll_once(std::pin::pin!(locks.lock(0, 4, false, 16))).expect("free");
        let b = poll_once(std::pin::pin!(locks.lock(2, 6, false, 16))).expect("shared");
        // An exclusive lock over a shared one waits ...
        let mut x = Box::pin(locks.lock(3, 4, true, 16));
        assert!(poll_once(x.as_mut()).is_none());
        // ... and a shared one after it waits for it (no starvation) ...
        let mut c = Box::pin(locks.lock(3, 5, false, 16));
        assert!(poll_once(c.as_mut()).is_none());
        // ... while one elsewhere goes.
        let d = poll_once(std::pin::pin!(locks.lock(4, 8, false, 16))).expect("disjoint");
        drop(a);
        assert!(poll_once(x.as_mut()).is_none(), "b still holds block 3");
        drop(b);
        let x = poll_once(x.as_mut()).expect("earlier conflicts gone");
        assert!(poll_once(c.as_mut()).is_none(), "x holds block 3");
        drop(x);
        let c = poll_once(c.as_mut()).expect("x gone");
        drop((c, d));
        assert_eq!(locks.len(), 0);
    }

    #[test]
    fn exclusive_locks_of_different_blocks_do_not_wait() {
        let locks = Arc::new(BlockLocks::default());
        let a = poll_once(std::pin::pin!(locks.lock(0, 1, true, 16))).expect("free");
        let b = poll_once(std::pin::pin!(locks.lock(1, 2, true, 16))).expect("adjacent");
        let mut c = Box::pin(locks.lock(1, 3, false, 16));
        assert!(poll_once(c.as_mut()).is_none());
        drop(b);
        assert!(poll_once(c.as_mut()).is_some());
        drop(a);
    }

    #[test]
    fn a_full_table_makes_new_requests_wait_for_room() {
        let locks = Arc::new(BlockLocks::default());
        let a = poll_once(std::pin::pin!(locks.lock(0, 1, false, 2))).expect("room");
        let b = poll_once(std::pin::pin!(locks.lock(5, 6, false, 2))).expect("room");
        let mut c = Box::pin(locks.lock(9, 10, false, 2));
        assert!(poll_once(c.as_mut()).is_none(), "two of two taken");
        assert_eq!(locks.len(), 2);
        drop(a);
        let c = poll_once(c.as_mut()).expect("room again");
        drop((b, c));
        assert_eq!(locks.len(), 0);
    }

    #[test]
    fn a_dropped_waiter_leaves_the_table() {
        let locks = Arc::new(BlockLocks::default());
        let a = poll_once(std::pin::pin!(locks.lock(0, 8, true, 16))).expect("free");
        let mut w = Box::pin(locks.lock(1, 2, false, 16));
        assert!(poll_once(w.as_mut()).is_none());
        drop(w);
        assert_eq!(locks.len(), 1);
        drop(a);
        assert_eq!(locks.len(), 0);
        let _b = poll_once(std::pin::pin!(locks.lock(0, 8, true, 16))).expect("free again");
    }
}
