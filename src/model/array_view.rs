//! Tensors as `ndarray` views, and arrays written straight into the memory
//! a tensor is shared from (the `ndarray` feature).
//!
//! ndarray's strides are in elements, as torch's are, and a view keeps
//! the tensor's own: a transposed or expanded (stride 0) tensor is a
//! transposed or broadcast array view of the same memory. The views are
//! made with ndarray's safe constructors over a slice cast with bytemuck,
//! so no unsafe code is needed here.

use bytemuck::Pod;
use ndarray::{
    ArrayView, ArrayViewD, ArrayViewMut, ArrayViewMutD, AsArray, Dimension, IxDyn, ShapeBuilder,
};

use super::element::{cast_slice, cast_slice_mut, check_element, check_size};
use super::typed::{contiguous_view, too_large};
use super::{Element, ElementError, StorageAllocator, StorageWriter, Tensor, ViewError};

impl Tensor {
    /// The elements as an n-d array view, in place, with the tensor's
    /// sizes and strides: any view, transposed, sliced or expanded, reads
    /// the storage's own memory (shared memory that other processes may be
    /// writing; see [`Segment`](crate::model::Segment)).
    ///
    /// `T` must be the tensor's dtype (a `bool` tensor reads as `u8`) and
    /// [`Pod`](https://docs.rs/bytemuck/1/bytemuck/trait.Pod.html). Needs the `ndarray` feature.
    ///
    /// # Errors
    ///
    /// [`ElementError::DTypeMismatch`] for another dtype,
    /// [`ElementError::NotLocal`] when the storage's bytes are not in this
    /// process, [`ElementError::Misaligned`] when the elements are not at
    /// an address aligned for `T`, and [`ElementError::View`] for a view
    /// ndarray cannot index (one whose element count overflows `isize`).
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{StrategyKind, Tensor};
    ///
    /// let t = Tensor::from_slice(&StrategyKind::Bytes, &[1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// let mut view = t.view();
    /// view.sizes = vec![3, 2];
    /// view.strides = vec![1, 3];
    /// let transposed = Tensor::new(t.storage().clone(), view)?;
    /// let array = transposed.as_array_view::<i32>()?;
    /// assert_eq!(array.shape(), [3, 2]);
    /// assert_eq!(array[[2, 1]], 6);
    /// assert_eq!(array.t(), t.as_array_view::<i32>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_array_view<T: Element + Pod>(&self) -> Result<ArrayViewD<'_, T>, ElementError> {
        check_element::<T>(self.dtype())?;
        let bytes = self.aligned_local_bytes::<T>()?;
        if self.numel() == 0 {
            // No elements: the strides do not matter, and ndarray would
            // want them to reach no further than the empty slice.
            return ArrayView::from_shape(IxDyn(self.sizes()), &[]).map_err(|_| overflow(self));
        }
        let size = self.dtype().element_size();
        // The elements' span, from the first to the last one the view
        // reaches: in bounds and without overflow, since Tensor::new
        // checked them.
        let last = self
            .sizes()
            .iter()
            .zip(self.strides())
            .map(|(&len, &stride)| (len - 1) * stride)
            .sum::<usize>()
            + self.storage_offset();
        let span = bytes
            .get(self.storage_offset() * size..(last + 1) * size)
            .unwrap_or_default();
        let elements = cast_slice(span)?;
        let shape = IxDyn(self.sizes()).strides(IxDyn(self.strides()));
        // Fails only for a view whose element count overflows isize: an
        // expanded one, which torch allows and ndarray does not.
        ArrayView::from_shape(shape, elements).map_err(|_| overflow(self))
    }

    /// A contiguous tensor holding a copy of `array`, in logical
    /// (row-major) order, written once, into a storage from `allocator`: a
    /// [`SharingContext`](crate::SharingContext) (its strategy, reusing
    /// memory) or a [`StrategyKind`](crate::StrategyKind). Takes any array
    /// or view (`&array`, `array.view()`, a slice of one, a transposed
    /// one, one with negative strides). Needs the `ndarray` feature.
    ///
    /// # Errors
    ///
    /// [`ElementError::TooLarge`] when the array's shape does not fit in
    /// torch's sizes, [`ElementError::Allocate`] when the storage cannot be
    /// allocated.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::ndarray::array;
    /// use tensorshare::{Authkey, DType, SharingContext, Tensor};
    ///
    /// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
    /// let image = array![[0.0f32, 0.5], [1.0, 1.5]];
    /// let t = Tensor::from_array(&sharing, &image)?;
    /// assert_eq!((t.dtype(), t.sizes()), (DType::Float32, &[2, 2][..]));
    /// let transposed = Tensor::from_array(&sharing, image.t())?;
    /// assert_eq!(transposed.as_slice::<f32>()?, [0.0, 1.0, 0.5, 1.5]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_array<'a, T, D>(
        allocator: &(impl StorageAllocator + ?Sized),
        array: impl AsArray<'a, T, D>,
    ) -> Result<Tensor, ElementError>
    where
        T: Element,
        D: Dimension,
    {
        let array: ArrayView<'a, T, D> = array.into();
        if let Some(elements) = array.as_slice() {
            return Tensor::from_slice(allocator, elements, array.shape());
        }
        check_size::<T>()?;
        let (view, nbytes) = contiguous_view(T::DTYPE, array.shape())?;
        let mut writer = allocator.allocate_storage(nbytes)?;
        let size = T::DTYPE.element_size();
        let bytes = writer.as_bytes_mut().get_mut(..nbytes).unwrap_or_default();
        for (element, value) in bytes.chunks_exact_mut(size).zip(array.iter()) {
            element.copy_from_slice(bytemuck::bytes_of(value));
        }
        Tensor::new(writer.freeze(), view).map_err(ElementError::View)
    }
}

/// The error for a view ndarray cannot index.
fn overflow(tensor: &Tensor) -> ElementError {
    let view = tensor.view();
    ElementError::View(ViewError::Overflow {
        sizes: view.sizes,
        strides: view.strides,
    })
}

impl StorageWriter {
    /// The first elements of the storage as a writable, row-major n-d
    /// array of shape `sizes`: the memory of a tensor being built, to fill
    /// in place (`assign`, `zip_mut_with`, a decoder writing into it)
    /// before [`into_tensor`](Self::into_tensor) makes it the tensor of
    /// that shape. Needs the `ndarray` feature.
    ///
    /// # Errors
    ///
    /// [`ElementError::ShapeMismatch`] when the storage holds fewer
    /// elements than `sizes`, [`ElementError::TooLarge`] when their size
    /// overflows, [`ElementError::Misaligned`] when the bytes are not
    /// aligned for `T`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::ndarray::array;
    /// use tensorshare::{Authkey, SharingContext};
    ///
    /// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
    /// let mut writer = sharing.allocate(2 * 3 * size_of::<f64>())?;
    /// let mut rows = writer.as_array_view_mut::<f64>(&[2, 3])?;
    /// rows.assign(&array![1.0, 2.0, 3.0]); // broadcast to both rows
    /// rows[[1, 2]] = 9.0;
    /// let t = writer.into_tensor::<f64>(&[2, 3])?;
    /// assert_eq!(t.as_slice::<f64>()?, [1.0, 2.0, 3.0, 1.0, 2.0, 9.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_array_view_mut<T: Element + Pod>(
        &mut self,
        sizes: &[usize],
    ) -> Result<ArrayViewMutD<'_, T>, ElementError> {
        check_size::<T>()?;
        let (_, nbytes) = contiguous_view(T::DTYPE, sizes)?;
        let available = self.as_bytes_mut().len();
        let Some(bytes) = self.as_bytes_mut().get_mut(..nbytes) else {
            let size = T::DTYPE.element_size();
            return Err(ElementError::ShapeMismatch {
                sizes: sizes.to_vec(),
                expected: nbytes / size,
                found: available / size,
            });
        };
        let elements = cast_slice_mut::<T>(bytes)?;
        // Cannot fail: the slice holds exactly the shape's elements, whose
        // bytes fit in isize.
        ArrayViewMut::from_shape(IxDyn(sizes), elements)
            .map_err(|_| too_large(sizes, T::DTYPE.element_size()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ndarray::{Array, ArrayD, Axis, s};
    use tensorshare_strategies::StrategyKind;

    use super::*;
    use crate::DType;
    use crate::model::Storage;
    use crate::model::typed::tests::{OffByOne, restrided};

    fn arange(sizes: &[usize]) -> Tensor {
        let numel = sizes.iter().product::<usize>();
        let values: Vec<f32> = (0..numel).map(|i| i as f32).collect();
        Tensor::from_slice(&StrategyKind::Bytes, &values, sizes).unwrap()
    }

    #[test]
    fn a_strided_view_is_an_array_view_of_the_same_memory() {
        let t = arange(&[3, 4]);
        let array = t.as_array_view::<f32>().unwrap();
        assert_eq!(array.shape(), [3, 4]);
        assert_eq!(array.strides(), [4, 1]);
        assert_eq!(
            array.as_ptr().cast::<u8>(),
            t.storage().bytes().unwrap().as_ptr()
        );
        // Transposed rows 1..3, columns 1..4, and an expanded (stride 0) view.
        for view in [
            restrided(&t, &[3, 2], &[1, 4], 5),
            restrided(&t, &[2, 3, 2], &[0, 1, 4], 1),
            restrided(&t, &[], &[], 11),
        ] {
            let array = view.as_array_view::<f32>().unwrap();
            assert_eq!(array.shape(), view.sizes());
            let strides: Vec<usize> = array.strides().iter().map(|&s| s as usize).collect();
            assert_eq!(strides, view.strides());
            assert_eq!(
                array.iter().copied().collect::<Vec<_>>(),
                view.to_vec::<f32>().unwrap()
            );
        }
        let columns = restrided(&t, &[4, 3], &[1, 4], 0)
            .as_array_view::<f32>()
            .unwrap()
            .to_owned();
        assert_eq!(columns, array.t());
    }

    #[test]
    fn views_are_checked_as_slices_are() {
        let t = arange(&[2, 2]);
        assert!(matches!(
            t.as_array_view::<f64>(),
            Err(ElementError::DTypeMismatch {
                dtype: DType::Float32,
                ..
            })
        ));
        let storage = Storage::from_segment(Arc::new(OffByOne(vec![0; 3])));
        let misaligned = Tensor::new(
            storage,
            crate::model::TensorView::contiguous(DType::Int32, &[2]),
        )
        .unwrap();
        assert!(matches!(
            misaligned.as_array_view::<i32>(),
            Err(ElementError::Misaligned { align: 4, .. })
        ));
        // More elements than ndarray can count: torch allows it expanded.
        let huge = restrided(&t, &[1 << 62, 3], &[0, 0], 0);
        assert!(matches!(
            huge.as_array_view::<f32>(),
            Err(ElementError::View(ViewError::Overflow { .. }))
        ));
        for offset in [100, i64::MAX] {
            let empty = restrided(&t, &[0, 5], &[5, 1], offset);
            assert_eq!(empty.as_array_view::<f32>().unwrap().shape(), [0, 5]);
        }
    }

    #[test]
    fn an_array_is_written_in_logical_order_whatever_its_layout() {
        let array: ArrayD<i64> = Array::from_iter(0..24)
            .into_shape_with_order(vec![2, 3, 4])
            .unwrap();
        let t = Tensor::from_array(&StrategyKind::Bytes, &array).unwrap();
        assert_eq!((t.dtype(), t.sizes()), (DType::Int64, &[2, 3, 4][..]));
        assert_eq!(t.as_array_view::<i64>().unwrap(), array);
        for view in [
            array.view().permuted_axes(vec![2, 0, 1]),
            array.slice(s![.., 1.., ..;2]).into_dyn(),
            array.slice(s![..;-1, .., ..;-3]).into_dyn(),
            array.index_axis(Axis(1), 2).insert_axis(Axis(0)),
        ] {
            let t = Tensor::from_array(&StrategyKind::Bytes, view.view()).unwrap();
            assert!(t.is_contiguous());
            assert_eq!(t.sizes(), view.shape());
            assert_eq!(t.as_array_view::<i64>().unwrap(), view);
            assert_eq!(
                t.to_vec::<i64>().unwrap(),
                view.iter().copied().collect::<Vec<_>>()
            );
        }
        let bools = Array::from_shape_vec((2, 2), vec![true, false, false, true]).unwrap();
        let t = Tensor::from_array(&StrategyKind::Bytes, bools.t()).unwrap();
        assert_eq!(
            (t.dtype(), t.to_vec::<bool>().unwrap()),
            (DType::Bool, vec![true, false, false, true])
        );
    }

    #[test]
    fn a_writer_is_filled_through_an_array_view() {
        let mut writer = Storage::allocate(StrategyKind::FileDescriptor, 2 * 3 * 8).unwrap();
        let mut rows = writer.as_array_view_mut::<f64>(&[2, 3]).unwrap();
        rows.assign(&ndarray::arr1(&[1.0, 2.0, 3.0]));
        rows[[1, 0]] = -1.0;
        let t = writer.into_tensor::<f64>(&[2, 3]).unwrap();
        assert_eq!(
            t.as_slice::<f64>().unwrap(),
            [1.0, 2.0, 3.0, -1.0, 2.0, 3.0]
        );

        let mut small = Storage::allocate(StrategyKind::Bytes, 20).unwrap();
        assert_eq!(
            small.as_array_view_mut::<f32>(&[2, 3]).unwrap_err(),
            ElementError::ShapeMismatch {
                sizes: vec![2, 3],
                expected: 6,
                found: 5
            }
        );
        // A storage larger than the shape: its first elements.
        assert_eq!(small.as_array_view_mut::<f32>(&[2, 2]).unwrap().len(), 4);
    }
}
