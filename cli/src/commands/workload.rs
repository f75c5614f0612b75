//! Tensors whose every byte is a function of where it sits, so a receiving
//! process checks them without a copy of what was sent; and what a storage
//! maps, to tell a zero-copy receipt from a copy.

use tensorshare::model::{Storage, StorageWriter, TensorView};
use tensorshare::{DType, SharingContext, Tensor};
use tensorshare_strategies::file_descriptor::FdSegment;
use tensorshare_strategies::file_system::FileSystemSegment;
use tensorshare_strategies::memmap::MemmapSegment;

/// The byte at `position` of the storage of tensor number `index`.
pub fn pattern_byte(index: u64, position: usize) -> u8 {
    // Only the low bytes matter, and u8 arithmetic vectorizes.
    (position as u8)
        .wrapping_mul(31)
        .wrapping_add((index as u8).wrapping_mul(97))
}

/// Fills a storage being written in place with the pattern of `index`.
pub fn fill(writer: &mut StorageWriter, index: u64) {
    for (position, byte) in writer.as_bytes_mut().iter_mut().enumerate() {
        *byte = pattern_byte(index, position);
    }
}

/// Allocates `nbytes` through `sharing` (reusing the memfds its receivers
/// have unmapped) and writes the pattern of `index` in place.
pub fn patterned(
    sharing: &SharingContext,
    nbytes: usize,
    index: u64,
) -> Result<Storage, tensorshare::Error> {
    let mut writer = sharing.allocate(nbytes)?;
    fill(&mut writer, index);
    Ok(writer.freeze())
}

/// Where the first byte that breaks the pattern of `index` is, if any.
pub fn first_mismatch(storage: &Storage, index: u64) -> Result<Option<usize>, String> {
    let bytes = storage
        .bytes()
        .ok_or("the storage's bytes are not in this process")?;
    Ok(bytes
        .iter()
        .enumerate()
        .position(|(position, &byte)| byte != pattern_byte(index, position)))
}

/// One tensor of a workload: a dtype and shape, maybe seen transposed.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub dtype: DType,
    pub sizes: Vec<usize>,
    /// Sent as the transpose of a contiguous matrix (a non-contiguous view).
    pub transposed: bool,
}

impl TensorSpec {
    pub fn nbytes(&self) -> usize {
        self.sizes.iter().product::<usize>() * self.dtype.element_size()
    }

    /// The view this spec describes over a storage of [`TensorSpec::nbytes`].
    pub fn view(&self) -> TensorView {
        let mut view = TensorView::contiguous(self.dtype, &self.sizes);
        if self.transposed && self.sizes.len() == 2 {
            view.sizes.swap(0, 1);
            view.strides.swap(0, 1);
        }
        view
    }

    /// Allocates, writes and wraps tensor number `index` of this spec.
    pub fn build(
        &self,
        sharing: &SharingContext,
        index: u64,
    ) -> Result<Tensor, tensorshare::Error> {
        let storage = patterned(sharing, self.nbytes(), index)?;
        Ok(Tensor::new(storage, self.view())?)
    }

    /// Checks a received tensor number `index` against this spec.
    pub fn verify(&self, tensor: &Tensor, index: u64) -> Result<(), String> {
        let expected = self.view();
        if tensor.view() != expected {
            return Err(format!(
                "tensor {index}: expected {expected:?}, received {:?}",
                tensor.view()
            ));
        }
        match first_mismatch(tensor.storage(), index)? {
            None => Ok(()),
            Some(position) => Err(format!("tensor {index}: byte {position} is wrong")),
        }
    }
}

/// What shared object a storage maps, as `(st_dev, st_ino)`; `None` for
/// storages that are private to this process.
pub fn shared_identity(storage: &Storage) -> Option<(u64, u64)> {
    let identity = if let Some(fd) = storage.local_segment::<FdSegment>() {
        fd.identity()
    } else if let Some(segment) = storage.local_segment::<FileSystemSegment>() {
        segment.identity()
    } else {
        storage.local_segment::<MemmapSegment>()?.identity()
    };
    Some((identity.dev, identity.ino))
}
