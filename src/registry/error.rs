//! The registry's errors: why a pickle could not be decoded or rebuilt.
//!
//! Messages include their cause and `source()` is `None`, as everywhere in
//! tensorshare (see the facade [`Error`](crate::Error)).

use tensorshare_compat::pickle::{DecodeError, Global};
use tensorshare_compat::torch_save::TorchSaveError;

use crate::model::ViewError;

/// Why bytes could not be loaded: decoded and rebuilt, as a pickle or a
/// `torch.save` archive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
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
}

impl From<DecodeError> for LoadError {
    fn from(error: DecodeError) -> Self {
        LoadError::Decode(error)
    }
}

impl From<RebuildError> for LoadError {
    fn from(error: RebuildError) -> Self {
        LoadError::Rebuild(error)
    }
}

impl From<TorchSaveError> for LoadError {
    fn from(error: TorchSaveError) -> Self {
        LoadError::TorchSave(error)
    }
}

/// Why a decoded pickle could not be rebuilt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// The pickle names globals the registry does not know: all of them,
    /// in order of first appearance, each where it first appears.
    #[error("{}", not_allowed_message(.0))]
    NotAllowed(Vec<RefusedGlobal>),
    /// The pickle calls something that is not callable.
    #[error("a pickle calls a {0}, which is not callable")]
    NotCallable(&'static str),
    /// A rebuilder got arguments of the wrong shape.
    #[error("{callee}: expected {expected}, got {got}")]
    WrongArguments {
        /// The global called.
        callee: Global,
        /// What it takes.
        expected: String,
        /// What it got.
        got: String,
    },
    /// A rebuilder refused its arguments.
    #[error("{callee}: {message}")]
    Invalid {
        /// The global called.
        callee: Global,
        /// Why.
        message: String,
    },
    /// A tensor view that does not fit its storage.
    #[error("{callee}: {cause}")]
    View {
        /// The global called.
        callee: Global,
        /// The view problem.
        cause: ViewError,
    },
    /// An embedded `torch.save` archive could not be read.
    #[error("{callee}: embedded torch.save archive: {cause}")]
    Archive {
        /// The global called.
        callee: Global,
        /// The archive problem.
        cause: Box<LoadError>,
    },
    /// A persistent id appeared outside a `torch.save` archive.
    #[error("persistent id outside a torch.save archive; plain pickles carry no persistent ids")]
    UnexpectedPersistentId,
    /// An object contains itself; Python allows it, tensor payloads never need it.
    #[error("the pickle contains a reference cycle, which tensorshare does not rebuild")]
    Cycle,
    /// A node refers to an id outside its pickle's arena: a [`Pickle`]
    /// built by hand from ids of another one. Decoded pickles never do.
    ///
    /// [`Pickle`]: tensorshare_compat::pickle::Pickle
    #[error("the pickle refers to a node it does not contain; build every node in the one arena")]
    MissingNode,
    /// Containers nested deeper than the limit.
    #[error("nesting deeper than {0} levels")]
    TooDeep(usize),
    /// A feature this machine cannot provide (CUDA without a GPU, ...).
    #[error("{callee}: {message}")]
    Unsupported {
        /// The global called.
        callee: Global,
        /// What is missing and what to do.
        message: String,
    },
}

/// A global outside the allowlist, and where the pickle first names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedGlobal {
    /// The global.
    pub global: Global,
    /// The byte of the opcode that first names it, counted from the start
    /// of the pickle (a `torch.save` file's object pickle: its zip's
    /// `data.pkl`, or the fourth pickle of a legacy stream); `None` when
    /// the pickle was decoded elsewhere and handed to
    /// [`Registry::rebuild`](super::Registry::rebuild).
    pub offset: Option<usize>,
}

impl std::fmt::Display for RefusedGlobal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "'{}'", self.global)?;
        match self.offset {
            Some(offset) => write!(f, " at byte {offset}"),
            None => Ok(()),
        }
    }
}

fn not_allowed_message(refused: &[RefusedGlobal]) -> String {
    let globals: Vec<&Global> = refused.iter().map(|r| &r.global).collect();
    let mut names: Vec<String> = refused
        .iter()
        .take(NAMED_GLOBALS)
        .map(RefusedGlobal::to_string)
        .collect();
    if globals.len() > NAMED_GLOBALS {
        names.push(format!("and {} more", globals.len() - NAMED_GLOBALS));
    }
    let (noun, them) = match globals.len() {
        1 => ("global", "it"),
        _ => ("globals", "them"),
    };
    // TorchScript pickles name the classes of compiled modules under
    // `__torch__`: no allowlist could make them data, so say what the file is.
    let torchscript = if globals.iter().any(|g| is_torchscript_module(&g.module)) {
        "a TorchScript archive: torch.jit.load reads it; tensorshare does not run \
         TorchScript. "
    } else {
        ""
    };
    format!(
        "{torchscript}the pickle names {} {noun} outside the allowlist: {}; nothing was \
         executed. Register a rebuilder for {them} if you trust the source, or look at what \
         the pickle would call with `tensorshare inspect --opaque`",
        globals.len(),
        names.join(", ")
    )
}

/// How many globals a refusal names; the rest are counted.
const NAMED_GLOBALS: usize = 4;

/// Whether `module` is one TorchScript compiles classes into
/// (`__torch__.model.Net`, `__torch__.torch.nn.modules.linear.Linear`).
fn is_torchscript_module(module: &str) -> bool {
    module == "__torch__" || module.starts_with("__torch__.")
}
