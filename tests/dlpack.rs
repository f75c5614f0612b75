//! Tensors through the DLPack 1.x ABI (`tensorshare::dlpack`): lent with a
//! deleter that keeps their storage alive, taken back without a copy, and
//! a foreign producer's tensors copied in, every dtype DLPack has a code
//! for, strides and offsets included.

mod support;

use std::any::Any;
use std::ffi::c_void;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorshare::connection::{self, ConnectionOptions};
use tensorshare::dlpack::{
    DEVICE_CPU, DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    ExportedBytes, ExportedTensor, FLAG_READ_ONLY, ImportedTensor,
};
use tensorshare::model::{Segment, Storage, TensorView};
use tensorshare::{Authkey, Connection, DType, SharingContext, StrategyKind, Tensor};

/// Takes over an export (or a foreign tensor) as a consumer does.
fn import(raw: *mut DLManagedTensorVersioned) -> ImportedTensor {
    // SAFETY: `raw` is a live DLPack tensor handed to this consumer once.
    unsafe { ImportedTensor::from_raw(raw) }.expect("a DLPack 1.x tensor")
}

#[test]
fn a_tensor_goes_out_and_comes_back_as_the_same_storage() {
    let sharing = SharingContext::new(Authkey::random().expect("a key"));
    let tensor = Tensor::from_slice(&sharing, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])
        .expect("a tensor");
    let exported = tensor.to_dlpack().expect("exported");
    let managed = exported.get();
    assert_eq!(managed.version, DLPackVersion { major: 1, minor: 1 });
    assert_eq!(
        managed.flags & FLAG_READ_ONLY,
        FLAG_READ_ONLY,
        "every export is read-only"
    );
    assert_eq!(managed.dl_tensor.device.device_type, DEVICE_CPU);
    let imported = import(exported.into_raw());
    assert_eq!(imported.shape(), [2, 3]);
    assert_eq!(imported.strides(), Some(&[3, 1][..]));
    let back = Tensor::from_dlpack(imported, &sharing).expect("taken back");
    assert!(back.storage().same_as(tensor.storage()), "no copy");
    assert_eq!(back, tensor);
}

#[test]
fn every_dtype_with_a_dlpack_code_round_trips_with_its_code() {
    let cases: [(DType, u8, u8); 21] = [
        (DType::Bool, 6, 8),
        (DType::UInt8, 1, 8),
        (DType::UInt16, 1, 16),
        (DType::UInt32, 1, 32),
        (DType::UInt64, 1, 64),
        (DType::Int8, 0, 8),
        (DType::Int16, 0, 16),
        (DType::Int32, 0, 32),
        (DType::Int64, 0, 64),
        (DType::Float16, 2, 16),
        (DType::Float32, 2, 32),
        (DType::Float64, 2, 64),
        (DType::BFloat16, 4, 16),
        (DType::Complex32, 5, 32),
        (DType::Complex64, 5, 64),
        (DType::Complex128, 5, 128),
        (DType::Float8E4M3Fn, 10, 8),
        (DType::Float8E4M3FnUz, 11, 8),
        (DType::Float8E5M2, 12, 8),
        (DType::Float8E5M2FnUz, 13, 8),
        (DType::Float8E8M0Fnu, 14, 8),
    ];
    for (dtype, code, bits) in cases {
        let nbytes = 6 * dtype.element_size();
        let bytes: Vec<u8> = (0..nbytes).map(|i| (i * 7 % 2) as u8).collect();
        let tensor = Tensor::new(
            Storage::from_vec(bytes.clone()),
            TensorView::contiguous(dtype, &[2, 3]),
        )
        .expect("a tensor");
        let exported = tensor.to_dlpack().expect("exported");
        let expected = DLDataType {
            code,
            bits,
            lanes: 1,
        };
        assert_eq!(exported.get().dl_tensor.dtype, expected, "{dtype:?}");
        // As a foreign producer lends the same bytes: copied in.
        let foreign = Foreign::lend(bytes, expected, vec![2, 3], None, 0);
        let copied = Tensor::from_dlpack(import(foreign), &StrategyKind::Bytes).expect("copied in");
        assert_eq!(copied, tensor, "{dtype:?}");
    }
    let bits = Tensor::new(
        Storage::from_vec(vec![0; 4]),
        TensorView::contiguous(DType::Bits8, &[4]),
    )
    .expect("a tensor");
    let error = bits.to_dlpack().expect_err("bits8 has no DLPack code");
    assert!(error.to_string().contains("no DLPack type"), "{error}");
}

#[test]
fn strides_and_offsets_go_out_as_they_are_and_come_in_row_major() {
    let sharing = SharingContext::new(Authkey::random().expect("a key"));
    let base =
        Tensor::from_slice(&sharing, &(0..12).collect::<Vec<i32>>(), &[12]).expect("a tensor");
    // Rows 1 and 2 of a 4 x 3 matrix, transposed: sizes [3, 2], strides [1, 3], offset 3.
    let view = TensorView {
        storage_offset: 3,
        sizes: vec![3, 2],
        strides: vec![1, 3],
        ..TensorView::contiguous(DType::Int32, &[3, 2])
    };
    let transposed = Tensor::new(base.storage().clone(), view).expect("a view");
    let exported = transposed.to_dlpack().expect("exported");
    let dl = &exported.get().dl_tensor;
    assert_eq!(dl.byte_offset, 12);
    let imported = import(exported.into_raw());
    assert_eq!(
        (imported.shape(), imported.strides()),
        (&[3, 2][..], Some(&[1, 3][..]))
    );
    let back = Tensor::from_dlpack(imported, &sharing).expect("back");
    assert_eq!(back.to_vec::<i32>().expect("elements"), [3, 6, 4, 7, 5, 8]);

    // A foreign transposed tensor with an offset, copied in row-major.
    let bytes: Vec<u8> = (0..12i32).flat_map(i32::to_ne_bytes).collect();
    let int32 = DLDataType {
        code: 0,
        bits: 32,
        lanes: 1,
    };
    let foreign = Foreign::lend(bytes, int32, vec![3, 2], Some(vec![1, 3]), 12);
    let copied = Tensor::from_dlpack(import(foreign), &sharing).expect("copied in");
    assert!(copied.is_contiguous());
    assert_eq!(
        copied.to_vec::<i32>().expect("elements"),
        [3, 6, 4, 7, 5, 8]
    );

    // Negative strides (a flipped view) are refused, and the tensor released.
    let released = Foreign::released();
    let foreign = Foreign::lend(vec![0; 16], int32, vec![2, 2], Some(vec![-2, 1]), 8);
    let error = Tensor::from_dlpack(import(foreign), &sharing).expect_err("a negative stride");
    assert!(error.to_string().contains("negative stride"), "{error}");
    assert_eq!(Foreign::released(), released + 1);
}

/// A segment that counts its drops: when the last holder lets go.
#[derive(Debug)]
struct Counted(Vec<u8>, Arc<AtomicUsize>);

impl Segment for Counted {
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    fn kind(&self) -> StrategyKind {
        StrategyKind::Bytes
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn the_deleter_keeps_the_storage_until_it_runs_once() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let storage = Storage::from_segment(Arc::new(Counted(vec![9; 16], Arc::clone(&dropped))));
    let tensor =
        Tensor::new(storage, TensorView::contiguous(DType::UInt8, &[16])).expect("a tensor");
    let raw = tensor.to_dlpack().expect("exported").into_raw();
    drop(tensor);
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "lent out: still alive");
    let imported = import(raw);
    assert_eq!(imported.bytes().expect("its bytes"), [9; 16]);
    drop(imported);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "released once, by the deleter"
    );

    // An export never handed out is released when it is dropped.
    let storage = Storage::from_segment(Arc::new(Counted(vec![1; 4], Arc::clone(&dropped))));
    let tensor =
        Tensor::new(storage, TensorView::contiguous(DType::UInt8, &[4])).expect("a tensor");
    let exported = tensor.to_dlpack().expect("exported");
    drop(tensor);
    drop(exported);
    assert_eq!(dropped.load(Ordering::SeqCst), 2);
}

/// Memory of a program's own, lent through DLPack from outside the crate.
struct OwnBytes(Vec<u8>, Arc<AtomicUsize>);

impl ExportedBytes for OwnBytes {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for OwnBytes {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}

/// `ExportedTensor::new` is usable from another crate, and its deleter may
/// run on another thread, as DLPack consumers (dlpark, torch) call it.
#[test]
fn own_memory_goes_out_and_its_deleter_runs_on_another_thread() {
    let released = Arc::new(AtomicUsize::new(0));
    let owner = OwnBytes(
        [1.5f32, -2.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect(),
        Arc::clone(&released),
    );
    let float32 = DLDataType {
        code: 2,
        bits: 32,
        lanes: 1,
    };
    let exported = ExportedTensor::new(Box::new(owner), float32, &[2], &[1], 0, FLAG_READ_ONLY)
        .expect("a layout inside the bytes");
    let raw = exported.into_raw() as usize;
    std::thread::spawn(move || {
        let imported = import(raw as *mut DLManagedTensorVersioned);
        let floats: Vec<f32> = imported
            .bytes()
            .expect("its bytes")
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        assert_eq!(floats, [1.5, -2.0]);
    })
    .join()
    .expect("the consumer thread");
    assert_eq!(
        released.load(Ordering::SeqCst),
        1,
        "released once, on that thread"
    );
}

#[test]
fn a_received_storage_outlives_the_connection_it_arrived_on() {
    let sharing = SharingContext::new(Authkey::random().expect("a key"))
        .with_strategy(StrategyKind::FileDescriptor);
    let receiver_side = SharingContext::new(sharing.authkey().clone());
    let (ours, theirs) = UnixStream::pair().expect("a socket pair");
    let options = ConnectionOptions::default();
    let mut sender = Connection::new(connection::Connection::from_stream(ours, options), &sharing)
        .expect("bound");
    let mut receiver = Connection::new(
        connection::Connection::from_stream(theirs, options),
        &receiver_side,
    )
    .expect("bound");
    let sent = Tensor::from_slice(&sharing, &[0.5f64; 1024], &[32, 32]).expect("a tensor");
    sender.send(&sent.clone().into()).expect("sent");
    let received = receiver.recv().expect("received");
    let lent = received
        .as_tensor()
        .expect("a tensor")
        .to_dlpack()
        .expect("exported");
    sharing
        .wait_until_fetched(std::time::Duration::from_secs(10))
        .expect("fetched");
    drop((sender, receiver, received, receiver_side, sent, sharing));

    let imported = import(lent.into_raw());
    let bytes = imported.bytes().expect("still mapped");
    assert_eq!(bytes.len(), 1024 * 8);
    assert!(
        bytes
            .chunks(8)
            .all(|element| element == 0.5f64.to_ne_bytes())
    );
}

/// `dlpark`, a DLPack library of its own, views an export as an ndarray in
/// place: the same first element, the tensor's strides, the read-only flag;
/// and its drop runs the deleter, which releases the storage.
#[test]
fn dlpark_views_an_export_in_place_and_releases_it() {
    use dlpark::{DlpackFlags, versioned};
    use ndarray::ArrayViewD;

    let dropped = Arc::new(AtomicUsize::new(0));
    let elements: Vec<u8> = (0..12).flat_map(|i| (i as f32).to_ne_bytes()).collect();
    let segment = Arc::new(Counted(elements, Arc::clone(&dropped)));
    let first = segment.0[3 * 4..].as_ptr();
    // Rows 1 to 3 of a 4 x 3 matrix, transposed: sizes [3, 3], strides
    // [1, 3], offset 3.
    let view = TensorView {
        storage_offset: 3,
        sizes: vec![3, 3],
        strides: vec![1, 3],
        ..TensorView::contiguous(DType::Float32, &[3, 3])
    };
    let transposed = Tensor::new(Storage::from_segment(segment), view).expect("a view");

    let lent = transposed.to_dlpack().expect("exported").into_raw();
    drop(transposed);
    // SAFETY: a live export, handed over once; the two crates'
    // DLManagedTensorVersioned are the same C struct.
    let managed = unsafe { versioned::Dlpack::new(lent.cast()) }.expect("not null");
    assert!(managed.flags().contains(DlpackFlags::READ_ONLY));
    let array = ArrayViewD::<f32>::try_from(&managed).expect("an ndarray view");
    assert_eq!(array.as_ptr().cast::<u8>(), first, "viewed in place");
    assert_eq!((array.shape(), array.strides()), (&[3, 3][..], &[1, 3][..]));
    assert_eq!(
        array.iter().copied().collect::<Vec<_>>(),
        [3.0, 6.0, 9.0, 4.0, 7.0, 10.0, 5.0, 8.0, 11.0]
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "lent out: still alive");
    drop(managed);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "released by dlpark's drop"
    );
}

/// A producer that is not tensorshare: its own context and deleter, which
/// counts the releases.
struct Foreign {
    bytes: Vec<u8>,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
}

static FOREIGN_RELEASED: AtomicUsize = AtomicUsize::new(0);

impl Foreign {
    fn lend(
        bytes: Vec<u8>,
        dtype: DLDataType,
        shape: Vec<i64>,
        strides: Option<Vec<i64>>,
        byte_offset: u64,
    ) -> *mut DLManagedTensorVersioned {
        let mut context = Box::new(Foreign {
            bytes,
            shape,
            strides,
        });
        let dl_tensor = DLTensor {
            data: context.bytes.as_mut_ptr().cast::<c_void>(),
            device: DLDevice {
                device_type: DEVICE_CPU,
                device_id: 0,
            },
            ndim: context.shape.len() as i32,
            dtype,
            shape: context.shape.as_mut_ptr(),
            strides: context
                .strides
                .as_mut()
                .map_or(std::ptr::null_mut(), |strides| strides.as_mut_ptr()),
            byte_offset,
        };
        Box::into_raw(Box::new(DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: Box::into_raw(context).cast::<c_void>(),
            deleter: Some(release_foreign),
            flags: 0,
            dl_tensor,
        }))
    }

    fn released() -> usize {
        FOREIGN_RELEASED.load(Ordering::SeqCst)
    }
}

/// The foreign producer's deleter.
///
/// # Safety
///
/// `managed` is one `Foreign::lend` made, released once.
unsafe extern "C" fn release_foreign(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: boxed by `Foreign::lend`, and this is their one release.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx.cast::<Foreign>()));
    }
    FOREIGN_RELEASED.fetch_add(1, Ordering::SeqCst);
}
