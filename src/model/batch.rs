//! A message's tensors in one storage: each a view at its own aligned
//! offset, so that a receiver attaches one storage per message instead of
//! one per tensor.
//!
//! Declare the tensors ([`BatchLayout::tensor`]), allocate once
//! ([`BatchLayout::allocate`]), write each one in place
//! ([`BatchWriter::as_mut_slice`]), then freeze the lot into tensors that
//! share the storage ([`BatchWriter::freeze`]).

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;

use super::element::{cast_slice_mut, check_size};
use super::typed::contiguous_view;
use super::{Element, ElementError, Storage, StorageAllocator, StorageWriter, Tensor, TensorView};

/// Where each tensor of a batch starts in its storage: a multiple of this
/// many bytes, a cache line, and as torch's own CPU allocator aligns a
/// storage's first byte (`gAlignment`). Every element type is then aligned
/// wherever the storage's first byte is.
pub const BATCH_ALIGNMENT: usize = 64;

/// Which batch a slot belongs to, so that a slot is never used on another.
static NEXT_LAYOUT: AtomicU64 = AtomicU64::new(0);

/// The tensors of one batch, declared before the one allocation that holds
/// them all.
///
/// Made by [`SharingContext::batch`](crate::SharingContext::batch) (or
/// [`BatchLayout::new`] over any [`StorageAllocator`]); each
/// [`tensor`](Self::tensor) call reserves a contiguous tensor at the next
/// offset that is a multiple of [`BATCH_ALIGNMENT`] bytes and returns the
/// slot to write and read it by.
///
/// # Examples
///
/// ```
/// use tensorshare::StrategyKind;
/// use tensorshare::model::{BATCH_ALIGNMENT, BatchLayout};
///
/// let mut layout = BatchLayout::new(&StrategyKind::FileDescriptor);
/// let image = layout.tensor::<u8>(&[2, 3])?;
/// let label = layout.tensor::<i64>(&[2])?;
/// // 6 bytes, padding to the next 64, then 16 bytes.
/// assert_eq!(layout.nbytes(), BATCH_ALIGNMENT + 16);
///
/// let mut writer = layout.allocate()?;
/// writer.as_mut_slice(image)?.copy_from_slice(&[1, 2, 3, 4, 5, 6]);
/// writer.as_mut_slice(label)?.copy_from_slice(&[7, 8]);
/// let batch = writer.freeze();
/// assert_eq!(batch.tensor(label).storage_offset(), BATCH_ALIGNMENT / 8);
/// assert_eq!(batch.tensor(label).as_slice::<i64>()?, [7, 8]);
/// assert!(batch.tensor(image).storage().same_as(batch.tensor(label).storage()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BatchLayout<'a> {
    allocator: &'a dyn StorageAllocator,
    planned: Vec<Planned>,
    nbytes: usize,
    id: u64,
}

/// One tensor of a batch: its view and the bytes it covers.
#[derive(Clone, Debug)]
struct Planned {
    view: TensorView,
    offset: usize,
    nbytes: usize,
}

/// A tensor of `T` elements in a batch: what its writer and the frozen
/// batch are indexed by. Copy it freely; it belongs to the
/// [`BatchLayout`] that made it, and to the writer and batch of that
/// layout.
pub struct TensorSlot<T> {
    layout: u64,
    index: usize,
    element: PhantomData<fn() -> T>,
}

impl<T> Clone for TensorSlot<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for TensorSlot<T> {}

impl<T> fmt::Debug for TensorSlot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorSlot")
            .field("index", &self.index)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}

impl fmt::Debug for BatchLayout<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchLayout")
            .field("tensors", &self.planned)
            .field("nbytes", &self.nbytes)
            .finish_non_exhaustive()
    }
}

impl<'a> BatchLayout<'a> {
    /// An empty batch whose storage `allocator` will make.
    pub fn new(allocator: &'a dyn StorageAllocator) -> Self {
        Self {
            allocator,
            planned: Vec::new(),
            nbytes: 0,
            id: NEXT_LAYOUT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Reserves a contiguous tensor of `T`'s dtype and shape `sizes`,
    /// starting at the next multiple of [`BATCH_ALIGNMENT`] bytes.
    ///
    /// # Errors
    ///
    /// [`ElementError::TooLarge`] when the tensor, or the batch with it,
    /// would not fit in memory; [`ElementError::SizeMismatch`] for an
    /// [`Element`] whose size is not its dtype's.
    pub fn tensor<T: Element>(&mut self, sizes: &[usize]) -> Result<TensorSlot<T>, ElementError> {
        check_size::<T>()?;
        let (mut view, nbytes) = contiguous_view(T::DTYPE, sizes)?;
        let too_large = || super::typed::too_large(sizes, T::DTYPE.element_size());
        let offset = self
            .nbytes
            .checked_next_multiple_of(BATCH_ALIGNMENT)
            .ok_or_else(too_large)?;
        let end = offset
            .checked_add(nbytes)
            .filter(|&end| isize::try_from(end).is_ok())
            .ok_or_else(too_large)?;
        // A multiple of 64 bytes is a whole number of elements of any dtype
        // torch has (at most 16 bytes each).
        let offset_elements = offset / T::DTYPE.element_size();
        view.storage_offset = i64::try_from(offset_elements).map_err(|_| too_large())?;
        self.planned.push(Planned {
            view,
            offset,
            nbytes,
        });
        self.nbytes = end;
        Ok(TensorSlot {
            layout: self.id,
            index: self.planned.len() - 1,
            element: PhantomData,
        })
    }

    /// The size of the batch's storage: the end of its last tensor.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Allocates the batch's one storage, zero-filled, from the layout's
    /// allocator, as a hand-off ([`StorageAllocator::allocate_hand_off`]):
    /// a [`SharingContext`](crate::SharingContext) under its default puts a
    /// batch of at most 1 MiB in this process's own memory, to travel
    /// inside the message, and a larger one where it puts any storage of
    /// that size, reusing memory where it can.
    ///
    /// # Errors
    ///
    /// [`ElementError::Allocate`] with the strategy's error.
    pub fn allocate(self) -> Result<BatchWriter, ElementError> {
        let writer = self.allocator.allocate_hand_off(self.nbytes)?;
        Ok(BatchWriter {
            writer,
            planned: self.planned,
            layout: self.id,
        })
    }
}

/// A batch's storage being written, one tensor at a time: nothing else in
/// this process sees it until [`freeze`](Self::freeze).
pub struct BatchWriter {
    writer: StorageWriter,
    planned: Vec<Planned>,
    layout: u64,
}

impl fmt::Debug for BatchWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchWriter")
            .field("storage", &self.writer)
            .field("tensors", &self.planned)
            .finish_non_exhaustive()
    }
}

impl BatchWriter {
    /// The bytes of the tensor in `slot`, writable (zero when allocated).
    ///
    /// # Panics
    ///
    /// When `slot` comes from another [`BatchLayout`].
    pub fn bytes_mut<T>(&mut self, slot: TensorSlot<T>) -> &mut [u8] {
        let planned = planned(&self.planned, self.layout, slot);
        let range = planned.offset..planned.offset + planned.nbytes;
        // Inside the storage: it was allocated at the layout's size, which
        // ends at or after every tensor's end.
        &mut self.writer.as_bytes_mut()[range]
    }

    /// The elements of the tensor in `slot`, writable, in row-major order.
    ///
    /// # Errors
    ///
    /// [`ElementError::Misaligned`] only when the storage itself starts at
    /// an address not aligned for `T` (segments in shared memory start on a
    /// page; a small heap buffer of the `bytes` strategy on malloc's
    /// 16 bytes).
    ///
    /// # Panics
    ///
    /// When `slot` comes from another [`BatchLayout`].
    pub fn as_mut_slice<T: Element + Pod>(
        &mut self,
        slot: TensorSlot<T>,
    ) -> Result<&mut [T], ElementError> {
        cast_slice_mut(self.bytes_mut(slot))
    }

    /// Ends writing: every tensor of the batch, each a view of the one
    /// storage.
    pub fn freeze(self) -> Batch {
        let storage = self.writer.freeze();
        let tensors = self
            .planned
            .into_iter()
            .map(|planned| {
                // Inside the storage by construction; checked again, as
                // every view is.
                Tensor::new(storage.clone(), planned.view)
                    .expect("a batch's views lie inside the storage sized for them")
            })
            .collect();
        Batch {
            storage,
            tensors,
            layout: self.layout,
        }
    }
}

/// The tensors of a batch, all views of one storage.
///
/// Sent in one message, the storage is shared once, as torch pickles a
/// storage referenced twice: a torch receiver fetches one fd
/// (`file_descriptor`), registers one segment (`file_system`), maps one
/// file (`memmap`) or unpickles one byte string (`bytes`), and rebuilds
/// one `UntypedStorage` that every tensor views, as after
/// `torch.stack(samples, out=batch)` into one storage and slicing it. The
/// storage lives while any of its views does: a receiver that keeps one
/// label keeps the whole batch's memory mapped, and under
/// `file_descriptor` the sender cannot reuse that memory until every view
/// is gone; `.clone()` a tensor to keep it alone.
#[derive(Clone)]
pub struct Batch {
    storage: Storage,
    tensors: Vec<Tensor>,
    layout: u64,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("storage", &self.storage)
            .field("tensors", &self.tensors)
            .finish_non_exhaustive()
    }
}

impl Batch {
    /// The tensor in `slot`.
    ///
    /// # Panics
    ///
    /// When `slot` comes from another [`BatchLayout`].
    pub fn tensor<T>(&self, slot: TensorSlot<T>) -> &Tensor {
        check_slot(self.layout, slot);
        &self.tensors[slot.index]
    }

    /// The storage every tensor of the batch views.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The tensors, in the order they were declared.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }
}

/// The tensor `slot` names among `planned`, of the layout `layout`.
fn planned<T>(planned: &[Planned], layout: u64, slot: TensorSlot<T>) -> &Planned {
    check_slot(layout, slot);
    &planned[slot.index]
}

fn check_slot<T>(layout: u64, slot: TensorSlot<T>) {
    assert_eq!(
        slot.layout, layout,
        "a TensorSlot is used on a batch of another BatchLayout"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StrategyKind;

    #[test]
    fn every_tensor_starts_on_the_alignment_and_none_overlap() {
        let mut layout = BatchLayout::new(&StrategyKind::Bytes);
        let a = layout.tensor::<u8>(&[3]).unwrap();
        let b = layout.tensor::<f64>(&[0]).unwrap();
        let c = layout.tensor::<i16>(&[65]).unwrap();
        let d = layout.tensor::<f32>(&[2, 2]).unwrap();
        assert_eq!(layout.nbytes(), 4 * BATCH_ALIGNMENT + 16);
        let mut writer = layout.allocate().unwrap();
        writer.as_mut_slice(c).unwrap().fill(-1);
        writer.as_mut_slice(d).unwrap().fill(0.5);
        assert!(writer.bytes_mut(a).iter().all(|&x| x == 0));
        assert!(writer.bytes_mut(b).is_empty());
        let batch = writer.freeze();
        let offsets: Vec<usize> = batch
            .tensors()
            .iter()
            .map(|t| t.storage_offset() * t.dtype().element_size())
            .collect();
        assert_eq!(
            offsets,
            [0, BATCH_ALIGNMENT, BATCH_ALIGNMENT, 4 * BATCH_ALIGNMENT]
        );
        assert_eq!(batch.tensor(c).as_slice::<i16>().unwrap(), [-1; 65]);
        assert_eq!(batch.tensor(d).as_slice::<f32>().unwrap(), [0.5; 4]);
        assert!(
            batch
                .tensors()
                .iter()
                .all(|t| t.storage().same_as(batch.storage()))
        );
    }

    #[test]
    fn a_batch_too_large_for_memory_is_refused_before_allocating() {
        let mut layout = BatchLayout::new(&StrategyKind::Bytes);
        layout.tensor::<u8>(&[1]).unwrap();
        let error = layout.tensor::<f64>(&[usize::MAX / 16]).unwrap_err();
        assert!(matches!(error, ElementError::TooLarge { .. }), "{error}");
        let half = isize::MAX as usize / 2;
        layout.tensor::<u8>(&[half]).unwrap();
        let error = layout.tensor::<u8>(&[half]).unwrap_err();
        assert!(matches!(error, ElementError::TooLarge { .. }), "{error}");
        assert_eq!(
            layout.planned.len(),
            2,
            "the refused tensor is not declared"
        );
    }

    #[test]
    #[should_panic(expected = "another BatchLayout")]
    fn a_slot_of_another_layout_is_refused() {
        let mut first = BatchLayout::new(&StrategyKind::Bytes);
        let slot = first.tensor::<u8>(&[1]).unwrap();
        let mut second = BatchLayout::new(&StrategyKind::Bytes);
        second.tensor::<u8>(&[1]).unwrap();
        let mut writer = second.allocate().unwrap();
        writer.bytes_mut(slot);
    }
}
