//! Checks that more than one fuzz target makes of what the readers hand
//! out.

use tensorshare::Tensor;
use tensorshare_compat::pickle::SharedBytes;
use tensorshare_compat::torch_save::{self, ReadOptions, TorchSaveError};

/// Tensors' contents are copied out only up to this many bytes: an
/// expanded view of a few bytes may stand for gigabytes, legitimately, and
/// libFuzzer would call copying it running out of memory.
pub const MAX_COPIED_BYTES: usize = 1 << 16;

/// `tensor`'s contents, copied out as a consumer would when they take at
/// most [`MAX_COPIED_BYTES`]; larger copies are left alone, and one past
/// the address space must be refused.
pub fn copy_small(tensor: &Tensor) -> Option<Vec<u8>> {
    match tensor.numel().checked_mul(tensor.dtype().element_size()) {
        Some(len) if len <= MAX_COPIED_BYTES => tensor.to_contiguous_bytes(),
        None => {
            assert!(tensor.to_contiguous_bytes().is_none());
            None
        }
        Some(_) => None,
    }
}

/// Reads `bytes` as a torch.save file (zip or legacy), every global
/// allowed, from a copy and from a shared buffer (records as slices of
/// it): the two must give the same archive, or the same error, but for
/// CRCs: the shared reader leaves stored records in place unchecked, as
/// `torch.load(mmap=True)` does, so where the copying reader refuses a
/// record's checksum the shared one may read on.
pub fn check_torch_save_readers_agree(bytes: &[u8]) {
    let allow_all = |_: &str, _: &str| true;
    let copied = torch_save::read(bytes, &allow_all, &ReadOptions::default());
    let shared = torch_save::read_shared(
        &SharedBytes::from(bytes),
        &allow_all,
        &ReadOptions::default(),
    );
    if let Err(TorchSaveError::ZipRecord { detail, .. }) = &copied
        && detail.contains("checksum")
    {
        return;
    }
    match (copied, shared) {
        (Ok(copied), Ok(shared)) => assert_eq!(copied, shared),
        (Err(copied), Err(shared)) => assert_eq!(copied.to_string(), shared.to_string()),
        (copied, shared) => panic!("read gave {copied:?}, read_shared gave {shared:?}"),
    }
}
