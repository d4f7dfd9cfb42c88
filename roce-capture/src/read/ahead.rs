//! Reading a capture's bytes on a thread of their own.
//!
//! Taking bytes from the kernel (a copy out of the page cache) and inflating a compressed file cost the
//! reading thread a quarter of its time on the benchmark's three rotated files, and neither needs to wait for
//! the records before it. So once a file is read past its first buffer, a second thread reads it ahead, in
//! chunks of [`CHUNK`] bytes, a few at a time, while the first parses the chunk before.
//!
//! Each chunk keeps [`HEADROOM`] free bytes in front of its data: the unparsed end of the previous chunk (a
//! record cut in two) is copied there, so the two halves meet without copying the chunk itself. Chunks are
//! handed back once parsed and filled again, so memory stays at a few chunks per open file.

use std::io::{self, Read};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError, channel, sync_channel};

/// Bytes the reading thread takes in one go.
pub(super) const CHUNK: usize = 1 << 20;

/// Free bytes before each chunk's data, as large as any block the parser needs whole (a longer block is
/// joined by copying, see [`super::buffer::StreamBuf::refill`]).
pub(super) const HEADROOM: usize = 1 << 20;

/// Filled chunks waiting for the parser: enough to cover an uneven read, few enough to bound memory.
const DEPTH: usize = 2;

enum Msg {
    /// A chunk whose data is `buf[headroom..headroom + len]`.
    Chunk(Vec<u8>, usize),
    Failed(io::Error),
    End,
}

/// The parser's side of the reading thread.
pub(super) struct ReadAhead {
    full: Receiver<Msg>,
    empty: Sender<Vec<u8>>,
    headroom: usize,
    chunk: usize,
    /// The thread said End or Failed: nothing more will come.
    finished: bool,
}

impl std::fmt::Debug for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAhead")
            .field("finished", &self.finished)
            .finish()
    }
}

impl ReadAhead {
    /// Starts a thread reading `inner` in chunks of `chunk` bytes with `headroom` free bytes in front. If no
    /// thread can be started, `inner` comes back unharmed, to be read in place.
    pub(super) fn spawn(
        inner: Box<dyn Read + Send>,
        headroom: usize,
        chunk: usize,
    ) -> Result<ReadAhead, Box<dyn Read + Send>> {
        let (full_tx, full) = sync_channel(DEPTH);
        let (empty, empty_rx) = channel();
        // The reader goes over only once the thread exists, so a failed spawn cannot lose it.
        let (hand_tx, hand_rx) = channel::<Box<dyn Read + Send>>();
        let started = std::thread::Builder::new()
            .name("capture-read".into())
            .spawn(move || {
                if let Ok(inner) = hand_rx.recv() {
                    produce(inner, &full_tx, &empty_rx, headroom, chunk);
                }
            });
        if started.is_err() {
            return Err(inner);
        }
        hand_tx.send(inner).map_err(|back| back.0)?;
        Ok(ReadAhead {
            full,
            empty,
            headroom,
            chunk,
            finished: false,
        })
    }

    /// Free bytes in front of each chunk's data.
    pub(super) fn headroom(&self) -> usize {
        self.headroom
    }

    /// The next chunk and the length of its data, `None` at the end of the stream, or the read's error.
    pub(super) fn next(&mut self) -> io::Result<Option<(Vec<u8>, usize)>> {
        if self.finished {
            return Ok(None);
        }
        match self.full.recv() {
            Ok(Msg::Chunk(buf, len)) => Ok(Some((buf, len))),
            Ok(Msg::End) => {
                self.finished = true;
                Ok(None)
            }
            Ok(Msg::Failed(e)) => {
                self.finished = true;
                Err(e)
            }
            // The thread never leaves without a word; if it did, the data after its last chunk is missing.
            Err(_) => {
                self.finished = true;
                Err(io::Error::other("the read-ahead thread stopped early"))
            }
        }
    }

    /// Hands a parsed chunk back to be filled again (a buffer of another size is simply dropped).
    pub(super) fn recycle(&self, buf: Vec<u8>) {
        if buf.len() == self.headroom + self.chunk {
            // The thread may have ended already: then the buffer is dropped here.
            let _ = self.empty.send(buf);
        }
    }
}

/// The reading thread: fills chunks until the end of the stream or an error, and says which it was.
fn produce(
    mut inner: Box<dyn Read + Send>,
    full: &SyncSender<Msg>,
    empty: &Receiver<Vec<u8>>,
    headroom: usize,
    chunk: usize,
) {
    loop {
        let mut buf = match empty.try_recv() {
            Ok(b) => b,
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => vec![0; headroom + chunk],
        };
        let space = buf.get_mut(headroom..).unwrap_or_default();
        let mut len = 0;
        let outcome = loop {
            let Some(rest) = space.get_mut(len..).filter(|r| !r.is_empty()) else {
                break None;
            };
            match inner.read(rest) {
                Ok(0) => break Some(Msg::End),
                Ok(n) => len += n.min(rest.len()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Some(Msg::Failed(e)),
            }
        };
        // A send fails only when the parser has gone (the file was closed early): stop reading then.
        if len > 0 && full.send(Msg::Chunk(buf, len)).is_err() {
            return;
        }
        if let Some(last) = outcome {
            let _ = full.send(last);
            return;
        }
    }
}
