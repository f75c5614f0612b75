//! The `tmpfile` strategy's form, built only with `--cfg
//! tensorshare_tmpfile` (`CONTRIBUTING.md`). torch has no form for it, so
//! a storage travels in tensorshare's form for such strategies,
//!
//! ```text
//! tensorshare.rebuild_storage("tmpfile", (sharer_address, key), nbytes)
//! ```
//!
//! which this module writes and, once the registry has read it, attaches:
//! the fd goes through the context's resource sharer, as a
//! `file_descriptor` storage's does, and is held there for its receiver
//! as long as one is.

use tensorshare_compat::pickle::{Node, NodeId, PickleBuilder};
use tensorshare_strategies::tmpfile::{TmpfileSegment, TmpfileStrategy};
use tensorshare_strategies::{ImportError, SharingStrategy};

use super::{MessageParts, NamedHandle, TorchForm, not_a_handle};
use crate::Error;
use crate::model::{HandleRef, Residence, Storage, Value};
use crate::registry::strategy_handle::REBUILD_STORAGE;
use crate::sharing::context::SharingContext;

impl TorchForm for TmpfileStrategy {
    const REBUILDER: &'static str = "tensorshare.rebuild_storage (tmpfile)";
    const HOLDER: &'static str = "temporary file";

    /// Fetches the fd from the sender's resource sharer, and maps it once
    /// per file while it lives.
    fn attach(context: &SharingContext, named: NamedHandle<'_>) -> Result<Storage, Error> {
        let (address, key) = match named.remote {
            Residence::Handle(HandleRef {
                strategy: Self::KIND,
                handle,
            }) => read_handle(handle)?,
            _ => return Err(not_a_handle::<Self>(named.remote)),
        };
        let fd = context.fetch_fd(address, key)?;
        Self::shares(context).receive_plain(fd, named.nbytes)
    }

    fn write_handle(
        context: &SharingContext,
        storage: &Storage,
        segment: &TmpfileSegment,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error> {
        let fd = Self::shares(context).strategy.export(segment)?;
        let registration = context.resource_sharer()?.register(fd)?;
        let id = registration.id().clone();
        context.keep_registration(registration, message.receiver);
        let address = out.push(Node::Bytes(id.address.into_bytes().into()));
        let key = out.push(Node::Int(id.key));
        let handle = out.tuple(vec![address, key]);
        let name = out.push(Node::Str(Self::KIND.name().into()));
        let nbytes = out.int(storage.nbytes());
        let rebuild = out.global(REBUILD_STORAGE.0, REBUILD_STORAGE.1);
        Ok(out.call(rebuild, vec![name, handle, nbytes]))
    }
}

/// The `(sharer_address, key)` [`TmpfileStrategy::write_handle`] wrote.
fn read_handle(handle: &Value) -> Result<(&[u8], i64), Error> {
    match handle {
        Value::Tuple(fields) => match &fields[..] {
            [Value::Bytes(address), Value::Int(key)] => Ok((address, *key)),
            _ => Err(invalid(handle)),
        },
        _ => Err(invalid(handle)),
    }
}

fn invalid(handle: &Value) -> Error {
    ImportError::InvalidHandle {
        reason: format!(
            "a tmpfile handle is (sharer_address: bytes, key: int), not {}",
            handle.type_name()
        ),
    }
    .into()
}
