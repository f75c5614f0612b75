//! Typed access to a tensor's elements: viewed in place when the view is
//! contiguous, copied in logical order otherwise; and tensors written from
//! typed data straight into the memory they are shared from.

use bytemuck::Pod;
use tensorshare_strategies::bytes::file_window::FileWindow;

use super::element::{cast_slice, cast_slice_mut, check_element, check_size};
use super::{Element, ElementError, StorageAllocator, StorageWriter, Tensor, TensorView};
use crate::DType;

impl Tensor {
    /// The elements as a slice of `T`, in place: no copy, the storage's own
    /// memory (shared memory that other processes may be writing; see
    /// [`Segment`](crate::model::Segment)).
    ///
    /// `T` must be the tensor's dtype ([`Element::DTYPE`]; a `bool` tensor
    /// reads as `u8`, since `bool` is never viewed in place) and a type
    /// every bit pattern of which is a value ([`Pod`](https://docs.rs/bytemuck/1/bytemuck/trait.Pod.html)). Elements are in the
    /// host's byte order, as torch holds them in memory.
    ///
    /// # Errors
    ///
    /// [`ElementError::DTypeMismatch`] for another dtype,
    /// [`ElementError::NotContiguous`] for a strided view (copy it with
    /// [`to_vec`](Self::to_vec)), [`ElementError::NotLocal`] when the
    /// storage's bytes are not in this process, and
    /// [`ElementError::Misaligned`] when the first element is not at an
    /// address aligned for `T`: a storage whose bytes start unaligned, as a
    /// heap buffer may (shared memory starts on a page); copy it with
    /// [`to_vec`](Self::to_vec). A storage read from a file that holds it
    /// unaligned (a legacy `torch.save` stream) is instead copied once, the
    /// first time it is viewed, and the copy is viewed from then on.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{StrategyKind, Tensor};
    ///
    /// let t = Tensor::from_slice(&StrategyKind::Bytes, &[1i64, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(t.as_slice::<i64>()?, &[1, 2, 3, 4, 5, 6]);
    /// assert!(t.as_slice::<f64>().is_err(), "an int64 tensor is not float64");
    /// # Ok::<(), tensorshare::model::ElementError>(())
    /// ```
    pub fn as_slice<T: Element + Pod>(&self) -> Result<&[T], ElementError> {
        check_element::<T>(self.dtype())?;
        let bytes = self.aligned_local_bytes::<T>()?;
        if !self.is_contiguous() {
            return Err(ElementError::NotContiguous {
                sizes: self.sizes().to_vec(),
                strides: self.strides().to_vec(),
            });
        }
        cast_slice(contiguous_bytes(self, bytes))
    }

    /// Copies the elements into a `Vec<T>`, in logical (row-major) order,
    /// from any view: transposed, sliced, expanded.
    ///
    /// `T` must be the tensor's dtype (a `bool` tensor also reads as `u8`).
    /// Every element of a `bool` read is checked to be 0 or 1.
    ///
    /// # Errors
    ///
    /// [`ElementError::DTypeMismatch`] for another dtype,
    /// [`ElementError::NotLocal`] when the storage's bytes are not in this
    /// process, [`ElementError::TooLarge`] when the copy does not fit in
    /// memory (an expanded view of a few bytes may stand for more elements
    /// than the address space holds, and a peer can send one), and
    /// [`ElementError::InvalidValue`] for a `bool` byte other than 0 or 1.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{StrategyKind, Tensor};
    ///
    /// let t = Tensor::from_slice(&StrategyKind::Bytes, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// // The transpose: sizes [3, 2], strides [1, 3].
    /// let mut view = t.view();
    /// view.sizes = vec![3, 2];
    /// view.strides = vec![1, 3];
    /// let transposed = Tensor::new(t.storage().clone(), view)?;
    /// assert_eq!(transposed.to_vec::<f32>()?, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, ElementError> {
        check_element::<T>(self.dtype())?;
        let bytes = self.local_bytes()?;
        let numel = self.numel();
        let size = self.dtype().element_size();
        let mut out = Vec::new();
        out.try_reserve_exact(numel)
            .map_err(|_| too_large(self.sizes(), size))?;
        let read = |index: usize, element: &[u8]| {
            bytemuck::checked::try_pod_read_unaligned::<T>(element).map_err(|_| {
                ElementError::InvalidValue {
                    index,
                    type_name: std::any::type_name::<T>(),
                }
            })
        };
        if self.is_contiguous() {
            for (index, element) in contiguous_bytes(self, bytes).chunks_exact(size).enumerate() {
                out.push(read(index, element)?);
            }
        } else {
            // In bounds: Tensor::new proved every element offset + size <= nbytes.
            let elements = self
                .element_offsets()
                .filter_map(|offset| bytes.get(offset..offset + size));
            for (index, element) in elements.enumerate() {
                out.push(read(index, element)?);
            }
        }
        Ok(out)
    }

    /// A contiguous tensor of shape `sizes` holding `data`, written once,
    /// into a storage from `allocator`: a
    /// [`SharingContext`](crate::SharingContext) (the context's strategy,
    /// reusing memory), or a [`StrategyKind`](crate::StrategyKind) (a
    /// fresh segment of that kind). Its dtype is `T`'s
    /// ([`Element::DTYPE`]); an empty `sizes` makes a 0-d tensor of one
    /// element.
    ///
    /// # Errors
    ///
    /// [`ElementError::ShapeMismatch`] when `data` does not hold exactly the
    /// elements of `sizes`, [`ElementError::TooLarge`] when their size
    /// overflows, and [`ElementError::Allocate`] when the storage cannot be
    /// allocated.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Authkey, DType, SharingContext, Tensor, Value};
    ///
    /// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
    /// let labels = Tensor::from_slice(&sharing, &[3i64, 1, 4, 1], &[4])?;
    /// assert_eq!(labels.dtype(), DType::Int64);
    /// // Already in shared memory: sending it copies nothing.
    /// let pickle = sharing.dumps(&Value::from(labels))?;
    /// # let _ = pickle;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_slice<T: Element>(
        allocator: &(impl StorageAllocator + ?Sized),
        data: &[T],
        sizes: &[usize],
    ) -> Result<Tensor, ElementError> {
        check_size::<T>()?;
        let (view, nbytes) = contiguous_view(T::DTYPE, sizes)?;
        let expected = nbytes / T::DTYPE.element_size();
        if data.len() != expected {
            return Err(ElementError::ShapeMismatch {
                sizes: sizes.to_vec(),
                expected,
                found: data.len(),
            });
        }
        let mut writer = allocator.allocate_storage(nbytes)?;
        if let Some(bytes) = writer.as_bytes_mut().get_mut(..nbytes) {
            bytes.copy_from_slice(bytemuck::cast_slice(data));
        }
        Tensor::new(writer.freeze(), view).map_err(ElementError::View)
    }

    /// The storage's bytes, when they are in this process.
    pub(crate) fn local_bytes(&self) -> Result<&[u8], ElementError> {
        self.storage().bytes().ok_or(ElementError::NotLocal {
            kind: self.storage().kind(),
        })
    }

    /// [`local_bytes`](Self::local_bytes) at an address aligned for `T`,
    /// for a view in place: a storage left unaligned in the file it was
    /// read from is copied once to get there. Other unaligned bytes are
    /// returned as they are, for the view to refuse.
    pub(crate) fn aligned_local_bytes<T>(&self) -> Result<&[u8], ElementError> {
        let bytes = self.local_bytes()?;
        let align = std::mem::align_of::<T>();
        if (bytes.as_ptr() as usize).is_multiple_of(align) {
            return Ok(bytes);
        }
        let Some(window) = self.storage().local_segment::<FileWindow>() else {
            return Ok(bytes);
        };
        let aligned = window.aligned_bytes(align)?;
        Ok(aligned.get(..bytes.len()).unwrap_or(aligned))
    }
}

impl StorageWriter {
    /// The bytes, writable, as a slice of `T`: all of them, which must be a
    /// whole number of `T`s, starting at an address aligned for `T`.
    /// Segments in shared memory start on a page, so this fails only for
    /// a size that is not a multiple of `T`'s.
    ///
    /// # Errors
    ///
    /// [`ElementError::PartialElement`] when the size is not a multiple of
    /// `T`'s, [`ElementError::Misaligned`] when the bytes are not aligned
    /// for `T` (a heap buffer of the `bytes` strategy may not be).
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare::{Authkey, SharingContext};
    ///
    /// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
    /// let mut writer = sharing.allocate(6 * size_of::<f32>())?;
    /// for (i, x) in writer.as_mut_slice::<f32>()?.iter_mut().enumerate() {
    ///     *x = i as f32 / 2.0;
    /// }
    /// let t = writer.into_tensor::<f32>(&[2, 3])?;
    /// assert_eq!(t.as_slice::<f32>()?, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn as_mut_slice<T: Pod>(&mut self) -> Result<&mut [T], ElementError> {
        cast_slice_mut(self.as_bytes_mut())
    }

    /// Ends writing, as [`freeze`](Self::freeze) does, and views the
    /// storage as a contiguous tensor of `T`'s dtype and shape `sizes`,
    /// from its first byte. The storage may be larger than the view.
    ///
    /// A `bool` tensor's bytes must be 0 or 1, as torch's are.
    ///
    /// # Errors
    ///
    /// [`ElementError::View`] when the storage is smaller than the view,
    /// [`ElementError::TooLarge`] when the view's size overflows.
    ///
    /// # Examples
    ///
    /// A batch of int64 labels written in place, as typed elements:
    ///
    /// ```
    /// use tensorshare::{Authkey, DType, SharingContext};
    ///
    /// let sharing = SharingContext::new(Authkey::random()?);
    /// let mut writer = sharing.allocate(8 * size_of::<i64>())?;
    /// for (i, label) in writer.as_mut_slice::<i64>()?.iter_mut().enumerate() {
    ///     *label = i as i64 % 3;
    /// }
    /// let labels = writer.into_tensor::<i64>(&[8])?;
    /// assert_eq!((labels.dtype(), labels.sizes()), (DType::Int64, &[8][..]));
    /// assert_eq!(labels.as_slice::<i64>()?, [0, 1, 2, 0, 1, 2, 0, 1]);
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn into_tensor<T: Element>(self, sizes: &[usize]) -> Result<Tensor, ElementError> {
        check_size::<T>()?;
        let (view, _) = contiguous_view(T::DTYPE, sizes)?;
        Tensor::new(self.freeze(), view).map_err(ElementError::View)
    }
}

/// The bytes of a contiguous view's elements.
fn contiguous_bytes<'a>(tensor: &Tensor, bytes: &'a [u8]) -> &'a [u8] {
    // A view with no elements needs no bytes, wherever its offset points:
    // Tensor::new does not check the offset of one, and a peer may send
    // any.
    if tensor.numel() == 0 {
        return &[];
    }
    // In bounds and without overflow: Tensor::new checked that the
    // elements lie in the storage.
    let size = tensor.dtype().element_size();
    let start = tensor.storage_offset() * size;
    bytes
        .get(start..start + tensor.numel() * size)
        .unwrap_or_default()
}

/// A contiguous view of `dtype` and shape `sizes` from element 0, and the
/// bytes it covers.
pub(crate) fn contiguous_view(
    dtype: DType,
    sizes: &[usize],
) -> Result<(TensorView, usize), ElementError> {
    let size = dtype.element_size();
    let fits_torch = sizes.iter().all(|&s| i64::try_from(s).is_ok());
    let nbytes = sizes
        .iter()
        .try_fold(size, |bytes, &s| bytes.checked_mul(s))
        .filter(|&bytes| fits_torch && isize::try_from(bytes).is_ok())
        .ok_or_else(|| too_large(sizes, size))?;
    Ok((TensorView::contiguous(dtype, sizes), nbytes))
}

/// The error for a shape whose elements do not fit in memory.
pub(crate) fn too_large(sizes: &[usize], element_size: usize) -> ElementError {
    ElementError::TooLarge {
        sizes: sizes.to_vec(),
        numel: sizes.iter().fold(1usize, |n, &s| n.saturating_mul(s)),
        element_size,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::any::Any;
    use std::sync::Arc;

    use half::{bf16, f16};
    use num_complex::Complex;
    use tensorshare_strategies::{Segment, StrategyKind};

    use super::*;
    use crate::model::{DupFdRef, Residence, Storage, ViewError};

    /// Bytes that start one byte past an aligned allocation.
    #[derive(Debug)]
    pub(crate) struct OffByOne(pub(crate) Vec<u64>);

    impl Segment for OffByOne {
        fn as_bytes(&self) -> &[u8] {
            bytemuck::cast_slice::<u64, u8>(&self.0)
                .get(1..)
                .unwrap_or_default()
        }

        fn kind(&self) -> StrategyKind {
            StrategyKind::Bytes
        }

        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// `tensor`'s storage seen through `sizes`, `strides` and `offset`.
    pub(crate) fn restrided(
        tensor: &Tensor,
        sizes: &[i64],
        strides: &[i64],
        offset: i64,
    ) -> Tensor {
        let view = TensorView {
            sizes: sizes.to_vec(),
            strides: strides.to_vec(),
            storage_offset: offset,
            ..tensor.view()
        };
        Tensor::new(tensor.storage().clone(), view).unwrap()
    }

    fn int64s(values: &[i64], sizes: &[usize]) -> Tensor {
        Tensor::from_slice(&StrategyKind::Bytes, values, sizes).unwrap()
    }

    #[test]
    fn a_contiguous_view_is_a_slice_of_its_storage() {
        let t = int64s(&[0, 1, 2, 3, 4, 5, 6, 7], &[2, 4]);
        assert_eq!(t.as_slice::<i64>().unwrap(), [0, 1, 2, 3, 4, 5, 6, 7]);
        let slice = t.as_slice::<i64>().unwrap();
        assert_eq!(
            slice.as_ptr().cast::<u8>(),
            t.storage().bytes().unwrap().as_ptr()
        );
        // Rows 1 and 2 of a [4, 2] view: offset 2, contiguous.
        let rows = restrided(&t, &[2, 2], &[2, 1], 2);
        assert_eq!(rows.as_slice::<i64>().unwrap(), [2, 3, 4, 5]);
        // A dimension of size 1 may have any stride, as in torch.
        let column = restrided(&t, &[3, 1], &[1, 99], 5);
        assert!(column.is_contiguous());
        assert_eq!(column.as_slice::<i64>().unwrap(), [5, 6, 7]);
        // No elements, wherever the offset points, however far.
        for offset in [1000, i64::MAX] {
            let empty = restrided(&t, &[0, 4], &[4, 1], offset);
            assert_eq!(empty.as_slice::<i64>().unwrap(), [] as [i64; 0]);
            assert_eq!(empty.to_vec::<i64>().unwrap(), [] as [i64; 0]);
        }
    }

    #[test]
    fn another_dtype_is_refused_by_name() {
        let t = int64s(&[1, 2], &[2]);
        let error = t.as_slice::<f64>().unwrap_err();
        assert_eq!(
            error,
            ElementError::DTypeMismatch {
                dtype: DType::Int64,
                requested: DType::Float64,
                type_name: "f64",
            }
        );
        assert_eq!(
            error.to_string(),
            "the tensor holds int64 elements, not float64 (f64)"
        );
        assert_eq!(
            t.to_vec::<u64>().unwrap_err().to_string(),
            "the tensor holds int64 elements, not uint64 (u64)"
        );
    }

    #[test]
    fn a_strided_view_is_copied_in_logical_order_and_not_sliced() {
        let t = int64s(&(0..12).collect::<Vec<_>>(), &[3, 4]);
        // The transpose of rows 1..3, columns 1..4: sizes [3, 2], strides [1, 4], offset 5.
        let view = restrided(&t, &[3, 2], &[1, 4], 5);
        assert_eq!(view.to_vec::<i64>().unwrap(), [5, 9, 6, 10, 7, 11]);
        assert!(matches!(
            view.as_slice::<i64>(),
            Err(ElementError::NotContiguous { sizes, strides }) if sizes == [3, 2] && strides == [1, 4]
        ));
        // Expanded: one element seen three times.
        let expanded = restrided(&t, &[3], &[0], 7);
        assert_eq!(expanded.to_vec::<i64>().unwrap(), [7, 7, 7]);
    }

    #[test]
    fn a_copy_larger_than_memory_is_refused() {
        let t = int64s(&[1], &[1]);
        let expanded = restrided(&t, &[1 << 62], &[0], 0);
        assert!(matches!(
            expanded.to_vec::<i64>(),
            Err(ElementError::TooLarge { numel, element_size: 8, .. }) if numel == 1 << 62
        ));
    }

    #[test]
    fn misaligned_elements_are_copied_and_not_sliced() {
        let storage = Storage::from_segment(Arc::new(OffByOne(vec![0; 3])));
        let t = Tensor::new(storage, TensorView::contiguous(DType::Int32, &[4])).unwrap();
        assert!(matches!(
            t.as_slice::<i32>(),
            Err(ElementError::Misaligned { align: 4, type_name: "i32", address }) if address % 4 != 0
        ));
        assert_eq!(t.to_vec::<i32>().unwrap(), [0; 4]);
        // Bytes are never misaligned.
        let bytes = Tensor::new(
            t.storage().clone(),
            TensorView::contiguous(DType::UInt8, &[23]),
        )
        .unwrap();
        assert_eq!(bytes.as_slice::<u8>().unwrap().len(), 23);
    }

    #[test]
    fn bools_are_written_as_bools_and_read_checked_or_as_bytes() {
        let t = Tensor::from_slice(&StrategyKind::Bytes, &[true, false, true], &[3]).unwrap();
        assert_eq!(t.dtype(), DType::Bool);
        assert_eq!(t.to_vec::<bool>().unwrap(), [true, false, true]);
        assert_eq!(t.as_slice::<u8>().unwrap(), [1, 0, 1]);
        // A byte that is no bool, as another process may write one.
        let mut writer = Storage::allocate(StrategyKind::Bytes, 3).unwrap();
        writer.as_bytes_mut().copy_from_slice(&[1, 0, 2]);
        let hostile = writer.into_tensor::<bool>(&[3]).unwrap();
        assert_eq!(
            hostile.to_vec::<bool>(),
            Err(ElementError::InvalidValue {
                index: 2,
                type_name: "bool"
            })
        );
        assert_eq!(hostile.to_vec::<u8>().unwrap(), [1, 0, 2]);
    }

    #[test]
    fn half_and_complex_elements_round_trip() {
        let halves = [f16::from_f32(0.5), f16::from_f32(-2.0), f16::INFINITY];
        let t = Tensor::from_slice(&StrategyKind::Bytes, &halves, &[3]).unwrap();
        assert_eq!(t.dtype(), DType::Float16);
        assert_eq!(t.as_slice::<f16>().unwrap(), halves);
        assert_eq!(
            DType::Float16.decode_element(&t.storage().bytes().unwrap()[2..4]),
            Some(crate::model::Scalar::Float(-2.0))
        );
        let bfloats = [bf16::from_f32(1.5), bf16::from_f32(-3.0)];
        let t = Tensor::from_slice(&StrategyKind::Bytes, &bfloats, &[2]).unwrap();
        assert_eq!(t.dtype(), DType::BFloat16);
        assert_eq!(t.to_vec::<bf16>().unwrap(), bfloats);
        assert!(t.as_slice::<f16>().is_err(), "bfloat16 is not float16");
        let complex = [Complex::new(1.0f32, -1.0), Complex::new(0.5, 2.0)];
        let t = Tensor::from_slice(&StrategyKind::Bytes, &complex, &[2]).unwrap();
        assert_eq!(t.dtype(), DType::Complex64);
        assert_eq!(t.as_slice::<Complex<f32>>().unwrap(), complex);
        assert_eq!(
            DType::Complex64.decode_element(&t.storage().bytes().unwrap()[8..]),
            Some(crate::model::Scalar::Complex(0.5, 2.0))
        );
    }

    #[test]
    fn from_slice_checks_the_shape() {
        assert_eq!(
            Tensor::from_slice(&StrategyKind::Bytes, &[1i32, 2, 3], &[2, 2]).unwrap_err(),
            ElementError::ShapeMismatch {
                sizes: vec![2, 2],
                expected: 4,
                found: 3
            }
        );
        let scalar = Tensor::from_slice(&StrategyKind::Bytes, &[4.5f64], &[]).unwrap();
        assert_eq!(
            (scalar.sizes(), scalar.to_vec::<f64>().unwrap()),
            (&[][..], vec![4.5])
        );
        let empty = Tensor::from_slice::<f32>(&StrategyKind::Bytes, &[], &[0, 3]).unwrap();
        assert_eq!((empty.numel(), empty.storage().nbytes()), (0, 0));
        assert!(matches!(
            Tensor::from_slice::<u8>(&StrategyKind::Bytes, &[], &[usize::MAX, 2]),
            Err(ElementError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_writer_is_a_slice_of_elements_then_a_tensor() {
        let mut writer = Storage::allocate(StrategyKind::FileDescriptor, 4 * 6).unwrap();
        writer
            .as_mut_slice::<f32>()
            .unwrap()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f32);
        let t = writer.into_tensor::<f32>(&[2, 3]).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(t.storage().kind().name(), "file_descriptor");

        let mut odd = Storage::allocate(StrategyKind::Bytes, 10).unwrap();
        assert_eq!(
            odd.as_mut_slice::<f32>().unwrap_err(),
            ElementError::PartialElement {
                nbytes: 10,
                type_name: "f32",
                element_size: 4
            }
        );
        assert!(matches!(
            odd.into_tensor::<f32>(&[3]),
            Err(ElementError::View(ViewError::OutOfBounds {
                needed: 12,
                nbytes: 10
            }))
        ));
    }

    #[test]
    fn bytes_that_are_elsewhere_cannot_be_read() {
        let remote = Storage::remote(
            Residence::FileDescriptor(DupFdRef {
                address: b"\0sharer".to_vec(),
                key: 1,
            }),
            16,
        );
        let t = Tensor::new(remote, TensorView::contiguous(DType::Int64, &[2])).unwrap();
        let error = t.as_slice::<i64>().unwrap_err();
        assert_eq!(
            error,
            ElementError::NotLocal {
                kind: crate::model::StorageKind::Strategy(StrategyKind::FileDescriptor)
            }
        );
        assert_eq!(t.to_vec::<i64>().unwrap_err(), error);
    }
}
