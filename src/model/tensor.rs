//! Tensors: a view (offset, sizes, strides, dtype) onto a [`Storage`].

use std::fmt;
use std::sync::Arc;

use super::Storage;
use crate::DType;

/// Why a tensor view cannot be built over its storage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    /// Sizes and strides disagree in length.
    #[error("view has {sizes} sizes but {strides} strides")]
    RankMismatch {
        /// Number of sizes.
        sizes: usize,
        /// Number of strides.
        strides: usize,
    },
    /// A size below zero.
    #[error("negative size {size} in dimension {dim}")]
    NegativeSize {
        /// The dimension.
        dim: usize,
        /// The size given.
        size: i64,
    },
    /// A stride below zero; torch does not make them.
    #[error("negative stride {stride} in dimension {dim}")]
    NegativeStride {
        /// The dimension.
        dim: usize,
        /// The stride given.
        stride: i64,
    },
    /// A storage offset below zero.
    #[error("negative storage offset {0}")]
    NegativeOffset(i64),
    /// Shape arithmetic overflowed 64 bits.
    #[error("view size overflows: shape {sizes:?} with strides {strides:?}")]
    Overflow {
        /// The sizes.
        sizes: Vec<i64>,
        /// The strides.
        strides: Vec<i64>,
    },
    /// The view reaches past the end of its storage.
    #[error(
        "view reaches byte {needed} but its storage has {nbytes} bytes: the view lies outside its storage"
    )]
    OutOfBounds {
        /// Bytes the view needs from the start of the storage.
        needed: u128,
        /// Bytes the storage has.
        nbytes: usize,
    },
}

/// A tensor: a strided view of `dtype` elements onto a storage.
///
/// Cloning is cheap and keeps identity: two clones are the same tensor, as
/// two Python references to one `torch.Tensor` are.
///
/// Write one with [`Tensor::from_slice`] or, in place,
/// [`SharingContext::allocate`](crate::SharingContext::allocate) and
/// [`StorageWriter::into_tensor`](crate::model::StorageWriter::into_tensor); read
/// its elements with [`as_slice`](Self::as_slice) (contiguous, in place)
/// or [`to_vec`](Self::to_vec) (any view).
///
/// # Examples
///
/// ```
/// use tensorshare::{DType, StrategyKind, Tensor};
///
/// let t = Tensor::from_slice(&StrategyKind::Bytes, &[1u8, 2, 3, 4, 5, 6], &[2, 3])?;
/// assert_eq!((t.dtype(), t.sizes(), t.strides()), (DType::UInt8, &[2, 3][..], &[3, 1][..]));
/// assert_eq!((t.numel(), t.storage().nbytes()), (6, 6));
/// assert!(t.is_contiguous() && !t.requires_grad());
/// assert_eq!(t.as_slice::<u8>()?, [1, 2, 3, 4, 5, 6]);
/// assert!(t.clone().same_as(&t));
/// # Ok::<(), tensorshare::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor(Arc<TensorInner>);

struct TensorInner {
    storage: Storage,
    dtype: DType,
    storage_offset: usize,
    sizes: Vec<usize>,
    strides: Vec<usize>,
    requires_grad: bool,
    parameter: bool,
}

/// The metadata of a tensor view, as the wire forms carry it (elements, not bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorView {
    /// Element type.
    pub dtype: DType,
    /// Offset of the first element, in elements.
    pub storage_offset: i64,
    /// Size of each dimension.
    pub sizes: Vec<i64>,
    /// Stride of each dimension, in elements.
    pub strides: Vec<i64>,
    /// `requires_grad`.
    pub requires_grad: bool,
    /// Whether the tensor is a `torch.nn.Parameter`.
    pub parameter: bool,
}

impl TensorView {
    /// A contiguous (row-major) view of `sizes` starting at element 0.
    pub fn contiguous(dtype: DType, sizes: &[usize]) -> Self {
        let mut strides = vec![0i64; sizes.len()];
        let mut step = 1i64;
        for (stride, &size) in strides.iter_mut().zip(sizes).rev() {
            *stride = step;
            step = step.saturating_mul(i64::try_from(size.max(1)).unwrap_or(i64::MAX));
        }
        Self {
            dtype,
            storage_offset: 0,
            sizes: sizes
                .iter()
                .map(|&s| i64::try_from(s).unwrap_or(i64::MAX))
                .collect(),
            strides,
            requires_grad: false,
            parameter: false,
        }
    }
}

impl Tensor {
    /// Builds a tensor over `storage`, checking that every element it can
    /// reach lies inside the storage.
    ///
    /// # Errors
    ///
    /// A [`ViewError`] for negative sizes, strides or offsets, arithmetic
    /// overflow, or a view that reaches past the end of the storage.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{DType, Tensor};
    /// use tensorshare::model::{Storage, TensorView};
    ///
    /// let storage = Storage::from_vec(vec![0u8; 6 * 4]);
    /// let t = Tensor::new(storage, TensorView::contiguous(DType::Float32, &[2, 3]))?;
    /// assert_eq!(t.sizes(), &[2, 3]);
    /// assert_eq!(t.strides(), &[3, 1]);
    /// # Ok::<(), tensorshare::model::ViewError>(())
    /// ```
    pub fn new(storage: Storage, view: TensorView) -> Result<Self, ViewError> {
        let (storage_offset, sizes, strides) = validate_view(&view, storage.nbytes())?;
        Ok(Self(Arc::new(TensorInner {
            storage,
            dtype: view.dtype,
            storage_offset,
            sizes,
            strides,
            requires_grad: view.requires_grad,
            parameter: view.parameter,
        })))
    }

    /// The storage this tensor views.
    pub fn storage(&self) -> &Storage {
        &self.0.storage
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    /// Offset of the first element in the storage, in elements.
    pub fn storage_offset(&self) -> usize {
        self.0.storage_offset
    }

    /// Size of each dimension.
    pub fn sizes(&self) -> &[usize] {
        &self.0.sizes
    }

    /// Stride of each dimension, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.0.strides
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // A zero size makes the product zero, however large the others:
        // their own product may overflow. Without one, the product cannot
        // overflow: validate_view checked that it fits.
        if self.0.sizes.contains(&0) {
            0
        } else {
            self.0.sizes.iter().product()
        }
    }

    /// Whether the elements lie in storage order with no gaps, row-major
    /// from the first one, as torch's `is_contiguous()` says: the stride of
    /// a dimension of size 1 does not matter, and a view with no elements
    /// is contiguous.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{DType, Tensor};
    /// use tensorshare::model::{Storage, TensorView};
    ///
    /// let storage = Storage::from_vec(vec![0u8; 6]);
    /// let rows = Tensor::new(storage.clone(), TensorView::contiguous(DType::UInt8, &[2, 3]))?;
    /// assert!(rows.is_contiguous());
    /// let mut transposed = TensorView::contiguous(DType::UInt8, &[3, 2]);
    /// transposed.strides = vec![1, 3];
    /// assert!(!Tensor::new(storage, transposed)?.is_contiguous());
    /// # Ok::<(), tensorshare::model::ViewError>(())
    /// ```
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected = 1;
        for (&size, &stride) in self.0.sizes.iter().zip(&self.0.strides).rev() {
            if size != 1 {
                if stride != expected {
                    return false;
                }
                // No overflow: the product of the sizes is numel, which fits.
                expected *= size;
            }
        }
        true
    }

    /// `requires_grad`.
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }

    /// Whether this is a `torch.nn.Parameter`.
    pub fn is_parameter(&self) -> bool {
        self.0.parameter
    }

    /// Whether two handles are the same tensor (Python's `is`).
    pub fn same_as(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A key equal for clones of one tensor and different otherwise.
    pub fn identity(&self) -> usize {
        Arc::as_ptr(&self.0) as *const () as usize
    }

    /// Byte offsets of the elements in logical (row-major) order, relative to
    /// the start of the storage.
    pub(crate) fn element_offsets(&self) -> ElementOffsets<'_> {
        ElementOffsets {
            tensor: self,
            index: vec![0; self.0.sizes.len()],
            remaining: self.numel(),
        }
    }

    /// The bytes of each element in logical order, when the storage is local.
    pub(crate) fn elements(&self) -> Option<impl Iterator<Item = &[u8]>> {
        let bytes = self.0.storage.bytes()?;
        let size = self.0.dtype.element_size();
        // In bounds: validate_view proved every element offset + size <= nbytes.
        Some(
            self.element_offsets()
                .filter_map(move |offset| bytes.get(offset..offset + size)),
        )
    }

    /// Copies the elements, in logical order, into a new contiguous buffer.
    ///
    /// `None` when the storage is not local, or when the copy would not fit
    /// in memory: an expanded view (stride 0) of a few bytes may stand for
    /// more elements than the address space holds, and a peer can send one.
    pub fn to_contiguous_bytes(&self) -> Option<Vec<u8>> {
        let elements = self.elements()?;
        let len = self.numel().checked_mul(self.0.dtype.element_size())?;
        let mut out = Vec::new();
        out.try_reserve_exact(len).ok()?;
        for element in elements {
            out.extend_from_slice(element);
        }
        Some(out)
    }

    /// The view metadata.
    pub fn view(&self) -> TensorView {
        let to_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect();
        TensorView {
            dtype: self.0.dtype,
            storage_offset: self.0.storage_offset as i64,
            sizes: to_i64(&self.0.sizes),
            strides: to_i64(&self.0.strides),
            requires_grad: self.0.requires_grad,
            parameter: self.0.parameter,
        }
    }
}

/// Two tensors are equal when they have one dtype and one shape and their
/// elements are the same bytes, in logical order, whatever their strides,
/// offsets and storages: what was received is what was sent. So a NaN
/// equals a NaN of the same bits, and `0.0` does not equal `-0.0`, unlike
/// `torch.equal`. A tensor whose bytes are not in this process equals only
/// itself.
///
/// # Examples
///
/// ```
/// use tensorshare::{StrategyKind, Tensor};
///
/// let a = Tensor::from_slice(&StrategyKind::Bytes, &[1i32, 2, 3, 4], &[2, 2])?;
/// let b = Tensor::from_slice(&StrategyKind::FileDescriptor, &[1i32, 2, 3, 4], &[2, 2])?;
/// assert_eq!(a, b);
/// assert_ne!(a, Tensor::from_slice(&StrategyKind::Bytes, &[1i32, 2, 3, 4], &[4])?);
/// # Ok::<(), tensorshare::Error>(())
/// ```
impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        if self.same_as(other) {
            return true;
        }
        if self.dtype() != other.dtype() || self.sizes() != other.sizes() {
            return false;
        }
        match (self.elements(), other.elements()) {
            (Some(mine), Some(theirs)) => mine.eq(theirs),
            _ => false,
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &self.0.dtype)
            .field("sizes", &self.0.sizes)
            .field("strides", &self.0.strides)
            .field("storage_offset", &self.0.storage_offset)
            .field("requires_grad", &self.0.requires_grad)
            .field("parameter", &self.0.parameter)
            .field("storage", &self.0.storage)
            .finish()
    }
}

/// Iterator over the byte offsets of a tensor's elements, in logical order.
pub(crate) struct ElementOffsets<'a> {
    tensor: &'a Tensor,
    index: Vec<usize>,
    remaining: usize,
}

impl Iterator for ElementOffsets<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let inner = &self.tensor.0;
        let element = inner.storage_offset
            + self
                .index
                .iter()
                .zip(&inner.strides)
                .map(|(i, s)| i * s)
                .sum::<usize>();
        // Advance the multi-index like an odometer, last dimension fastest.
        for (i, &size) in self.index.iter_mut().zip(&inner.sizes).rev() {
            *i += 1;
            if *i < size {
                break;
            }
            *i = 0;
        }
        Some(element * inner.dtype.element_size())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

/// Checks a view against a storage of `nbytes` with checked arithmetic and
/// returns it in unsigned form.
fn validate_view(
    view: &TensorView,
    nbytes: usize,
) -> Result<(usize, Vec<usize>, Vec<usize>), ViewError> {
    if view.sizes.len() != view.strides.len() {
        return Err(ViewError::RankMismatch {
            sizes: view.sizes.len(),
            strides: view.strides.len(),
        });
    }
    let overflow = || ViewError::Overflow {
        sizes: view.sizes.clone(),
        strides: view.strides.clone(),
    };
    let offset = usize::try_from(view.storage_offset)
        .map_err(|_| ViewError::NegativeOffset(view.storage_offset))?;
    let mut sizes = Vec::with_capacity(view.sizes.len());
    let mut strides = Vec::with_capacity(view.strides.len());
    let mut numel: u128 = 1;
    // Largest element index reachable, relative to the offset.
    let mut last: u128 = 0;
    for (dim, (&size, &stride)) in view.sizes.iter().zip(&view.strides).enumerate() {
        let size_u = usize::try_from(size).map_err(|_| ViewError::NegativeSize { dim, size })?;
        let stride_u =
            usize::try_from(stride).map_err(|_| ViewError::NegativeStride { dim, stride })?;
        numel = numel.checked_mul(size_u as u128).ok_or_else(overflow)?;
        if size_u > 0 {
            let reach = ((size_u - 1) as u128)
                .checked_mul(stride_u as u128)
                .ok_or_else(overflow)?;
            last = last.checked_add(reach).ok_or_else(overflow)?;
        }
        sizes.push(size_u);
        strides.push(stride_u);
    }
    if usize::try_from(numel).is_err() {
        return Err(overflow());
    }
    // Like torch, a view with no elements needs no bytes, whatever its offset.
    if numel > 0 {
        let element_size = view.dtype.element_size() as u128;
        let needed = (offset as u128)
            .checked_add(last)
            .and_then(|end| end.checked_add(1))
            .and_then(|count| count.checked_mul(element_size))
            .ok_or_else(overflow)?;
        if needed > nbytes as u128 {
            return Err(ViewError::OutOfBounds { needed, nbytes });
        }
    }
    Ok((offset, sizes, strides))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(sizes: &[i64], strides: &[i64], offset: i64) -> TensorView {
        TensorView {
            dtype: DType::Float32,
            storage_offset: offset,
            sizes: sizes.to_vec(),
            strides: strides.to_vec(),
            requires_grad: false,
            parameter: false,
        }
    }

    #[test]
    fn a_copy_larger_than_memory_is_refused() {
        // An expanded view of one float32: 2^62 elements, 2^64 bytes.
        let expanded = TensorView {
            sizes: vec![1 << 62],
            strides: vec![0],
            ..view(&[], &[], 0)
        };
        let tensor = Tensor::new(Storage::from_vec(vec![0; 4]), expanded).unwrap();
        assert_eq!(tensor.numel(), 1 << 62);
        assert_eq!(tensor.to_contiguous_bytes(), None);

        let small = TensorView {
            sizes: vec![3],
            strides: vec![0],
            ..view(&[], &[], 0)
        };
        let tensor = Tensor::new(Storage::from_vec(vec![1, 2, 3, 4]), small).unwrap();
        assert_eq!(tensor.to_contiguous_bytes(), Some([1, 2, 3, 4].repeat(3)));
    }

    #[test]
    fn an_empty_view_has_no_elements_however_large_its_other_sizes() {
        // 2^32 x (2^32 - 1) x 15 alone overflows 64 bits; the 0 makes it 0.
        let empty = view(&[1 << 32, (1 << 32) - 1, 15, 0], &[0, 3, 5, 0], i64::MAX);
        let tensor = Tensor::new(Storage::from_vec(Vec::new()), empty).unwrap();
        assert_eq!(tensor.numel(), 0);
        assert_eq!(tensor.element_offsets().count(), 0);
        assert_eq!(tensor.to_contiguous_bytes(), Some(Vec::new()));
    }

    #[test]
    fn accepts_views_inside_the_storage() {
        validate_view(&view(&[2, 3], &[3, 1], 0), 24).expect("a contiguous view");
        validate_view(&view(&[3, 2], &[1, 3], 0), 24).expect("its transpose");
        assert!(
            validate_view(&view(&[4, 3], &[0, 1], 3), 24).is_ok(),
            "expand with stride 0"
        );
        assert!(
            validate_view(&view(&[], &[], 5), 24).is_ok(),
            "0-d at the last element"
        );
        assert!(
            validate_view(&view(&[0], &[1], 1000), 0).is_ok(),
            "no elements, no bytes"
        );
    }

    #[test]
    fn refuses_views_outside_the_storage() {
        assert!(matches!(
            validate_view(&view(&[2, 3], &[3, 1], 1), 24),
            Err(ViewError::OutOfBounds { .. })
        ));
        assert!(matches!(
            validate_view(&view(&[], &[], 6), 24),
            Err(ViewError::OutOfBounds { .. })
        ));
        assert!(matches!(
            validate_view(&view(&[2], &[-1], 1), 24),
            Err(ViewError::NegativeStride { .. })
        ));
        assert!(matches!(
            validate_view(&view(&[-2], &[1], 0), 24),
            Err(ViewError::NegativeSize { .. })
        ));
        assert!(matches!(
            validate_view(&view(&[2], &[1], -1), 24),
            Err(ViewError::NegativeOffset(-1))
        ));
        assert!(matches!(
            validate_view(&view(&[2], &[1, 1], 0), 24),
            Err(ViewError::RankMismatch { .. })
        ));
        let huge = i64::MAX;
        assert!(matches!(
            validate_view(&view(&[huge, huge, huge], &[1, 1, 1], 0), 24),
            Err(ViewError::Overflow { .. })
        ));
        assert!(validate_view(&view(&[2, huge], &[huge, 1], huge), usize::MAX).is_err());
    }
}
