//! Rust types for torch's element types, and why typed access to a tensor's
//! elements can fail.
//!
//! A storage's bytes may be shared memory that other processes write at any
//! time (see [`Segment`](crate::model::Segment)): only types for which every bit
//! pattern is a value ([`bytemuck::Pod`](https://docs.rs/bytemuck/1/bytemuck/trait.Pod.html)) are ever viewed in place. A
//! `bool` is not one of them: bool tensors are read by copy, each byte
//! checked ([`Tensor::to_vec`](crate::Tensor::to_vec)), or viewed in place
//! as `u8`.

use bytemuck::{CheckedBitPattern, NoUninit};
use half::{bf16, f16};
use num_complex::Complex;
use tensorshare_strategies::AllocateError;

use super::{StorageKind, ViewError};
use crate::DType;

/// A Rust type whose values are the elements of a torch dtype, laid out as
/// torch lays them out in memory.
///
/// Implemented for `bool`, `u8`, `i8`, `i16`, `i32`, `i64`, `u16`, `u32`,
/// `u64`, `f32`, `f64`, [`half::f16`], [`half::bf16`] and
/// [`num_complex::Complex`] of `f16`, `f32` and `f64` (`complex32`,
/// `complex64`, `complex128`). The bounds are bytemuck's: an element is
/// read from bytes that are checked first ([`CheckedBitPattern`]) and
/// written as the bytes it is ([`NoUninit`]); types that are also
/// [`bytemuck::Pod`] can be viewed in place.
///
/// A type of your own (a `#[repr(transparent)]` newtype of `f32`, say) can
/// implement it too; its size must be its dtype's element size, which
/// every typed access checks.
///
/// # Examples
///
/// ```
/// use tensorshare::DType;
/// use tensorshare::model::Element;
///
/// assert_eq!(<i64 as Element>::DTYPE, DType::Int64);
/// assert_eq!(<tensorshare::half::bf16 as Element>::DTYPE, DType::BFloat16);
/// ```
///
/// [`CheckedBitPattern`]: https://docs.rs/bytemuck/1/bytemuck/checked/trait.CheckedBitPattern.html
/// [`NoUninit`]: https://docs.rs/bytemuck/1/bytemuck/trait.NoUninit.html
/// [`bytemuck::Pod`]: https://docs.rs/bytemuck/1/bytemuck/trait.Pod.html
pub trait Element: CheckedBitPattern + NoUninit + Send + Sync + 'static {
    /// The torch dtype whose elements this type holds.
    const DTYPE: DType;

    /// Whether a tensor of `dtype` can be read as this type. The dtype
    /// itself, and for `u8` also `bool`, whose bytes `u8` views in place.
    fn reads(dtype: DType) -> bool {
        dtype == Self::DTYPE
    }
}

macro_rules! elements {
    ($($ty:ty => $dtype:ident),* $(,)?) => {
        $(
            impl Element for $ty {
                const DTYPE: DType = DType::$dtype;
            }
        )*
    };
}

elements!(
    bool => Bool,
    i8 => Int8,
    i16 => Int16,
    i32 => Int32,
    i64 => Int64,
    u16 => UInt16,
    u32 => UInt32,
    u64 => UInt64,
    f32 => Float32,
    f64 => Float64,
    f16 => Float16,
    bf16 => BFloat16,
    Complex<f16> => Complex32,
    Complex<f32> => Complex64,
    Complex<f64> => Complex128,
);

/// `u8` is `torch.uint8`, and also reads a `torch.bool` tensor's bytes in
/// place: `bool` has invalid bit patterns, so it is never viewed in shared
/// memory, where another process may write any byte.
impl Element for u8 {
    const DTYPE: DType = DType::UInt8;

    fn reads(dtype: DType) -> bool {
        matches!(dtype, DType::UInt8 | DType::Bool)
    }
}

/// Why a tensor's elements cannot be read or written as a Rust type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElementError {
    /// The tensor's dtype is not the one the Rust type holds.
    #[error("the tensor holds {dtype} elements, not {requested} ({type_name})")]
    DTypeMismatch {
        /// The tensor's dtype.
        dtype: DType,
        /// The dtype of the type asked for.
        requested: DType,
        /// The type asked for.
        type_name: &'static str,
    },
    /// An [`Element`] implementation whose type is not the size of its
    /// dtype's elements.
    #[error("{type_name} is {size} bytes, but a {dtype} element is {element_size}")]
    SizeMismatch {
        /// The type.
        type_name: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The dtype it claims.
        dtype: DType,
        /// That dtype's element size.
        element_size: usize,
    },
    /// Viewing in place needs a contiguous (row-major) view.
    #[error(
        "the view is not contiguous (sizes {sizes:?}, strides {strides:?}): copy its elements with to_vec"
    )]
    NotContiguous {
        /// The view's sizes.
        sizes: Vec<usize>,
        /// The view's strides, in elements.
        strides: Vec<usize>,
    },
    /// The storage's bytes are not in this process (a handle that was not
    /// attached, or a CUDA storage).
    #[error("the tensor's {kind} storage is not in this process: its bytes cannot be read")]
    NotLocal {
        /// What kind of storage it is.
        kind: StorageKind,
    },
    /// The elements do not start at an address the Rust type can be read
    /// from in place.
    #[error(
        "{type_name} needs {align}-byte alignment, but the elements start at address {address:#x}: copy them with to_vec"
    )]
    Misaligned {
        /// The type.
        type_name: &'static str,
        /// Its alignment.
        align: usize,
        /// Where the elements start.
        address: usize,
    },
    /// A storage's bytes are not a whole number of elements.
    #[error("{nbytes} bytes are not a whole number of {element_size}-byte {type_name} elements")]
    PartialElement {
        /// The storage's size.
        nbytes: usize,
        /// The type.
        type_name: &'static str,
        /// Its size.
        element_size: usize,
    },
    /// The data given does not fill the shape asked for.
    #[error("shape {sizes:?} holds {expected} elements, but {found} were given")]
    ShapeMismatch {
        /// The shape.
        sizes: Vec<usize>,
        /// How many elements it holds.
        expected: usize,
        /// How many were given.
        found: usize,
    },
    /// The elements would not fit in memory: a shape whose byte size
    /// overflows, or a copy of an expanded view (stride 0) that stands for
    /// more elements than the address space holds.
    #[error("{numel} elements of {element_size} bytes (shape {sizes:?}) do not fit in memory")]
    TooLarge {
        /// The shape.
        sizes: Vec<usize>,
        /// Its number of elements, saturated.
        numel: usize,
        /// Bytes per element.
        element_size: usize,
    },
    /// An element's bytes are not a value of the type: a `bool` byte other
    /// than 0 or 1.
    #[error("element {index} is not a valid {type_name}")]
    InvalidValue {
        /// The element's index in logical (row-major) order.
        index: usize,
        /// The type.
        type_name: &'static str,
    },
    /// The view does not fit its storage.
    #[error(transparent)]
    View(ViewError),
    /// The storage could not be allocated.
    #[error("cannot allocate shared memory: {0}")]
    Allocate(AllocateError),
}

impl From<AllocateError> for ElementError {
    fn from(error: AllocateError) -> Self {
        ElementError::Allocate(error)
    }
}

/// Checks that `T` can read a tensor of `dtype`, and that it is the size
/// of the dtype's elements.
pub(crate) fn check_element<T: Element>(dtype: DType) -> Result<(), ElementError> {
    let type_name = std::any::type_name::<T>();
    if !T::reads(dtype) {
        return Err(ElementError::DTypeMismatch {
            dtype,
            requested: T::DTYPE,
            type_name,
        });
    }
    check_size::<T>()
}

/// Checks that `T` is the size of its dtype's elements (an implementation
/// outside this crate may not be).
pub(crate) fn check_size<T: Element>() -> Result<(), ElementError> {
    let size = std::mem::size_of::<T>();
    let element_size = T::DTYPE.element_size();
    if size == element_size {
        Ok(())
    } else {
        Err(ElementError::SizeMismatch {
            type_name: std::any::type_name::<T>(),
            size,
            dtype: T::DTYPE,
            element_size,
        })
    }
}

/// Views `bytes` as `T`s in place, or says why not. No bytes are no
/// elements, wherever they are (an empty slice's address may be anything).
pub(crate) fn cast_slice<T: bytemuck::Pod>(bytes: &[u8]) -> Result<&[T], ElementError> {
    if bytes.is_empty() {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(bytes).map_err(|error| cast_error::<T>(error, bytes))
}

/// Views `bytes` as `T`s in place, writable, or says why not; no bytes
/// are no elements, as in [`cast_slice`].
pub(crate) fn cast_slice_mut<T: bytemuck::Pod>(bytes: &mut [u8]) -> Result<&mut [T], ElementError> {
    if bytes.is_empty() {
        return Ok(&mut []);
    }
    let (address, nbytes) = (bytes.as_ptr() as usize, bytes.len());
    bytemuck::try_cast_slice_mut(bytes).map_err(|error| match error {
        bytemuck::PodCastError::TargetAlignmentGreaterAndInputNotAligned => {
            misaligned::<T>(address)
        }
        _ => partial::<T>(nbytes),
    })
}

fn cast_error<T>(error: bytemuck::PodCastError, bytes: &[u8]) -> ElementError {
    match error {
        bytemuck::PodCastError::TargetAlignmentGreaterAndInputNotAligned => {
            misaligned::<T>(bytes.as_ptr() as usize)
        }
        _ => partial::<T>(bytes.len()),
    }
}

fn misaligned<T>(address: usize) -> ElementError {
    ElementError::Misaligned {
        type_name: std::any::type_name::<T>(),
        align: std::mem::align_of::<T>(),
        address,
    }
}

fn partial<T>(nbytes: usize) -> ElementError {
    ElementError::PartialElement {
        nbytes,
        type_name: std::any::type_name::<T>(),
        element_size: std::mem::size_of::<T>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_is_the_size_of_its_dtype() {
        fn check<T: Element>() {
            assert_eq!(check_size::<T>(), Ok(()), "{}", std::any::type_name::<T>());
        }
        check::<bool>();
        check::<u8>();
        check::<i8>();
        check::<i16>();
        check::<i32>();
        check::<i64>();
        check::<u16>();
        check::<u32>();
        check::<u64>();
        check::<f32>();
        check::<f64>();
        check::<f16>();
        check::<bf16>();
        check::<Complex<f16>>();
        check::<Complex<f32>>();
        check::<Complex<f64>>();
    }

    #[test]
    fn u8_reads_bool_tensors_and_nothing_else_does() {
        assert!(u8::reads(DType::Bool) && u8::reads(DType::UInt8));
        assert!(!i8::reads(DType::Bool) && !bool::reads(DType::UInt8));
        assert!(matches!(
            check_element::<f32>(DType::Float64),
            Err(ElementError::DTypeMismatch {
                dtype: DType::Float64,
                requested: DType::Float32,
                type_name: "f32",
            })
        ));
    }

    #[test]
    fn casts_say_what_is_wrong() {
        let words = [0u64; 3];
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        assert_eq!(cast_slice::<u64>(bytes).map(<[u64]>::len), Ok(3));
        assert!(matches!(
            cast_slice::<u64>(&bytes[1..9]),
            Err(ElementError::Misaligned { align: 8, .. })
        ));
        assert!(matches!(
            cast_slice::<u64>(&bytes[..12]),
            Err(ElementError::PartialElement {
                nbytes: 12,
                element_size: 8,
                ..
            })
        ));
    }
}
