//! Storages read from a checkpoint that stay where they are in the file:
//! a range of a [`MappedFile`], which the storage keeps mapped.
//!
//! A `torch.save` zip stores each storage uncompressed and aligned, and a
//! safetensors file lays its tensors out back to back: their bytes can be
//! used where the file holds them, as `torch.load(mmap=True)` and
//! `safetensors.safe_open` use them, instead of being copied into memory
//! first. The mapping lives as long as the last storage over it.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use crate::platform::mapped_file::MappedFile;
use crate::{Segment, StrategyKind};

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
}

impl FileWindow {
    /// The bytes at `range` of `file`; `None` when `range` is not inside it.
    pub fn new(file: Arc<MappedFile>, range: Range<usize>) -> Option<Self> {
        file.as_bytes().get(range.clone())?;
        Some(FileWindow { file, range })
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
