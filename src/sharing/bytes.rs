//! The `bytes` strategy: each storage travels inside the pickle, as torch's
//! plain `pickle.dumps(tensor)` writes it.
//!
//! A tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size,
//! stride, requires_grad, OrderedDict())` (`_rebuild_tensor_v3` with the
//! dtype for dtypes without a legacy storage class), a Parameter wraps it in
//! `_rebuild_parameter`, and each storage is
//! `torch.storage._load_from_bytes(b)` with `b` a legacy `torch.save` stream
//! of that storage alone. A storage viewed by several tensors is written
//! once and memoized, so the receiver rebuilds one storage. The receiver
//! gets copies: nothing is shared after the message.
//!
//! No byte is copied to be sent: the payload is a chunk list whose storage
//! chunk is the storage's own memory, written to the socket with vectored
//! writes. The receiver reads the message into a buffer it keeps from
//! message to message, decodes the payload as a slice of it, and copies
//! each storage once, from the message into its own memory.

use tensorshare_compat::pickle::Pickle;

use crate::model::Value;
use crate::reduce::{PickleBuilder, ReduceError, reduce_with};
use crate::save::{SaveLeaves, StorageForm};

/// Writes `value` with every storage's bytes inline.
///
/// # Errors
///
/// [`ReduceError::BytesElsewhere`] for a storage whose bytes are not in
/// this process, another [`ReduceError`] for values with no pickled form.
pub(crate) fn reduce_inline(value: &Value) -> Result<Pickle, ReduceError> {
    let mut leaves = SaveLeaves::new(StorageForm::LoadFromBytes);
    let mut out = PickleBuilder::default();
    let root = reduce_with(value, &mut leaves, &mut out)?;
    Ok(out.finish(root))
}
