//! DLPack 1.x (`DLManagedTensorVersioned`), the C ABI through which tensor
//! libraries lend each other memory: a producer hands over a struct that
//! describes a tensor and a deleter; the consumer calls the deleter once
//! it no longer needs the memory.
//!
//! [`ExportedTensor`] is one this process produces over bytes an owner
//! keeps alive ([`ExportedBytes`]): the owner is released by the deleter,
//! exactly once, whenever the consumer calls it. [`ImportedTensor`] is one
//! another library produced: it calls the deleter when dropped.
//!
//! The ABI's structs are written out here from `dlpack.h` (v1.1) rather
//! than taken from a binding crate: they are five `repr(C)` structs that the
//! DLPack version fixes, and the binding crates' ownership layers (dlpark's
//! changed shape in each of its last three releases) are what this module
//! is instead.
//!
//! # Safety
//!
//! - The deleter of an [`ExportedTensor`] is an `extern "C"` function that
//!   frees what [`ExportedTensor::new`] boxed: the managed struct and its
//!   context, whose owner keeps the bytes `data` points into. The struct is
//!   freed only by the deleter (or by dropping an unexported
//!   [`ExportedTensor`], which calls it), so it runs once.
//! - The bounds of an export are checked when it is made: every element
//!   its shape, strides and offset reach lies inside the owner's bytes.
//! - [`ImportedTensor::from_raw`] is `unsafe`: its caller vouches that the
//!   pointer is a live `DLManagedTensorVersioned` handed over to it. From
//!   then on the struct is read only through shared references while the
//!   import lives, its element span is checked against `isize::MAX` and
//!   overflow before a slice is made, and its deleter is called once, on
//!   drop.
#![allow(unsafe_code)]

use std::any::Any;
use std::collections::BTreeSet;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Mutex, PoisonError};

/// The addresses of the exports made here and not yet released: how an
/// import tells one of ours, whose context it may then read, from a
/// foreign one. A global because an export may come back through any
/// library, on any thread; an address is unique while its export lives.
static LIVE_EXPORTS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn live_exports<T>(f: impl FnOnce(&mut BTreeSet<usize>) -> T) -> T {
    f(&mut LIVE_EXPORTS.lock().unwrap_or_else(PoisonError::into_inner))
}

/// `DLPACK_MAJOR_VERSION`: what this module produces and accepts.
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// `DLPACK_MINOR_VERSION` of the `dlpack.h` these structs are from.
pub const DLPACK_MINOR_VERSION: u32 = 1;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write.
pub const FLAG_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the producer copied the data for this
/// export.
pub const FLAG_IS_COPIED: u64 = 1 << 1;
/// `kDLCPU`: memory the CPU reads.
pub const DEVICE_CPU: i32 = 1;

/// `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version; a consumer refuses another than its own.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    /// `DLDeviceType`: [`DEVICE_CPU`] for the CPU.
    pub device_type: i32,
    /// The device's index.
    pub device_id: i32,
}

/// `DLDataType`: a type code, its bits and its lanes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// `DLDataTypeCode`: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex,
    /// 6 bool, 7 to 17 the float8, float6 and float4 kinds.
    pub code: u8,
    /// Bits of one lane.
    pub bits: u8,
    /// Lanes (1 for a scalar element).
    pub lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    /// The allocation's start (aligned as the producer chose).
    pub data: *mut c_void,
    /// Where the memory is.
    pub device: DLDevice,
    /// Dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` sizes.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or null for a compact row-major tensor.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// The deleter's signature.
pub type Deleter = unsafe extern "C" fn(*mut DLManagedTensorVersioned);

/// `DLManagedTensorVersioned`.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The producer's DLPack version.
    pub version: DLPackVersion,
    /// The producer's context, for its deleter.
    pub manager_ctx: *mut c_void,
    /// Frees what the producer keeps for this tensor; called once by the
    /// consumer.
    pub deleter: Option<Deleter>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// Bytes an export lends out, kept alive by their owner until the
/// consumer releases them.
pub trait ExportedBytes: Send + Sync + 'static {
    /// The bytes; the same slice every time.
    fn bytes(&self) -> &[u8];

    /// The owner, for [`ImportedTensor::exported_here`] to give back.
    fn as_any(&self) -> &dyn Any;
}

/// Why a tensor cannot go out or come in through DLPack.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DlpackError {
    /// The shape, strides and offset reach past the bytes, or overflow.
    #[error("the tensor's shape, strides and offset reach past its {len} bytes of memory")]
    OutOfBounds {
        /// The bytes the tensor lies in.
        len: usize,
    },
    /// A negative size or stride, or more dimensions than the ABI holds.
    #[error("invalid DLPack layout: {0}")]
    Layout(&'static str),
    /// A null pointer where a tensor was expected.
    #[error("a null DLManagedTensorVersioned pointer")]
    Null,
    /// Another major version than this module's.
    #[error("DLPack {major}.{minor} tensor; this build reads DLPack 1.x")]
    Version {
        /// The producer's major version.
        major: u32,
        /// The producer's minor version.
        minor: u32,
    },
    /// A type or dtype the other side has no counterpart for.
    #[error("{0}")]
    Unsupported(String),
    /// Memory that is not the CPU's.
    #[error("DLPack device type {0} is not the CPU (kDLCPU = 1): copy the tensor to the CPU first")]
    NotCpu(i32),
}

/// What an export's deleter frees.
struct Context {
    owner: Box<dyn ExportedBytes>,
    shape: Box<[i64]>,
    strides: Box<[i64]>,
}

/// A DLPack tensor made here, not yet handed to a consumer.
#[derive(Debug)]
pub struct ExportedTensor(NonNull<DLManagedTensorVersioned>);

// SAFETY: the managed struct and its context are owned by this value alone
// until `into_raw`; the owner they keep is `Send + Sync`.
unsafe impl Send for ExportedTensor {}

impl ExportedTensor {
    /// The tensor of `dtype` with `shape` and `strides` (in elements) whose
    /// first element lies `byte_offset` bytes into `owner`'s bytes; `flags`
    /// are `FLAG_*` bits.
    ///
    /// # Errors
    ///
    /// [`DlpackError::Layout`] for negative sizes or strides, a lanes count
    /// of 0 or more dimensions than an `i32` counts, and
    /// [`DlpackError::OutOfBounds`] when an element lies past the bytes.
    pub fn new(
        owner: Box<dyn ExportedBytes>,
        dtype: DLDataType,
        shape: &[i64],
        strides: &[i64],
        byte_offset: usize,
        flags: u64,
    ) -> Result<Self, DlpackError> {
        let bytes = owner.bytes();
        span_of(dtype, shape, Some(strides), byte_offset as u64, bytes.len())?;
        let data = bytes.as_ptr().cast_mut().cast::<c_void>();
        let mut context = Box::new(Context {
            owner,
            shape: shape.into(),
            strides: strides.into(),
        });
        let dl_tensor = DLTensor {
            data,
            device: DLDevice {
                device_type: DEVICE_CPU,
                device_id: 0,
            },
            ndim: i32::try_from(shape.len())
                .map_err(|_| DlpackError::Layout("too many dimensions"))?,
            dtype,
            shape: context.shape.as_mut_ptr(),
            strides: context.strides.as_mut_ptr(),
            byte_offset: byte_offset as u64,
        };
        let managed = Box::new(DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPACK_MAJOR_VERSION,
                minor: DLPACK_MINOR_VERSION,
            },
            manager_ctx: Box::into_raw(context).cast::<c_void>(),
            deleter: Some(delete_exported),
            flags,
            dl_tensor,
        });
        let managed = NonNull::from(Box::leak(managed));
        live_exports(|live| live.insert(managed.as_ptr() as usize));
        Ok(Self(managed))
    }

    /// The struct to hand to a consumer, which calls its deleter once done.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let raw = self.0.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// The struct, to read.
    pub fn get(&self) -> &DLManagedTensorVersioned {
        // SAFETY: boxed in `new` and freed only by the deleter, which runs
        // on drop or after `into_raw` gave the pointer away.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for ExportedTensor {
    fn drop(&mut self) {
        // SAFETY: the pointer is the one `new` boxed, not handed out; the
        // deleter frees it once, here.
        unsafe { delete_exported(self.0.as_ptr()) }
    }
}

/// The deleter of every export made here.
///
/// # Safety
///
/// `managed` is a pointer [`ExportedTensor::new`] made, not freed before.
unsafe extern "C" fn delete_exported(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    live_exports(|live| live.remove(&(managed as usize)));
    // SAFETY: `managed` and its context were boxed by `ExportedTensor::new`
    // and this is their one release.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx.cast::<Context>()));
    }
}

/// A DLPack tensor another library produced, owned here: its deleter is
/// called when this is dropped.
#[derive(Debug)]
pub struct ImportedTensor(NonNull<DLManagedTensorVersioned>);

// SAFETY: the DLPack protocol hands the tensor to one consumer, which may
// release it from any thread.
unsafe impl Send for ImportedTensor {}

impl ImportedTensor {
    /// Takes over `managed`, as a DLPack consumer does (the producer's
    /// `__dlpack__` result, or another Rust library's export).
    ///
    /// # Safety
    ///
    /// `managed` is null, or points to a live `DLManagedTensorVersioned`
    /// whose memory and deleter stay valid until this calls the deleter,
    /// and nothing else calls it or writes the tensor meanwhile; its
    /// shape, strides and offset reach only memory it lends (DLPack
    /// carries no length to check them against).
    ///
    /// # Errors
    ///
    /// [`DlpackError::Null`] for a null pointer; [`DlpackError::Version`]
    /// for another major version (its deleter is called at once).
    pub unsafe fn from_raw(managed: *mut DLManagedTensorVersioned) -> Result<Self, DlpackError> {
        let imported = Self(NonNull::new(managed).ok_or(DlpackError::Null)?);
        let version = imported.get().version;
        if version.major != DLPACK_MAJOR_VERSION {
            return Err(DlpackError::Version {
                major: version.major,
                minor: version.minor,
            });
        }
        Ok(imported)
    }

    /// The struct, to read.
    pub fn get(&self) -> &DLManagedTensorVersioned {
        // SAFETY: live until the deleter runs on drop (`from_raw`'s contract).
        unsafe { self.0.as_ref() }
    }

    /// The sizes.
    pub fn shape(&self) -> &[i64] {
        let tensor = &self.get().dl_tensor;
        // SAFETY: `shape` holds `ndim` sizes while the tensor lives.
        unsafe { raw_slice(tensor.shape, tensor.ndim) }
    }

    /// The strides in elements, `None` for a compact row-major tensor.
    pub fn strides(&self) -> Option<&[i64]> {
        let tensor = &self.get().dl_tensor;
        // SAFETY: `strides` is null or holds `ndim` strides while the
        // tensor lives.
        (!tensor.strides.is_null()).then(|| unsafe { raw_slice(tensor.strides, tensor.ndim) })
    }

    /// The bytes from the first element to the end of the last: every
    /// element lies at its strides' offset from the start (strides are
    /// never negative here).
    ///
    /// # Errors
    ///
    /// [`DlpackError::NotCpu`] for memory on another device;
    /// [`DlpackError::Layout`] for negative sizes or strides or an element
    /// type of no whole bytes; [`DlpackError::OutOfBounds`] when the span
    /// overflows.
    pub fn bytes(&self) -> Result<&[u8], DlpackError> {
        let tensor = &self.get().dl_tensor;
        if tensor.device.device_type != DEVICE_CPU {
            return Err(DlpackError::NotCpu(tensor.device.device_type));
        }
        let end = span_of(
            tensor.dtype,
            self.shape(),
            self.strides(),
            tensor.byte_offset,
            usize::MAX,
        )?;
        let offset = usize::try_from(tensor.byte_offset)
            .map_err(|_| DlpackError::OutOfBounds { len: end })?;
        if end <= offset || tensor.data.is_null() {
            return Ok(&[]);
        }
        if end > isize::MAX as usize {
            return Err(DlpackError::OutOfBounds { len: end });
        }
        // SAFETY: the producer lends `end` bytes from `data` (its shape,
        // strides and offset reach no further), readable while this lives;
        // the span fits in `isize`.
        let bytes = unsafe { std::slice::from_raw_parts(tensor.data.cast::<u8>(), end) };
        Ok(&bytes[offset..])
    }

    /// The owner of an export this process made, when this tensor is one:
    /// its bytes can be used as they are.
    pub fn exported_here(&self) -> Option<&dyn Any> {
        let managed = self.get();
        if !live_exports(|live| live.contains(&(self.0.as_ptr() as usize))) {
            return None;
        }
        // SAFETY: a live export of ours: `ExportedTensor::new` made it, with
        // a `Context` as its manager context, not released (this import
        // holds it).
        let context = unsafe { &*managed.manager_ctx.cast::<Context>() };
        Some(context.owner.as_any())
    }
}

impl Drop for ImportedTensor {
    fn drop(&mut self) {
        if let Some(deleter) = self.get().deleter {
            // SAFETY: the producer's deleter, called once, as the protocol
            // asks of the consumer.
            unsafe { deleter(self.0.as_ptr()) }
        }
    }
}

/// `ndim` values from `values`.
///
/// # Safety
///
/// `values` holds `ndim` values, live for the returned lifetime.
unsafe fn raw_slice<'a>(values: *const i64, ndim: i32) -> &'a [i64] {
    let len = usize::try_from(ndim).unwrap_or(0);
    if values.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(values, len) }
}

/// The end (in bytes from the start of the memory) of the last byte a
/// tensor reaches, checked against `len`; `byte_offset` for one of no
/// elements.
fn span_of(
    dtype: DLDataType,
    shape: &[i64],
    strides: Option<&[i64]>,
    byte_offset: u64,
    len: usize,
) -> Result<usize, DlpackError> {
    let out_of_bounds = DlpackError::OutOfBounds { len };
    if dtype.lanes == 0 || dtype.bits == 0 || !dtype.bits.is_multiple_of(8) {
        return Err(DlpackError::Layout("an element type of no whole bytes"));
    }
    let itemsize = u64::from(dtype.bits / 8) * u64::from(dtype.lanes);
    if strides.is_some_and(|strides| strides.len() != shape.len()) {
        return Err(DlpackError::Layout("as many strides as sizes"));
    }
    let mut last = 0u64;
    let mut row_major = 1u64;
    for (dim, &size) in shape.iter().enumerate().rev() {
        let size = u64::try_from(size).map_err(|_| DlpackError::Layout("a negative size"))?;
        if size == 0 {
            return usize::try_from(byte_offset).map_err(|_| out_of_bounds);
        }
        let stride = match strides {
            Some(strides) => {
                u64::try_from(strides[dim]).map_err(|_| DlpackError::Layout("a negative stride"))?
            }
            None => row_major,
        };
        last = (size - 1)
            .checked_mul(stride)
            .and_then(|reach| last.checked_add(reach))
            .ok_or(DlpackError::OutOfBounds { len })?;
        row_major = row_major
            .checked_mul(size)
            .ok_or(DlpackError::OutOfBounds { len })?;
    }
    let end = last
        .checked_add(1)
        .and_then(|n| n.checked_mul(itemsize))
        .and_then(|n| n.checked_add(byte_offset))
        .ok_or(DlpackError::OutOfBounds { len })?;
    match usize::try_from(end) {
        Ok(end) if end <= len => Ok(end),
        _ => Err(out_of_bounds),
    }
}
