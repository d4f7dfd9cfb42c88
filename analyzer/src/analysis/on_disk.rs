//! Per-event series of the results (each DCQCN flow's CNP times and modeled cuts) kept in a temporary file
//! rather than in memory until the report is written.
//!
//! A flow's series are written once, whole, when its model has run, and read back whole (or one element) each
//! time an output looks at them, so memory holds one flow's series at a time however many CNPs the capture
//! had. The file is made in the system's temporary directory (`TMPDIR`) and unlinked from the start: nothing
//! is left behind, whatever way the process ends. Where it cannot be made or written, a series stays in
//! memory, and the results are the same. A failure to read one back ends that series there; the error waits
//! in [`Store::take_error`], so the caller can fail rather than report on part of the events.

use std::fmt;
use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Serialize, Serializer};

/// A value of a fixed number of bytes, as a series keeps it.
pub trait Fixed: Copy {
    /// Its bytes.
    const SIZE: usize;
    /// Appends its bytes to `out`.
    fn put(&self, out: &mut Vec<u8>);
    /// The value from `SIZE` bytes.
    fn get(bytes: &[u8]) -> Self;
}

impl Fixed for u64 {
    const SIZE: usize = 8;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(bytes: &[u8]) -> Self {
        let mut b = [0; 8];
        b.copy_from_slice(&bytes[..8]);
        u64::from_le_bytes(b)
    }
}

/// The file the series of one analysis go to.
#[derive(Debug)]
pub struct Store {
    /// None: no file could be made, and every series stays in memory.
    file: Option<File>,
    /// Bytes handed out in the file so far.
    len: AtomicU64,
    /// The first failure to read a series back.
    error: Mutex<Option<io::Error>>,
}

impl Store {
    /// A store in a new temporary file, or in memory when none can be made.
    pub fn new() -> Arc<Store> {
        Arc::new(Store {
            file: tempfile::tempfile().ok(),
            len: AtomicU64::new(0),
            error: Mutex::new(None),
        })
    }

    /// A store that keeps every series in memory.
    pub fn in_memory() -> Arc<Store> {
        Arc::new(Store {
            file: None,
            len: AtomicU64::new(0),
            error: Mutex::new(None),
        })
    }

    /// The first failure to read a series back since the last call.
    pub fn take_error(&self) -> Option<io::Error> {
        self.error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Writes `bytes` at the file's end; where they are, or None when they could not be written.
    fn append(&self, bytes: &[u8]) -> Option<u64> {
        let file = self.file.as_ref()?;
        let at = self.len.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        file.write_all_at(bytes, at).ok().map(|()| at)
    }

    fn read(&self, at: u64, buf: &mut [u8]) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        match file.read_exact_at(buf, at) {
            Ok(()) => true,
            Err(e) => {
                self.error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(e);
                false
            }
        }
    }
}

/// Where a series' bytes are.
#[derive(Clone)]
enum Place {
    File(Arc<Store>, u64),
    Memory(Arc<[u8]>),
}

/// A series of `T`, written once and read back when looked at.
#[derive(Clone)]
pub struct DiskVec<T> {
    place: Place,
    len: usize,
    of: PhantomData<T>,
}

impl<T: Fixed> DiskVec<T> {
    /// `items`, written to `store` (kept in memory where they could not be).
    pub fn new(store: &Arc<Store>, items: &[T]) -> DiskVec<T> {
        let mut bytes = Vec::with_capacity(items.len() * T::SIZE);
        for i in items {
            i.put(&mut bytes);
        }
        let place = match (items.is_empty(), store.append(&bytes)) {
            (false, Some(at)) => Place::File(Arc::clone(store), at),
            _ => Place::Memory(bytes.into()),
        };
        DiskVec {
            place,
            len: items.len(),
            of: PhantomData,
        }
    }

    /// Elements in the series.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the series has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements from `from` on, up to `n` of them.
    fn range(&self, from: usize, n: usize) -> Vec<T> {
        let n = n.min(self.len.saturating_sub(from));
        let (start, end) = (from * T::SIZE, (from + n) * T::SIZE);
        let decode = |b: &[u8]| b.chunks_exact(T::SIZE).map(T::get).collect();
        match &self.place {
            Place::Memory(bytes) => decode(&bytes[start..end]),
            Place::File(store, at) => {
                let mut buf = vec![0; end - start];
                if store.read(at + start as u64, &mut buf) {
                    decode(&buf)
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// The elements from `from` on, up to `n` of them, read together: for a reader that walks a series
    /// beside others, a piece at a time.
    pub fn chunk(&self, from: usize, n: usize) -> Vec<T> {
        self.range(from, n)
    }

    /// Element `i`, read alone.
    pub fn get(&self, i: usize) -> Option<T> {
        self.range(i, 1).pop()
    }

    /// The first element, read alone.
    pub fn first(&self) -> Option<T> {
        self.get(0)
    }

    /// The last element, read alone.
    pub fn last(&self) -> Option<T> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    /// Every element, read back.
    pub fn to_vec(&self) -> Vec<T> {
        self.range(0, self.len)
    }

    /// Every element, read back at once.
    pub fn iter(&self) -> std::vec::IntoIter<T> {
        self.to_vec().into_iter()
    }
}

impl<T> DiskVec<T> {
    /// The first failure to read back a series of this one's store since the last call.
    pub fn take_error(&self) -> Option<io::Error> {
        match &self.place {
            Place::File(store, _) => store.take_error(),
            Place::Memory(_) => None,
        }
    }
}

impl<T> Default for DiskVec<T> {
    fn default() -> Self {
        DiskVec {
            place: Place::Memory(Arc::from(Vec::new())),
            len: 0,
            of: PhantomData,
        }
    }
}

impl<T: Fixed + fmt::Debug> fmt::Debug for DiskVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Fixed + PartialEq> PartialEq for DiskVec<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.to_vec() == other.to_vec()
    }
}

impl<T: Fixed + Serialize> Serialize for DiskVec<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Series come back as written, whole or an element at a time, from the file and from memory.
    #[test]
    fn series_come_back_as_written() {
        for store in [Store::new(), Store::in_memory()] {
            let a: Vec<u64> = (0..10_000).map(|i| i * 7 + 3).collect();
            let b: Vec<u64> = vec![u64::MAX, 0, 42];
            let (da, db) = (DiskVec::new(&store, &a), DiskVec::new(&store, &b));
            let empty = DiskVec::<u64>::new(&store, &[]);
            assert_eq!(da.to_vec(), a);
            assert_eq!(db.iter().collect::<Vec<_>>(), b);
            assert_eq!(
                (da.first(), da.last(), da.get(5_000)),
                (Some(3), Some(69_996), Some(35_003))
            );
            assert_eq!((db.len(), db.get(3)), (3, None));
            assert!(empty.is_empty() && empty.first().is_none() && empty.to_vec().is_empty());
            assert_eq!(da.clone(), da);
            assert_ne!(da, db);
            assert_eq!(
                serde_json::to_string(&db).unwrap(),
                format!("[{},0,42]", u64::MAX)
            );
            assert!(store.take_error().is_none());
        }
    }

    /// A series whose file cannot be read gives nothing back and says why, once.
    #[test]
    fn a_series_that_cannot_be_read_back_says_so() {
        let dir = tempfile::tempdir().unwrap();
        // Opened for writing only: the writes go through, the reads fail.
        let file = File::create(dir.path().join("series")).unwrap();
        let store = Arc::new(Store {
            file: Some(file),
            len: AtomicU64::new(0),
            error: Mutex::new(None),
        });
        let v = DiskVec::new(&store, &[1u64, 2, 3]);
        assert_eq!(v.len(), 3);
        assert!(v.to_vec().is_empty() && v.first().is_none());
        assert!(v.take_error().is_some());
        assert!(v.take_error().is_none());
    }
}
