//! The loop every command runs: take the next record of the capture, decode it once, hand the frame on.
//! Written once here, so that numbering, decoding in place and progress are the same everywhere.

use roce_capture::{Capture, RecordBatch};

use crate::decode::{Decoder, Frame};

/// The decoded frames of a capture, one at a time (each borrows the capture's buffer until the next).
#[derive(Debug)]
pub struct Frames<'c> {
    capture: &'c mut Capture,
    decoder: Decoder,
}

impl<'c> Frames<'c> {
    /// Frames of `capture` as `decoder` reads them.
    pub fn new(capture: &'c mut Capture, decoder: Decoder) -> Self {
        Frames { capture, decoder }
    }

    /// The next frame in time order, numbered by its place in the merged stream.
    #[inline]
    pub fn next_frame(&mut self) -> Option<Frame<'_>> {
        let (number, rec) = self.capture.next_record()?;
        let mut f = Frame::empty(number, &rec);
        self.decoder.decode_into(&mut f, rec.link);
        Some(f)
    }

    /// Hands every remaining frame to `each`, for loops that need nothing between frames. The frame stays
    /// where it was decoded: [`Frames::next_frame`] moves it (a few hundred bytes) out to its caller, which
    /// cost `stats` a fifth of its time on the benchmark capture.
    #[inline]
    pub fn for_each(&mut self, mut each: impl FnMut(&Frame<'_>)) {
        self.for_each_until(|f| {
            each(f);
            false
        });
    }

    /// [`Frames::for_each`] until `each` returns true (after the frame it was given), for loops that must
    /// look at the capture now and then (its progress, its new taps): they call it again to go on. Returns
    /// whether it stopped early, false once the capture has ended.
    #[inline]
    pub fn for_each_until(&mut self, mut each: impl FnMut(&Frame<'_>) -> bool) -> bool {
        while let Some((number, rec)) = self.capture.next_record() {
            let mut f = Frame::empty(number, &rec);
            self.decoder.decode_into(&mut f, rec.link);
            if each(&f) {
                return true;
            }
        }
        false
    }

    /// The capture being read: its progress between frames, its taps and files at the end.
    pub fn capture(&self) -> &Capture {
        self.capture
    }
}

/// Hands every record of `batch` to `each`, decoded in place by `decoder`: the same loop over a chunk of
/// records that a worker thread was given ([`crate::ordered`]) as [`Frames::for_each`] is over a capture.
#[inline]
pub fn for_each_in(batch: &RecordBatch, decoder: Decoder, mut each: impl FnMut(&Frame<'_>)) {
    for (number, rec) in batch.iter() {
        let mut f = Frame::empty(number, &rec);
        decoder.decode_into(&mut f, rec.link);
        each(&f);
    }
}
