//! Decode any torch pickle, `.pt` or `.safetensors` file without executing anything, into
//! a [`Report`]: the file's format and the rebuilt object, what in it is
//! not plain data, and each tensor's first elements.
//!
//! The `tensorshare inspect` command prints a report as JSON or as a text
//! tree; a program embedding the library reads it as it is.
//!
//! # Examples
//!
//! ```
//! use tensorshare::inspect::{inspect, Format};
//! use tensorshare::registry::{LoadOptions, UnknownGlobals};
//! use tensorshare::{Registry, Value};
//!
//! // pickle.dumps([1, 'a'], protocol=2)
//! let report = inspect(b"\x80\x02]q\x00(K\x01X\x01\x00\x00\x00aq\x01e.", &Registry::default())?;
//! assert_eq!(report.format, Format::Pickle);
//! let Value::List(items) = &report.object else { panic!("a list") };
//! assert!(matches!(&items[..], [Value::Int(1), Value::Str(a)] if &**a == "a"));
//! assert!(report.opaque_summary().is_empty());
//!
//! // pickle.dumps(os.system, protocol=2): refused, unless the registry
//! // keeps unknown globals as inert nodes.
//! let pickle = b"\x80\x02cposix\nsystem\nq\x00.";
//! assert!(inspect(pickle, &Registry::default()).is_err());
//! let options = LoadOptions::default().with_unknown_globals(UnknownGlobals::Opaque);
//! let report = inspect(pickle, &Registry::default().with_options(options))?;
//! let summary = report.opaque_summary();
//! assert_eq!(summary.globals[0].to_string(), "posix.system");
//! assert!(!summary.is_empty());
//! # Ok::<(), tensorshare::Error>(())
//! ```

use rustc_hash::FxHashSet;
use tensorshare_compat::dtype::Scalar;
use tensorshare_compat::pickle::Global;
use tensorshare_compat::torch_save::TorchSaveFormat;

use crate::model::Opaque;
use crate::{DType, Error, Registry, Tensor, Value};

/// Elements shown per tensor.
pub const HEAD_ELEMENTS: usize = 8;

/// What kind of file was inspected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A pickle (`ForkingPickler` with any strategy, or plain `pickle`).
    Pickle,
    /// A `torch.save` zip file.
    TorchSaveZip,
    /// A legacy (pre-1.6 default) `torch.save` file.
    TorchSaveLegacy,
    /// A `.safetensors` file: its object is a `dict` of `str` to `Tensor`.
    Safetensors,
}

impl Format {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Format::Pickle => "pickle",
            Format::TorchSaveZip => "torch.save zip",
            Format::TorchSaveLegacy => "torch.save legacy",
            Format::Safetensors => "safetensors",
        }
    }
}

/// A decoded file, ready to print.
#[derive(Debug)]
pub struct Report {
    /// The file's format.
    pub format: Format,
    /// The rebuilt object.
    pub object: Value,
}

/// What a report holds that is not plain data: the globals outside the
/// allowlist and the calls recorded instead of made (see
/// [`UnknownGlobals::Opaque`](crate::registry::UnknownGlobals::Opaque)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpaqueSummary {
    /// Every global outside the allowlist, in order of first appearance.
    pub globals: Vec<Global>,
    /// How many calls were recorded instead of made.
    pub calls: usize,
    /// How many of them an allowlisted rebuilder refused.
    pub refused: usize,
}

impl OpaqueSummary {
    /// Whether the report is plain data: nothing opaque in it.
    pub fn is_empty(&self) -> bool {
        self.globals.is_empty() && self.calls == 0
    }
}

/// The first bytes of a legacy `torch.save` stream: protocol 2 and the
/// magic number `0x1950a86a20f9469cfc6c` as `LONG1`.
const LEGACY_MAGIC: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";

/// Decodes `bytes` as a torch pickle, a `torch.save` file or a
/// `.safetensors` file (told apart by their first bytes).
///
/// Globals outside `registry`'s allowlist are refused, all of them named,
/// unless its options keep them as opaque nodes
/// ([`UnknownGlobals::Opaque`](crate::registry::UnknownGlobals::Opaque)).
///
/// # Errors
///
/// Any [`Error`] of decoding or rebuilding: a disallowed global, a malformed
/// or truncated stream, a view outside its storage, a safetensors header
/// that does not match its data.
pub fn inspect(bytes: &[u8], registry: &Registry) -> Result<Report, Error> {
    #[cfg(feature = "safetensors")]
    if crate::safetensors_format::looks_like_safetensors(bytes) {
        return Ok(Report {
            format: Format::Safetensors,
            object: crate::safetensors::from_bytes(bytes)?,
        });
    }
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(LEGACY_MAGIC) {
        let (format, object) = crate::archive::load_torch_save(bytes, registry)?;
        let format = match format {
            TorchSaveFormat::Zip => Format::TorchSaveZip,
            TorchSaveFormat::Legacy => Format::TorchSaveLegacy,
        };
        return Ok(Report { format, object });
    }
    Ok(Report {
        format: Format::Pickle,
        object: registry.loads(bytes)?,
    })
}

impl Report {
    /// The globals outside the allowlist and the calls recorded instead of
    /// made: empty unless the registry kept them as opaque nodes.
    pub fn opaque_summary(&self) -> OpaqueSummary {
        let mut summary = OpaqueSummary::default();
        let mut seen_globals = FxHashSet::default();
        for value in self.object.distinct() {
            let Value::Opaque(opaque) = value else {
                continue;
            };
            match &**opaque {
                Opaque::Global(global) => {
                    if seen_globals.insert(global.clone()) {
                        summary.globals.push(global.clone());
                    }
                }
                Opaque::Call(call) => {
                    summary.calls += 1;
                    summary.refused += usize::from(call.refused.is_some());
                }
            }
        }
        summary
    }
}

/// Up to `count` elements of `t` in logical order, when its bytes are here
/// (`inspect` shows [`HEAD_ELEMENTS`]).
pub fn head(t: &Tensor, count: usize) -> Option<Vec<Scalar>> {
    if matches!(t.dtype(), DType::Float4E2M1FnX2) {
        return None;
    }
    let elements = t.elements()?;
    elements
        .take(count)
        .map(|bytes| t.dtype().decode_element(bytes))
        .collect()
}
