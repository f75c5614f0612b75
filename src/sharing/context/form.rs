//! Each strategy in torch's pickles: the interface a context calls per
//! strategy, the writer every strategy that sends handles shares, and the
//! one place that picks a strategy by its kind.
//!
//! A strategy's part is its [`TorchForm`]: how a value is pickled with its
//! storages in it, and how a storage to send is allocated. The three that
//! share memory send a handle per storage ([`HandleForm`]), written by
//! [`HandleReducer`] after the storage has moved into the strategy's memory;
//! `bytes` writes every storage inline as plain `pickle.dumps` does. What
//! they receive comes back through [`Shares::receive`](super::shares::Shares::receive),
//! called by the registry's attacher for the handle the pickle names.

use std::cell::RefCell;
use std::marker::PhantomData;

use tensorshare_compat::pickle::{EncodeOptions, NodeId, Pickle};
use tensorshare_strategies::bytes::BytesStrategy;
use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;
use tensorshare_strategies::file_system::FileSystemStrategy;
use tensorshare_strategies::memmap::MemmapStrategy;
use tensorshare_strategies::{AllocateError, SharingStrategy, StrategyKind};

use super::SharingContext;
use super::shares::Shares;
use crate::Error;
use crate::model::{Storage, StorageWriter, Value};
use crate::reduce::{PickleBuilder, ReduceError, StorageReducer, reduce_value};
use crate::registry::REDUCTIONS;

/// A strategy as a [`SharingContext`] sends with it.
pub(crate) trait TorchForm: SharingStrategy + Sized {
    /// This strategy's part of `context`.
    fn shares(context: &SharingContext) -> &Shares<Self>;

    /// Pickles `value` as torch's `ForkingPickler` would, every storage
    /// shared with this strategy.
    fn reduce(context: &SharingContext, value: &Value) -> Result<Reduced, Error>;

    /// A zero-filled storage to write in place and send, allocated by the
    /// context's instance of the strategy.
    fn allocate_writer(
        context: &SharingContext,
        nbytes: usize,
    ) -> Result<StorageWriter, AllocateError> {
        let segment = Self::shares(context).strategy.allocate(nbytes)?;
        Ok(StorageWriter::new(Box::new(segment)))
    }
}

/// A strategy whose storages travel as handles to memory both sides map.
pub(crate) trait HandleForm: TorchForm {
    /// What a storage moves into, for the error that says it did not.
    const HOLDER: &'static str;

    /// Writes the handle of `segment`, which `storage` maps, as torch's
    /// reducer names it, once per storage per message. A handle whose fd may
    /// ride on the message is added to `attachable` with its key.
    fn write_handle(
        context: &SharingContext,
        storage: &Storage,
        segment: &Self::Segment,
        out: &mut PickleBuilder,
        attachable: &mut Attachable,
    ) -> Result<NodeId, Error>;
}

/// The storages whose fds may ride on a message, each with the key of the
/// `DupFd` that names it.
pub(crate) type Attachable = Vec<(i64, Storage)>;

/// A value pickled for sending.
pub(crate) struct Reduced {
    pub(crate) pickle: Pickle,
    pub(crate) attachable: Attachable,
    /// The pickle protocol it is written with: 4, as torch's
    /// `ForkingPickler`, unless the form needs 5 (`bytes`' `bytearray`s).
    pub(crate) protocol: u8,
}

/// Writes storages as handles of `S`, moving each into `S`'s memory first.
struct HandleReducer<'a, S> {
    context: &'a SharingContext,
    attachable: RefCell<Attachable>,
    strategy: PhantomData<S>,
}

impl<S: HandleForm> StorageReducer for HandleReducer<'_, S> {
    type Error = Error;

    fn reduce_storage(&self, storage: &Storage, out: &mut PickleBuilder) -> Result<NodeId, Error> {
        if storage.nbytes() == 0 {
            return Ok(reduce_empty(out));
        }
        let shared = self.context.shared_copy::<S>(storage)?;
        let segment = shared
            .segment_of::<S>()
            .ok_or(ReduceError::NotMoved(S::HOLDER))?;
        S::shares(self.context).sent(segment, &shared);
        let mut attachable = self.attachable.borrow_mut();
        S::write_handle(self.context, &shared, segment, out, &mut attachable)
    }
}

/// [`TorchForm::reduce`] of a strategy that sends handles.
pub(crate) fn reduce_handles<S: HandleForm>(
    context: &SharingContext,
    value: &Value,
) -> Result<Reduced, Error> {
    let reducer = HandleReducer::<S> {
        context,
        attachable: RefCell::new(Vec::new()),
        strategy: PhantomData,
    };
    let pickle = reduce_value(value, &reducer, context.registry().reducers())?;
    Ok(Reduced {
        pickle,
        attachable: reducer.attachable.into_inner(),
        protocol: EncodeOptions::DEFAULT_PROTOCOL,
    })
}

/// `rebuild_storage_empty(UntypedStorage)`, torch's form for a storage of no
/// bytes under every strategy: there is nothing to map. torch maps a
/// 64-byte segment for one under `file_system`, and nothing under
/// `from_file`; every torch rebuilds this form.
pub(crate) fn reduce_empty(out: &mut PickleBuilder) -> NodeId {
    let class = out.global("torch.storage", "UntypedStorage");
    let rebuild = out.global(REDUCTIONS, "rebuild_storage_empty");
    out.call(rebuild, vec![class])
}

/// Work done with the context's strategy, whichever it is.
pub(crate) trait WithStrategy {
    type Output;

    /// Does the work with strategy `S`.
    fn run<S: TorchForm>(self, context: &SharingContext) -> Self::Output;
}

impl SharingContext {
    /// Runs `work` with the strategy `kind`: the one place a strategy is
    /// picked by its kind.
    pub(crate) fn using_strategy<W: WithStrategy>(&self, kind: StrategyKind, work: W) -> W::Output {
        match kind {
            StrategyKind::FileDescriptor => work.run::<FileDescriptorStrategy>(self),
            StrategyKind::FileSystem => work.run::<FileSystemStrategy>(self),
            StrategyKind::Bytes => work.run::<BytesStrategy>(self),
            StrategyKind::Memmap => work.run::<MemmapStrategy>(self),
        }
    }
}
