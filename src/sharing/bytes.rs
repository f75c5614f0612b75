//! The `bytes` strategy: each storage travels inside the pickle, as torch's
//! plain `pickle.dumps(tensor)` writes it.
//!
//! A tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size,
//! stride, requires_grad, OrderedDict())` (`_rebuild_tensor_v3` with the
//! dtype for dtypes without a legacy storage class), a Parameter wraps it in
//! `_rebuild_parameter`, and each storage is
//! `torch.storage._load_from_bytes(b)` with `b` a legacy `torch.save` stream
//! of that storage alone. A storage viewed by several tensors is written
//! once and memoized, so the receiver rebuilds one storage; the views of a
//! dtype other than the one it is written as name theirs through
//! `_rebuild_tensor_v3` (a batch in one storage, `SharingContext::batch`).
//! The receiver gets copies: nothing is shared after the message.
//!
//! No byte is copied to be sent: the payload is a chunk list whose storage
//! chunk is the storage's own memory, written to the socket with vectored
//! writes. The receiver reads the message into a buffer it keeps from
//! message to message, decodes the payload as a slice of it, and copies
//! each storage once, from the message into its own memory.

use tensorshare_strategies::bytes::BytesStrategy;

use super::form::{Reduced, TorchForm};
use super::shares::Shares;
use super::{SharingContext, SharingError};
use crate::model::Value;
use crate::reduce::{PickleBuilder, reduce_with};
use crate::save::{SaveLeaves, StorageForm};

impl TorchForm for BytesStrategy {
    fn shares(context: &SharingContext) -> &Shares<Self> {
        &context.bytes
    }

    /// Writes `value` with every storage's bytes inline; a storage whose
    /// bytes are not in this process is
    /// [`ReduceError::BytesElsewhere`](crate::reduce::ReduceError::BytesElsewhere).
    fn reduce(context: &SharingContext, value: &Value) -> Result<Reduced, SharingError> {
        let mut leaves = SaveLeaves::new(StorageForm::LoadFromBytes);
        let mut out = PickleBuilder::default();
        let types = context.registry().reducers();
        let root = reduce_with(value, &mut leaves, types, &mut out)?;
        Ok(Reduced {
            pickle: out.finish(root),
            attachable: Vec::new(),
        })
    }
}
