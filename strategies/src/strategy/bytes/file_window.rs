//! Storages read from a checkpoint that stay where they are in the file:
//! a range of a [`MappedFile`], which the storage keeps mapped.
//!
//! A `torch.save` zip stores each storage uncompressed and aligned, and a
//! safetensors file lays its tensors out back to back: their bytes can be
//! used where the file holds them, as `torch.load(mmap=True)` and
//! `safetensors.safe_open` use them, instead of being copied into memory
//! first. The mapping lives as long as the last storage over it.
//!
//! A legacy `torch.save` stream puts each storage right after an 8-byte
//! count, wherever the pickles before it ended: at any address. Its bytes
//! stay in the file all the same, since writing them out or reading them
//! element by element needs no alignment; only a view of them as typed
//! elements does, and [`FileWindow::aligned_bytes`] copies the window once
//! for that.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::BytesSegment;
use crate::platform::mapped_file::MappedFile;
use crate::{AllocateError, Segment, StrategyKind};

/// A storage's bytes left in the file they were read from.
///
/// Read-only, as every storage behind an `Arc<dyn Segment>` is. Its
/// [`kind`](Segment::kind) is [`StrategyKind::Bytes`]: sent on, its bytes
/// are written from where they are.
///
/// # Examples
///
/// ```
/// use std::io::Write;
/// use std::sync::Arc;
/// use tensorshare_strategies::Segment;
/// use tensorshare_strategies::bytes::file_window::FileWindow;
/// use tensorshare_strategies::platform::mapped_file::MappedFile;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut file = tempfile::NamedTempFile::new()?;
/// file.write_all(b"header:payload")?;
/// let mapped = Arc::new(MappedFile::open(file.path())?);
/// let window = FileWindow::new(Arc::clone(&mapped), 7..14).expect("inside the file");
/// assert_eq!(window.as_bytes(), b"payload");
/// assert!(FileWindow::new(mapped, 7..15).is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FileWindow {
    file: Arc<MappedFile>,
    range: Range<usize>,
    /// The bytes copied to an aligned address, for a window the file holds
    /// unaligned, once typed access asked for them.
    aligned: OnceLock<BytesSegment>,
}

impl FileWindow {
    /// The bytes at `range` of `file`; `None` when `range` is not inside it.
    pub fn new(file: Arc<MappedFile>, range: Range<usize>) -> Option<Self> {
        file.as_bytes().get(range.clone())?;
        Some(FileWindow {
            file,
            range,
            aligned: OnceLock::new(),
        })
    }

    /// The bytes at an address that is a multiple of `align`: in the file
    /// when it holds them so, else a copy made by the first call and kept
    /// as long as the window, the file's pages under it given back.
    ///
    /// # Errors
    ///
    /// [`AllocateError`] when the copy cannot be allocated.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Write;
    /// use std::sync::Arc;
    /// use tensorshare_strategies::Segment;
    /// use tensorshare_strategies::bytes::file_window::FileWindow;
    /// use tensorshare_strategies::platform::mapped_file::MappedFile;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut file = tempfile::NamedTempFile::new()?;
    /// file.write_all(&[0, 1, 0, 0, 0, 2, 0, 0, 0])?;
    /// let mapped = Arc::new(MappedFile::open(file.path())?);
    /// // A mapping starts on a page: one byte in is not aligned for a u32.
    /// let window = FileWindow::new(mapped, 1..9).expect("inside the file");
    /// let aligned = window.aligned_bytes(4)?;
    /// assert_eq!(aligned.as_ptr() as usize % 4, 0);
    /// assert_eq!(aligned, window.as_bytes());
    /// # Ok(())
    /// # }
    /// ```
    pub fn aligned_bytes(&self, align: usize) -> Result<&[u8], AllocateError> {
        if let Some(copy) = self.aligned.get() {
            return Ok(copy.as_bytes());
        }
        let bytes = self.as_bytes();
        if (bytes.as_ptr() as usize).is_multiple_of(align.max(1)) {
            return Ok(bytes);
        }
        let copy = BytesSegment::copy_of(bytes)?;
        self.release_pages();
        // Two threads may race here: both copy, the first one stored stays.
        Ok(self.aligned.get_or_init(|| copy).as_bytes())
    }

    /// The mapped file the bytes are in.
    pub fn file(&self) -> &Arc<MappedFile> {
        &self.file
    }

    /// Where in the file the bytes are.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// Whether the file shrank while mapped, so that some of these bytes
    /// (or others of the file) read as zeros ([`MappedFile::was_truncated`]).
    pub fn was_truncated(&self) -> bool {
        self.file.was_truncated()
    }

    /// Gives this window's pages back to the kernel
    /// ([`MappedFile::release`]): a writer done with the bytes keeps memory
    /// bounded; they read the same again later.
    pub fn release_pages(&self) {
        self.file.release(self.range.clone());
    }
}

impl Segment for FileWindow {
    fn as_bytes(&self) -> &[u8] {
        // Checked against the mapping when the window was made; a mapping
        // never changes length.
        self.file
            .as_bytes()
            .get(self.range.clone())
            .unwrap_or_default()
    }

    fn kind(&self) -> StrategyKind {
        StrategyKind::Bytes
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
