//! Each strategy in torch's pickles: the interface a context calls per
//! strategy, a module per strategy that implements it, the writer of a
//! message's storages, and the one place that picks a strategy by its
//! kind.
//!
//! A strategy's part is its [`TorchForm`]: how one storage is written
//! into a pickle, how a storage to send is allocated, and how a storage
//! a received pickle names is attached. The strategies that share memory
//! send a handle per storage (written by [`TorchForm::write_handle`]
//! after [`reduce_handle`] has moved the storage into the strategy's
//! memory); `bytes` writes the storage's own bytes inline. A message
//! names one strategy for all its storages, or, under the default, each
//! storage's own form (`Placement::form_to_send`). What they receive
//! comes back through [`TorchForm::attach`], which the message's
//! `Receipt` calls, once the message is rebuilt, with each handle the
//! pickle names and the fd that arrived for it, if one did.

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;

use tensorshare_compat::pickle::{EncodeOptions, NodeId, Pickle};
use tensorshare_strategies::{AllocateError, ImportError, SharingStrategy, StrategyKind};

use super::shares::Shares;
use super::{MessageOrigin, SharingContext};
use crate::Error;
use crate::model::{Residence, Storage, StorageWriter, Value};
use crate::reduce::{ReduceError, StorageReducer, reduce_value};
use crate::registry::REDUCTIONS;
use tensorshare_compat::pickle::PickleBuilder;

/// Declares each strategy's module and makes [`SharingContext::using_strategy`]
/// from the list below.
macro_rules! forms {
    ($($(#[cfg($cfg:meta)])? $kind:ident => $module:ident::$strategy:ident,)*) => {
        $($(#[cfg($cfg)])? pub(super) mod $module;)*

        impl SharingContext {
            /// Runs `work` with the strategy `kind`: the one place a
            /// strategy is picked by its kind.
            pub(crate) fn using_strategy<W: WithStrategy>(
                &self,
                kind: StrategyKind,
                work: W,
            ) -> W::Output {
                match kind {
                    $($(#[cfg($cfg)])? StrategyKind::$kind => {
                        work.run::<tensorshare_strategies::$module::$strategy>(self)
                    })*
                }
            }
        }
    };
}

// Every strategy's form, one line each: its kind, and the module here
// that writes and attaches its storages.
forms! {
    FileDescriptor => file_descriptor::FileDescriptorStrategy,
    FileSystem => file_system::FileSystemStrategy,
    Bytes => bytes::BytesStrategy,
    Memmap => memmap::MemmapStrategy,
    #[cfg(tensorshare_tmpfile)]
    Tmpfile => tmpfile::TmpfileStrategy,
}

/// A strategy as a [`SharingContext`] sends and receives with it.
pub(crate) trait TorchForm: SharingStrategy + Default + Sized + 'static {
    /// The callable its messages name for a storage, for the error that
    /// refuses one where its memory cannot reach (over TCP).
    const REBUILDER: &'static str;

    /// What a storage moves into to be sent, for the error that says it
    /// did not.
    const HOLDER: &'static str;

    /// This strategy's part of `context`: by default one per context,
    /// made with the strategy's default configuration on first use.
    fn shares(context: &SharingContext) -> &Shares<Self> {
        context.state.shares.get()
    }

    /// Writes `storage`, of at least one byte, as this strategy sends it,
    /// with what the message's storages share in `message`: by default,
    /// moved into the strategy's memory unless it is there
    /// ([`reduce_handle`]), and its segment's handle written.
    fn reduce_storage(
        context: &SharingContext,
        storage: &Storage,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error> {
        reduce_handle::<Self>(context, storage, out, message)
    }

    /// Writes the handle of `segment`, which `storage` maps, as its
    /// receiver's rebuilder reads it, once per storage per message. A
    /// handle whose fd may ride on the message is added to the message's
    /// `attachable` with its key.
    fn write_handle(
        context: &SharingContext,
        storage: &Storage,
        segment: &Self::Segment,
        out: &mut PickleBuilder,
        message: &MessageParts,
    ) -> Result<NodeId, Error>;

    /// A zero-filled storage to write in place and send, allocated by the
    /// context's instance of the strategy.
    fn allocate_writer(
        context: &SharingContext,
        nbytes: usize,
    ) -> Result<StorageWriter, AllocateError> {
        let segment = Self::shares(context).strategy.allocate(nbytes)?;
        Ok(StorageWriter::new(Box::new(segment)))
    }

    /// The storage a received message names by one of this strategy's
    /// handles.
    ///
    /// # Errors
    ///
    /// The strategy's own, or [`ImportError::InvalidHandle`] for a
    /// strategy whose storages travel inline, which names none.
    fn attach(context: &SharingContext, named: NamedHandle<'_>) -> Result<Storage, Error> {
        let _ = context;
        Err(not_a_handle::<Self>(named.remote))
    }
}

/// The storage `handle` names, attached by the form of the strategy that
/// sent it, where the memory of a message of `origin` can reach.
pub(super) fn attach(
    context: &SharingContext,
    origin: MessageOrigin,
    handle: NamedHandle<'_>,
) -> Result<Storage, Error> {
    struct Attach<'h> {
        origin: MessageOrigin,
        handle: NamedHandle<'h>,
    }
    impl WithStrategy for Attach<'_> {
        type Output = Result<Storage, Error>;
        fn run<S: TorchForm>(self, context: &SharingContext) -> Self::Output {
            self.origin.admit_shared_memory(S::REBUILDER)?;
            S::attach(context, self.handle)
        }
    }
    match handle.remote.strategy() {
        Some(kind) => context.using_strategy(kind, Attach { origin, handle }),
        None => Err(ImportError::InvalidHandle {
            reason: "a storage on a GPU cannot be attached here".to_owned(),
        }
        .into()),
    }
}

/// A handle a received message names, as the message's receipt hands it
/// to its strategy's form.
pub(crate) struct NamedHandle<'a> {
    /// The handle, as the rebuilder of its form read it.
    pub(crate) remote: &'a Residence,
    /// How many bytes of it the message's storage covers.
    pub(crate) nbytes: usize,
    /// The fd that came attached to the message for this handle, paired
    /// with it by the receipt (only a `DupFd` takes one): the form maps it
    /// instead of fetching.
    pub(crate) attached_fd: Option<OwnedFd>,
}

/// The error for a `remote` residence that `S` cannot attach: the
/// registry gave it another strategy's handle, or `S` sends none.
pub(crate) fn not_a_handle<S: TorchForm>(remote: &Residence) -> Error {
    // Named by its form, not printed: a peer's handle may be any size.
    let named = match remote {
        Residence::Handle(handle) => format!(
            "tensorshare.rebuild_storage('{}', ...), which is not its form",
            handle.strategy
        ),
        _ => "another strategy's handle".to_owned(),
    };
    ImportError::InvalidHandle {
        reason: format!("{} cannot attach a storage named by {named}", S::KIND),
    }
    .into()
}

/// The storages whose fds may ride on a message, each with the key of the
/// `DupFd` that names it.
pub(crate) type Attachable = Vec<(i64, Storage)>;

/// What the storages of one message share as it is written.
#[derive(Default)]
pub(crate) struct MessageParts {
    /// The process it goes to, when the connection can name it.
    pub(super) receiver: Option<u32>,
    /// The storages whose fds may ride on it, in the order they were
    /// written: depth first through the value, the order the receiver's
    /// walk meets their `DupFd`s in.
    pub(super) attachable: RefCell<Attachable>,
    /// The node of `functools.partial(torch.frombuffer, dtype=torch.uint8)`
    /// once an inline storage wrote it, memoized for the others.
    pub(super) frombuffer: Cell<Option<NodeId>>,
}

/// A value pickled for sending.
pub(crate) struct Reduced {
    pub(crate) pickle: Pickle,
    pub(crate) attachable: Attachable,
    /// The pickle protocol it is written with: 4, as torch's
    /// `ForkingPickler`, unless a storage went inline (`BYTEARRAY8` is 5's).
    pub(crate) protocol: u8,
}

/// The protocol of a message with inline storages: the first with
/// `BYTEARRAY8`.
const INLINE_PROTOCOL: u8 = 5;

/// Writes a message's storages with one strategy, or each in the form
/// the default placement gives it.
struct MessageReducer<'a> {
    context: &'a SharingContext,
    /// `None` for the default placement.
    strategy: Option<StrategyKind>,
    parts: MessageParts,
}

impl StorageReducer for MessageReducer<'_> {
    type Error = Error;

    fn reduce_storage(&self, storage: &Storage, out: &mut PickleBuilder) -> Result<NodeId, Error> {
        struct Reduce<'a> {
            storage: &'a Storage,
            out: &'a mut PickleBuilder,
            parts: &'a MessageParts,
        }
        impl WithStrategy for Reduce<'_> {
            type Output = Result<NodeId, Error>;
            fn run<S: TorchForm>(self, context: &SharingContext) -> Self::Output {
                S::reduce_storage(context, self.storage, self.out, self.parts)
            }
        }
        if storage.nbytes() == 0 {
            return Ok(reduce_empty(out));
        }
        let kind = match self.strategy {
            Some(kind) => kind,
            None => self.context.placement().form_to_send(storage),
        };
        let parts = &self.parts;
        self.context.using_strategy(
            kind,
            Reduce {
                storage,
                out,
                parts,
            },
        )
    }
}

/// Pickles `value` as torch's `ForkingPickler` would for process
/// `receiver` (when the connection can name it), every storage shared with
/// `strategy`, or placed by the default when `None`.
pub(crate) fn reduce_message(
    context: &SharingContext,
    strategy: Option<StrategyKind>,
    value: &Value,
    receiver: Option<u32>,
) -> Result<Reduced, Error> {
    let reducer = MessageReducer {
        context,
        strategy,
        parts: MessageParts {
            receiver,
            ..MessageParts::default()
        },
    };
    let pickle = reduce_value(value, &reducer, context.registry().reducers())?;
    let MessageParts {
        attachable,
        frombuffer,
        ..
    } = reducer.parts;
    let protocol = match frombuffer.get() {
        Some(_) => INLINE_PROTOCOL,
        None => EncodeOptions::DEFAULT_PROTOCOL,
    };
    Ok(Reduced {
        pickle,
        attachable: attachable.into_inner(),
        protocol,
    })
}

/// [`TorchForm::reduce_storage`] of a strategy that sends handles: moves
/// `storage` into `S`'s memory unless it is there, and writes the handle.
pub(crate) fn reduce_handle<S: TorchForm>(
    context: &SharingContext,
    storage: &Storage,
    out: &mut PickleBuilder,
    message: &MessageParts,
) -> Result<NodeId, Error> {
    let shared = context.shared_copy::<S>(storage)?;
    let segment = shared
        .segment_of::<S>()
        .ok_or(ReduceError::NotMoved(S::HOLDER))?;
    S::shares(context).sent(segment, &shared);
    S::write_handle(context, &shared, segment, out, message)
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
