//! The facade error: one enum whose variants a caller can act on.
//!
//! # How errors report their causes
//!
//! One rule for every error type in tensorshare, `tensorshare-compat` and
//! `tensorshare-strategies`: **the message includes its cause, and
//! `source()` returns `None`.** `{error}` alone says everything, and a chain
//! printer (`anyhow`, `eyre`, a `main` returning `Box<dyn Error>`, which
//! print the error and then each `source()`) shows each cause once, not
//! twice. Wrapped errors stay reachable as the variants' fields, and the OS
//! error behind any failure through [`Error::io_error`] and its likes on
//! [`ConnectionError`](crate::connection::ConnectionError),
//! [`FetchError`](crate::resource_sharer::FetchError) and
//! [`SharerError`](crate::resource_sharer::SharerError). So no error
//! derives `#[from]` or `#[source]`, nor names a field `source` (thiserror
//! takes each for the source): conversions are written out below, and
//! `#[error(transparent)]` variants pass on their wrapped error's message
//! and its `source()`, which is `None` too.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tensorshare_compat::pickle::{DecodeError, EncodeError, Global};
use tensorshare_compat::torch_save::{TorchSaveError, WriteError};
use tensorshare_strategies::memmap::InvalidMemmapDir;
use tensorshare_strategies::{AllocateError, ExportError, ImportError};

use crate::archive::FileError;
use crate::connection::{ConnectionError, is_loopback};
use crate::model::{ElementError, ValueAccessError, ViewError};
use crate::reduce::ReduceError;
use crate::registry::{LoadError, RebuildError};
use crate::resource_sharer::{FetchError, RegisterError, SharerError};
#[cfg(feature = "safetensors")]
use crate::safetensors_format::SafetensorsError;
use crate::serde_value::SerdeError;

/// Everything that can go wrong loading or sharing tensors.
///
/// Print it with `Display` (`{error}`): the message says what failed, with
/// its cause, and what to do next; `source()` is `None`, so a printer of
/// chains shows each cause once. A `main` that returns it prints `Debug`
/// instead; the [crate docs](crate#errors) show a `main` that prints
/// `Display`.
///
/// # Examples
///
/// Acting on one cause, passing on the others:
///
/// ```
/// use tensorshare::connection::ConnectionError;
/// use tensorshare::{Authkey, Error, SharingContext};
/// use tensorshare::connection::Address;
///
/// let sharing = SharingContext::new(Authkey::random()?);
/// let nowhere = Address::unique_abstract("nobody-listens")?;
/// match sharing.connect(&nowhere) {
///     Err(Error::Connection(error @ ConnectionError::Connect { .. })) => {
///         let message = error.to_string();
///         assert!(message.starts_with("cannot connect to @tensorshare-nobody-listens-"), "{message}");
///         eprintln!("error: {message}; retrying later");
///     }
///     Err(other) => return Err(other),
///     Ok(_) => unreachable!("nothing listens there"),
/// }
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pickle is malformed, too large or too deep, or names a global
    /// that is not allowed. Nothing was executed.
    #[error("pickle refused: {0}")]
    Decode(DecodeError),
    /// The pickle decoded but a rebuilder refused it.
    #[error("cannot rebuild: {0}")]
    Rebuild(RebuildError),
    /// A `torch.save` archive is malformed.
    #[error("torch.save archive: {0}")]
    TorchSave(TorchSaveError),
    /// A `torch.save` file could not be written.
    #[error("cannot write a torch.save file: {0}")]
    TorchSaveWrite(WriteError),
    /// A value has no pickled form (a user rebuilder's value, an opaque
    /// description), or a storage cannot be written in the form asked for.
    #[error(transparent)]
    Reduce(ReduceError),
    /// A pickle could not be encoded.
    #[error(transparent)]
    Encode(EncodeError),
    /// A storage a received message names could not be attached: its fd
    /// fetched, or its segment or file mapped.
    #[error("cannot rebuild: {callee}: {cause}")]
    Attach {
        /// The rebuilder that named the storage.
        callee: Global,
        /// What failed.
        cause: Box<Error>,
    },
    /// The memmap directory given is unusable.
    #[error(transparent)]
    MemmapDir(InvalidMemmapDir),
    /// A tensor view does not fit its storage.
    #[error(transparent)]
    View(ViewError),
    /// A tensor's elements cannot be read or written as the Rust type asked
    /// for: another dtype, a strided view viewed in place, a misaligned
    /// start, data that does not fill its shape.
    #[error(transparent)]
    Element(ElementError),
    /// A received value is not what the reader asked for: another type, a
    /// missing key, an int out of range; the message says where.
    #[error(transparent)]
    Value(ValueAccessError),
    /// Shared memory could not be allocated.
    #[error("cannot allocate shared memory: {0}")]
    Allocate(AllocateError),
    /// A segment could not be exported for another process.
    #[error("cannot share a segment: {0}")]
    Export(ExportError),
    /// A received segment could not be mapped.
    #[error("cannot map a received segment: {0}")]
    Import(ImportError),
    /// This process's resource sharer could not start.
    #[error("cannot start the resource sharer: {0}")]
    Sharer(SharerError),
    /// An fd could not be handed to the resource sharer.
    #[error("cannot offer an fd through the resource sharer: {0}")]
    Register(RegisterError),
    /// A peer's fd could not be fetched from its resource sharer.
    #[error("cannot fetch a shared fd: {0}")]
    Fetch(FetchError),
    /// A `multiprocessing.connection` connection failed.
    #[error(transparent)]
    Connection(ConnectionError),
    /// Peers failed to authenticate to this process's resource sharer, and
    /// so could fetch none of the storages sent to them: the cause of a
    /// connection that then failed, when one did.
    #[error("{}{}", peer_authkey_message(*.failures), then_failed(.connection.as_ref()))]
    PeerAuthkey {
        /// How many times, since this process started sharing.
        failures: u64,
        /// The connection failure that followed, if that is how it showed.
        connection: Option<ConnectionError>,
    },
    /// Storages sent were not fetched in the time given
    /// ([`SharingContext::wait_until_fetched`](crate::SharingContext::wait_until_fetched)).
    #[error("{}", unfetched_message(*.pending, *.waited))]
    Unfetched {
        /// How many are still waiting.
        pending: usize,
        /// How long was waited.
        waited: std::time::Duration,
    },
    /// A message that arrived over TCP named a storage in shared memory:
    /// refused, since shared memory does not cross hosts (the message says
    /// what the sender should do).
    #[error("{}", shared_memory_over_tcp_message(form, peer.as_ref()))]
    SharedMemoryOverTcp {
        /// The rebuilder that named the storage, e.g. `rebuild_storage_fd`.
        form: &'static str,
        /// The peer, when its address could be told.
        peer: Option<std::net::SocketAddr>,
    },
    /// A send over TCP with a context whose strategy is pinned to one that
    /// shares memory
    /// ([`SharingContext::with_pinned_strategy`](crate::SharingContext::with_pinned_strategy)).
    #[error(
        "this context's strategy is pinned to {strategy}, which shares memory and cannot reach \
         a peer over TCP: set it with with_strategy instead (TCP connections then send \
         storages as bytes, local ones keep {strategy}), or pin bytes"
    )]
    PinnedStrategyOverTcp {
        /// The pinned strategy.
        strategy: tensorshare_strategies::StrategyKind,
    },
    /// A connection authenticated with one authkey was given to
    /// [`Connection::new`](crate::Connection::new) with a
    /// [`SharingContext`](crate::SharingContext) holding another.
    #[error(
        "this connection was authenticated with another authkey than the SharingContext \
         given to Connection::new holds: its peer would fail to fetch the storages sent to \
         it, and this process to fetch the peer's; make connections from the context \
         (SharingContext::connect, SharingContext::listen) so that they share one key"
    )]
    AuthkeyMismatch,
    /// A Rust value has no Python form, or a value does not fit the Rust
    /// type asked for ([`to_value`](crate::to_value),
    /// [`from_value`](crate::from_value)); the message gives the path to
    /// what does not fit.
    #[error(transparent)]
    Serde(SerdeError),
    /// A `.safetensors` file is malformed, or a value has no safetensors
    /// form (not a flat dict of str to tensor, a dtype safetensors lacks).
    #[cfg(feature = "safetensors")]
    #[error(transparent)]
    Safetensors(SafetensorsError),
    /// A `torch.save` file could not be read or written as a file, or
    /// changed while it was read.
    #[error(transparent)]
    TorchSaveFile(FileError),
    /// The file at `path` was read but not loaded: `cause` says why (a
    /// malformed archive, a refused pickle, a header that does not fit),
    /// this names the file. Errors that name their file already (it
    /// cannot be read, it changed while read) come as they are.
    #[error("{}: {cause}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// Why it was not loaded.
        cause: Box<Error>,
    },
    /// A tensor could not go out or come in through DLPack.
    #[cfg(feature = "dlpack")]
    #[error(transparent)]
    Dlpack(tensorshare_strategies::platform::dlpack::DlpackError),
}

fn then_failed(connection: Option<&ConnectionError>) -> String {
    connection.map_or_else(String::new, |cause| {
        format!("; the connection then failed: {cause}")
    })
}

/// What to say of storages still waiting for their receivers.
fn unfetched_message(pending: usize, waited: std::time::Duration) -> String {
    format!(
        "{pending} shared storages were not fetched by their receivers within {waited:.1?}: \
         keep this process running until they are, or look at why the receivers are not \
         reading their messages"
    )
}

/// What to say of peers that failed the resource sharer's handshake.
fn peer_authkey_message(failures: u64) -> String {
    let times = match failures {
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    format!(
        "a peer failed to authenticate to this process's resource sharer ({times}): its \
         authkey differs from this process's, so it cannot fetch the storages sent to it; \
         give every process the same key (the torch side's \
         multiprocessing.current_process().authkey)"
    )
}

/// What to say of a shared-memory handle that arrived over TCP.
fn shared_memory_over_tcp_message(form: &str, peer: Option<&SocketAddr>) -> String {
    let from = match peer {
        Some(peer) if is_loopback(peer.ip()) => {
            format!(
                "a TCP connection from {peer} (loopback: refused all the same, so that a peer \
                 behaves alike on one host and on two; connect over an AF_UNIX address for \
                 shared memory on one host)"
            )
        }
        Some(peer) => format!("a TCP connection from {peer}"),
        None => "a TCP connection".to_owned(),
    };
    format!(
        "{form} arrived over {from}: shared memory does not cross hosts, so only storages \
         carried as bytes are accepted over TCP. The sender must send them inline: a \
         tensorshare sender does so over TCP unless its strategy is pinned (drop \
         with_pinned_strategy, or pin bytes); a torch sender must send \
         conn.send_bytes(pickle.dumps(obj)) instead of conn.send(obj), because conn.send \
         pickles with multiprocessing's ForkingPickler, for which torch registers its \
         shared-memory reductions whatever torch.multiprocessing.set_sharing_strategy says, \
         while plain pickle writes each storage's bytes"
    )
}

impl Error {
    /// Whether the peer closed the connection between messages: the end
    /// of its stream, where a loop over [`Connection::recv`](crate::Connection::recv)
    /// stops. A peer that hangs up inside a message is not this, but a
    /// [`ConnectionError::Receive`] naming the truncated frame.
    pub fn is_closed(&self) -> bool {
        matches!(self, Self::Connection(ConnectionError::Closed))
    }

    /// Whether one received message was refused whole: it arrived complete
    /// but did not decode, rebuild or attach (a hostile or malformed
    /// pickle, a dtype or global this build does not know, a storage that
    /// cannot be fetched or mapped). The connection is still in step: a
    /// server logs it and reads the peer's next message.
    pub fn is_refused_message(&self) -> bool {
        matches!(
            self,
            Self::Decode(_) | Self::Rebuild(_) | Self::Attach { .. } | Self::View(_)
        )
    }

    /// Whether only one peer failed, during its handshake (another key, or
    /// silence past the handshake timeout): a server that
    /// [accepts](crate::Listener::accept) logs it and accepts the next
    /// peer.
    pub fn is_handshake_failure(&self) -> bool {
        matches!(self, Self::Connection(error) if error.is_handshake_failure())
    }

    /// The OS error behind this one, if an I/O operation failed: a socket,
    /// a file, the resource sharer's connection, or one of these while
    /// attaching a storage or reading an embedded archive. The segment
    /// operations keep their errno in their own fields instead
    /// ([`ImportError`], ...).
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Error::Connection(error) => error.io_error(),
            Error::Fetch(error) => error.io_error(),
            Error::Sharer(error) => error.io_error(),
            Error::TorchSaveWrite(WriteError::Io(cause))
            | Error::Reduce(ReduceError::TorchSaveWrite(WriteError::Io(cause))) => Some(cause),
            Error::Attach { cause, .. } => cause.io_error(),
            #[cfg(feature = "safetensors")]
            Error::Safetensors(error) => error.io_error(),
            Error::TorchSaveFile(error) => error.io_error(),
            Error::InFile { cause, .. } => cause.io_error(),
            _ => None,
        }
    }

    /// This error as one from loading the file at `path`: named by it,
    /// unless its message names the file already.
    pub(crate) fn in_file(self, path: &Path) -> Error {
        match self {
            Error::TorchSaveFile(_) | Error::InFile { .. } => self,
            #[cfg(feature = "safetensors")]
            Error::Safetensors(ref error) if error.names_a_path() => self,
            cause => Error::InFile {
                path: path.to_owned(),
                cause: Box::new(cause),
            },
        }
    }
}

/// `From` conversions written out: `#[from]` would also make the wrapped
/// error the `source()`, which the rule in the module docs forbids.
macro_rules! from_wrapped {
    ($($variant:ident($wrapped:ty)),* $(,)?) => {
        $(
            impl From<$wrapped> for Error {
                fn from(error: $wrapped) -> Self {
                    Error::$variant(error)
                }
            }
        )*
    };
}

from_wrapped!(
    Decode(DecodeError),
    TorchSave(TorchSaveError),
    TorchSaveWrite(WriteError),
    Encode(EncodeError),
    Allocate(AllocateError),
    Export(ExportError),
    Import(ImportError),
    Sharer(SharerError),
    Register(RegisterError),
    Fetch(FetchError),
    Rebuild(RebuildError),
    View(ViewError),
    Value(ValueAccessError),
    Connection(ConnectionError),
    MemmapDir(InvalidMemmapDir),
    Serde(SerdeError),
    TorchSaveFile(FileError),
);

#[cfg(feature = "dlpack")]
from_wrapped!(Dlpack(
    tensorshare_strategies::platform::dlpack::DlpackError
));

#[cfg(feature = "safetensors")]
from_wrapped!(Safetensors(SafetensorsError));

/// A layer's error as the facade's variant for it: each layer error's
/// variants map one to one onto the facade's, so a caller matches one
/// enum whichever layer failed.
impl From<LoadError> for Error {
    fn from(error: LoadError) -> Self {
        match error {
            LoadError::Decode(error) => Error::Decode(error),
            LoadError::Rebuild(error) => Error::Rebuild(error),
            LoadError::TorchSave(error) => Error::TorchSave(error),
        }
    }
}

impl From<ElementError> for Error {
    fn from(error: ElementError) -> Self {
        match error {
            ElementError::Allocate(error) => Error::Allocate(error),
            ElementError::View(error) => Error::View(error),
            error => Error::Element(error),
        }
    }
}

impl From<ReduceError> for Error {
    fn from(error: ReduceError) -> Self {
        match error {
            ReduceError::TorchSaveWrite(error) => Error::TorchSaveWrite(error),
            error => Error::Reduce(error),
        }
    }
}

#[cfg(test)]
mod tests {

    use tensorshare_compat::pickle::{
        ByteChunks, Construction, EncodeOptions, Global, Node, Object, Pickle, encode,
    };
    use tensorshare_compat::torch_save::write_legacy;

    use super::*;
    use crate::connection::{Client, ConnectionError, ConnectionOptions};
    use crate::model::{Storage, TensorView};
    use crate::{Authkey, DType, SharingContext, StrategyKind, Tensor, Value};

    /// `error` as anyhow's `{:?}` prints it: the message, then every
    /// `source()` under `Caused by:`.
    fn chain(error: &(dyn std::error::Error + 'static)) -> (String, Vec<String>) {
        let mut printed = error.to_string();
        let mut causes = Vec::new();
        let mut source = error.source();
        while let Some(cause) = source {
            printed.push_str("\n\nCaused by:\n    ");
            printed.push_str(&cause.to_string());
            causes.push(cause.to_string());
            source = cause.source();
        }
        (printed, causes)
    }

    /// Each cause of `error` shows once in its printed chain, and so does
    /// `fragment`, a part of the innermost cause's message.
    fn assert_each_cause_once(error: &(dyn std::error::Error + 'static), fragment: &str) {
        let (printed, causes) = chain(error);
        for cause in &causes {
            assert_eq!(
                printed.matches(cause.as_str()).count(),
                1,
                "cause {cause:?} is printed more than once:\n{printed}"
            );
        }
        assert_eq!(
            printed.matches(fragment).count(),
            1,
            "{fragment:?} should show exactly once:\n{printed}"
        );
    }

    #[test]
    fn a_wrong_authkey_shows_once() {
        let sender = SharingContext::new(Authkey::new(*b"the sender's key"))
            .with_strategy(StrategyKind::FileDescriptor);
        let storage = Storage::from_vec(vec![7u8; 64]);
        let tensor = Tensor::new(storage, TensorView::contiguous(DType::UInt8, &[64])).unwrap();
        let pickle = sender.dumps(&Value::Tensor(tensor)).unwrap();
        let receiver = SharingContext::new(Authkey::new(*b"another key"));
        let error = receiver.loads(&pickle).unwrap_err();
        assert_each_cause_once(&error, "rejected our authkey");
        // The fetch's own error, carried up through the rebuild as it was.
        assert!(
            matches!(&error, Error::Attach { cause, .. } if matches!(**cause, Error::Fetch(_))),
            "{error:?}"
        );
    }

    #[test]
    fn a_failed_connect_shows_its_os_error_once_and_keeps_it() {
        let address = "/nonexistent-tensorshare-dir/socket".parse().unwrap();
        let key = Authkey::new(*b"key");
        let error = Client::connect(&address, &key, ConnectionOptions::default()).unwrap_err();
        assert!(matches!(error, ConnectionError::Connect { .. }), "{error}");
        assert_each_cause_once(&error, "No such file or directory");
        let error = Error::from(error);
        assert_each_cause_once(&error, "No such file or directory");
        assert_eq!(
            error.io_error().and_then(io::Error::raw_os_error),
            Some(tensorshare_strategies::Errno::ENOENT as i32)
        );
    }

    #[test]
    fn a_value_that_does_not_fit_shows_its_path_once() {
        let value = Value::List(vec![Value::Int(0), Value::Str("x".into())].into());
        let error = crate::from_value::<Vec<u8>>(&value).unwrap_err();
        assert_each_cause_once(&error, "[1]: expected u8, found str 'x'");
        let error = Error::from(error);
        assert!(matches!(error, Error::Serde(_)), "{error}");
        assert_each_cause_once(&error, "[1]: expected u8, found str 'x'");
    }

    #[test]
    fn typed_reads_have_variants_of_their_own_and_allocation_keeps_its_own() {
        let t = Tensor::from_slice(&StrategyKind::Bytes, &[1u8, 2], &[2]).unwrap();
        let error = Error::from(t.as_slice::<i8>().unwrap_err());
        assert!(
            matches!(error, Error::Element(ElementError::DTypeMismatch { .. })),
            "{error:?}"
        );
        let error = Error::from(ElementError::Allocate(AllocateError::TooLarge {
            nbytes: 1 << 62,
        }));
        assert!(matches!(error, Error::Allocate(_)), "{error:?}");
        let error = Error::from(Value::from(1).try_get::<i64>("a").unwrap_err());
        assert!(
            matches!(error, Error::Value(ValueAccessError::WrongType { .. })),
            "{error:?}"
        );
        assert_each_cause_once(&error, "expected a dict, found an int");
    }

    #[test]
    fn a_disallowed_global_in_an_embedded_archive_shows_once() {
        // torch.storage._load_from_bytes(b), `b` a legacy torch.save stream
        // whose object is os.system.
        let mut object = Pickle::new();
        let global = object.push(Node::Global(Global::new("os", "system")));
        object.set_root(global);
        let mut stream = Vec::new();
        write_legacy(&mut stream, &object, &[]).unwrap();

        let mut outer = Pickle::new();
        let load = outer.push(Node::Global(Global::new(
            "torch.storage",
            "_load_from_bytes",
        )));
        let payload = outer.push(Node::Bytes(ByteChunks::from(stream)));
        let args = outer.push(Node::Tuple(vec![payload]));
        let call = outer.push(Node::Object(Box::new(Object {
            callable: load,
            construction: Construction::Reduce { args },
            state: None,
            list_items: Vec::new(),
            dict_items: Vec::new(),
        })));
        outer.set_root(call);
        let bytes = encode(&outer, &EncodeOptions::new()).unwrap();

        let sharing = SharingContext::new(Authkey::new(*b"key"));
        let error = sharing.loads(&bytes).unwrap_err();
        assert!(
            matches!(error, Error::Rebuild(RebuildError::Archive { .. })),
            "{error}"
        );
        assert_each_cause_once(&error, "'os.system' is not allowed");
    }
}
