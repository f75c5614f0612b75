//! Protocol 4's `FRAME` rules, as CPython's pure-Python unpickler
//! (`pickle._Unframer`) enforces them.
//!
//! A frame announces how many bytes its opcodes take. Inside a frame every
//! read (an opcode, an argument, a line) must end within it, and a new
//! `FRAME` may start only once the current one is used up. A read that
//! finds the frame used up leaves it and reads on unframed: that is how
//! `pickle` writes payloads of 64 KiB and more, outside any frame, after
//! closing the frame before them. `_pickle.c` reads frames as hints and
//! checks none of this, so a pickle can show one unpickler other opcodes
//! than another; refusing what `pickle._Unframer` refuses leaves one
//! reading.

use super::error::DecodeErrorCode;

/// Where the current frame ends, if a frame is being read.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Unframer {
    /// Offset one past the frame's last byte. It may fall behind the read
    /// position after opcodes without arguments; a read there finds the
    /// frame used up and leaves it, and [`start`](Self::start) ignores it.
    end: Option<usize>,
}

impl Unframer {
    /// Checks a read of `len` bytes at `pos` (`_Unframer.read`): within the
    /// frame, or outside any frame; a read at the end of a used-up frame
    /// leaves it first.
    pub(super) fn read(&mut self, pos: usize, len: u64) -> Result<(), DecodeErrorCode> {
        let Some(end) = self.end else {
            return Ok(());
        };
        let left = end.saturating_sub(pos);
        if left == 0 && len > 0 {
            self.end = None;
            return Ok(());
        }
        if usize::try_from(len).map_or(true, |len| len > left) {
            return Err(DecodeErrorCode::CrossesFrameEnd { frame_end: end });
        }
        Ok(())
    }

    /// Checks reading a line at `pos` whose newline is `line_len - 1` bytes
    /// on (`None` when the input holds none; `_Unframer.readline`): a line
    /// begun in a frame must end in it.
    pub(super) fn read_line(
        &mut self,
        pos: usize,
        line_len: Option<usize>,
    ) -> Result<(), DecodeErrorCode> {
        let Some(end) = self.end else {
            return Ok(());
        };
        let left = end.saturating_sub(pos);
        if left == 0 {
            self.end = None;
            return Ok(());
        }
        match line_len {
            Some(len) if len <= left => Ok(()),
            _ => Err(DecodeErrorCode::CrossesFrameEnd { frame_end: end }),
        }
    }

    /// Starts a frame of `len` bytes at `pos` (`_Unframer.load_frame`),
    /// once the current one is used up; `input_left` bytes remain.
    pub(super) fn start(
        &mut self,
        pos: usize,
        len: u64,
        input_left: usize,
    ) -> Result<(), DecodeErrorCode> {
        if let Some(end) = self.end.filter(|&end| end > pos) {
            return Err(DecodeErrorCode::FrameInsideFrame { frame_end: end });
        }
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= input_left)
            .ok_or(DecodeErrorCode::Truncated)?;
        self.end = Some(pos + len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stay_inside_their_frame() {
        let mut frame = Unframer::default();
        frame.start(10, 5, 100).unwrap();
        assert_eq!(frame.read(10, 5), Ok(()));
        assert_eq!(
            frame.read(12, 4),
            Err(DecodeErrorCode::CrossesFrameEnd { frame_end: 15 })
        );
        assert_eq!(
            frame.read(12, u64::MAX),
            Err(DecodeErrorCode::CrossesFrameEnd { frame_end: 15 })
        );
        // An empty read at the end keeps the frame; a read past it leaves it.
        assert_eq!(frame.read(15, 0), Ok(()));
        assert_eq!(
            frame.start(14, 1, 100),
            Err(DecodeErrorCode::FrameInsideFrame { frame_end: 15 })
        );
        assert_eq!(frame.read(15, 1000), Ok(()));
        assert_eq!(frame.read(1015, 1), Ok(()));
    }

    #[test]
    fn lines_end_inside_their_frame() {
        let mut frame = Unframer::default();
        frame.start(0, 4, 10).unwrap();
        assert_eq!(frame.read_line(0, Some(4)), Ok(()));
        for line_len in [Some(5), None] {
            assert_eq!(
                frame.read_line(1, line_len),
                Err(DecodeErrorCode::CrossesFrameEnd { frame_end: 4 })
            );
        }
        assert_eq!(frame.read_line(4, None), Ok(()));
    }

    #[test]
    fn a_frame_starts_once_the_last_is_used_up() {
        let mut frame = Unframer::default();
        frame.start(0, 3, 10).unwrap();
        assert_eq!(frame.start(3, 2, 7), Ok(()));
        assert_eq!(frame.start(5, 6, 5), Err(DecodeErrorCode::Truncated));
        assert_eq!(frame.start(5, u64::MAX, 5), Err(DecodeErrorCode::Truncated));
    }
}
