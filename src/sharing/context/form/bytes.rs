//! The `bytes` strategy: each storage travels inside the pickle, in a form
//! stock torch rebuilds with one copy of its bytes.
//!
//! A tensor is written as torch's `ForkingPickler` writes one,
//! `rebuild_tensor(cls, rebuild_typed_storage(storage, dtype), (offset,
//! torch.Size(size), stride, requires_grad))`, and each storage, in a
//! protocol 5 pickle, as
//!
//! ```text
//! torch.Tensor.untyped_storage(
//!     functools.partial(torch.frombuffer, dtype=torch.uint8)(bytearray(payload)))
//! ```
//!
//! `pickle.loads` copies the `BYTEARRAY8` payload once, into a `bytearray`;
//! `torch.frombuffer` wraps that `bytearray` in a tensor without a copy,
//! and its untyped storage, writable, is the storage the views are rebuilt
//! on. A storage viewed by several tensors is written once and memoized,
//! so the receiver rebuilds one storage; any dtype torch knows goes, since
//! the dtype travels beside the storage and not in a legacy storage class.
//! An empty storage is `rebuild_storage_empty(UntypedStorage)`
//! (`torch.frombuffer` refuses an empty buffer). The receiver gets copies:
//! nothing is shared after the message.
//!
//! torch's own plain `pickle.dumps(tensor)` writes
//! `torch.storage._load_from_bytes(b)` with `b` a legacy `torch.save`
//! stream instead, which its `pickle.loads` rebuilds through the legacy
//! `torch.load` reader, copying the bytes twice; tensorshare still reads
//! that form (torch sends it), and writes it only into files.
//!
//! What it needs of the receiver: torch 2.0 or later (`untyped_storage`
//! came with 2.0; torch 1.13 fails on the message with an
//! `AttributeError` naming it) and so CPython 3.8 or later (protocol 5).
//!
//! No byte is copied to be sent: a storage's chunk of the payload is the
//! storage's own memory, written to the socket with vectored writes. The
//! receiver reads the message into a buffer it keeps from message to
//! message, decodes the payload as a slice of it, and copies each storage
//! once, from the message into its own memory (or keeps the buffer when
//! the storage is most of a large message).

use tensorshare_compat::pickle::{Node, NodeId};
use tensorshare_strategies::bytes::{BytesSegment, BytesStrategy};

use super::{MessageParts, TorchForm};
use crate::Error;
use crate::model::Storage;
use crate::reduce::ReduceError;
use crate::registry::frombuffer::{DTYPE_KEYWORD, FROMBUFFER, PARTIAL, UNTYPED_STORAGE};
use crate::sharing::context::SharingContext;
use tensorshare_compat::pickle::PickleBuilder;

impl TorchForm for BytesStrategy {
    const REBUILDER: &'static str = "torch.frombuffer";
    const HOLDER: &'static str = "heap buffer";

    /// Writes the storage's bytes as a `bytearray` that `torch.frombuffer`
    /// wraps; a storage whose bytes are not in this process is
    /// [`ReduceError::BytesElsewhere`](crate::reduce::ReduceError::BytesElsewhere).
    fn reduce_storage(
        _context: &SharingContext,
        storage: &Storage,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error> {
        // Shared: the payload is the storage's memory, not a copy of it.
        let bytes = storage
            .shared_bytes()
            .ok_or_else(|| ReduceError::BytesElsewhere {
                kind: storage.kind().name(),
                nbytes: storage.nbytes(),
            })?;
        let frombuffer = match message.frombuffer.get() {
            Some(node) => node,
            None => {
                let node = write_frombuffer_partial(out);
                message.frombuffer.set(Some(node));
                node
            }
        };
        let payload = out.push(Node::ByteArray(bytes.into()));
        let tensor = out.call(frombuffer, vec![payload]);
        let untyped_storage = out.global(UNTYPED_STORAGE.0, UNTYPED_STORAGE.1);
        Ok(out.call(untyped_storage, vec![tensor]))
    }

    /// A storage in this strategy's memory is written as any other: its
    /// bytes inline, which are the segment's.
    fn write_handle(
        context: &SharingContext,
        storage: &Storage,
        _segment: &BytesSegment,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error> {
        Self::reduce_storage(context, storage, out, message)
    }
}

/// `functools.partial(torch.frombuffer, dtype=torch.uint8)` as `pickle`
/// writes a partial: `partial(func)` and then the state `(func, args,
/// kwargs, dict)`.
fn write_frombuffer_partial(out: &mut PickleBuilder) -> NodeId {
    let partial = out.global(PARTIAL.0, PARTIAL.1);
    let function = out.global(FROMBUFFER.0, FROMBUFFER.1);
    let node = out.call(partial, vec![function]);
    let args = out.tuple(Vec::new());
    let keyword = out.push(Node::Str(DTYPE_KEYWORD.to_owned()));
    let uint8 = out.global("torch", "uint8");
    let kwargs = out.push(Node::Dict(vec![(keyword, uint8)]));
    let dict = out.push(Node::None);
    let state = out.tuple(vec![function, args, kwargs, dict]);
    if let Some(Node::Object(object)) = out.pickle_mut().get_mut(node) {
        object.state = Some(state);
    }
    node
}
