//! What goes wrong converting between a Rust type and a [`Value`], and
//! where in the value it went wrong.

use std::fmt::{self, Display};

use serde::de::{Expected, Unexpected};

use crate::model::Value;

/// A Rust value that has no Python form, or a [`Value`] that does not fit
/// the Rust type asked for: what went wrong ([`kind`](Self::kind)) and
/// where ([`path`](Self::path)).
///
/// Its message is the path, then what went wrong:
///
/// - `missing key 'label' in dict for struct Batch`
/// - `image: expected a Tensor, found str 'cat.png'`
/// - `batch[3].label: expected i64, found float 2.5`
/// - `names[1]: expected a string, found int 7`
/// - `weights key 'a': expected u32, found str 'a'` (a dict key that does
///   not fit the map's key type)
///
/// Like every error of tensorshare, it carries its cause in its message
/// and has no [`source`](std::error::Error::source).
#[derive(Clone, Debug)]
pub struct SerdeError {
    kind: SerdeErrorKind,
    /// Where, innermost first: each level adds its part as the error
    /// passes on its way out.
    path: Vec<PathSegment>,
}

/// What went wrong converting a Rust value to a [`Value`] or back; see
/// [`SerdeError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SerdeErrorKind {
    /// A dict lacks a key that a field of the struct needs.
    #[error("missing key '{key}'{}", in_struct(.owner))]
    MissingKey {
        /// The key, the field's name.
        key: &'static str,
        /// The struct it was looked up for, when known.
        owner: Option<&'static str>,
    },
    /// A dict has a key that the struct, with
    /// `#[serde(deny_unknown_fields)]`, has no field for.
    #[error("unknown key '{key}'{}, expected {}", in_struct(.owner), one_of(.expected))]
    UnknownKey {
        /// The key.
        key: String,
        /// The struct it was looked up for, when known.
        owner: Option<&'static str>,
        /// The keys the struct has.
        expected: &'static [&'static str],
    },
    /// A dict has the same key twice.
    #[error("duplicate key '{key}'{}", in_struct(.owner))]
    DuplicateKey {
        /// The key.
        key: &'static str,
        /// The struct it was looked up for, when known.
        owner: Option<&'static str>,
    },
    /// A `str` names no variant of the enum (or the one key of a one-key
    /// dict does).
    #[error("unknown variant '{variant}', expected {}", one_of(.expected))]
    UnknownVariant {
        /// What the value named.
        variant: String,
        /// The enum's variants.
        expected: &'static [&'static str],
    },
    /// A value of another type, or out of the type's range.
    #[error("expected {expected}, found {found}")]
    Mismatch {
        /// What the Rust type takes, in serde's words (`u32`, `a string`,
        /// `struct Batch`, `a Tensor`).
        expected: String,
        /// What the value is, in Python's words (`str 'cat.png'`,
        /// `int 300`, `list`).
        found: String,
    },
    /// A sequence of another length than a tuple or array takes.
    #[error("expected {expected}, found {found} items")]
    Length {
        /// What the Rust type takes (`a tuple of size 3`).
        expected: String,
        /// How many items the sequence has.
        found: usize,
    },
    /// A dict key Python cannot hash (a list, dict, set or bytearray):
    /// `pickle.loads` would fail on the dict.
    #[error("a dict key must be hashable in Python, found {found}")]
    UnhashableKey {
        /// The key's Python type.
        found: &'static str,
    },
    /// Containers nest deeper than `from_value` follows.
    #[error("containers nest deeper than {limit} levels")]
    TooDeep {
        /// The deepest nesting followed.
        limit: usize,
    },
    /// The value expands to more items than `from_value` copies out: a
    /// shared container (one Python object referenced from many places)
    /// is copied once per reference into the Rust value.
    #[error(
        "the value expands to more than {limit} items through shared references; \
         hold a shared part as a `Value` field to keep it shared"
    )]
    TooLarge {
        /// The most items copied out.
        limit: usize,
    },
    /// A message of the type's own `Serialize` or `Deserialize` code.
    #[error("{0}")]
    Custom(String),
}

fn in_struct(owner: &Option<&'static str>) -> String {
    owner.map_or_else(String::new, |name| format!(" in dict for struct {name}"))
}

fn one_of(names: &[&str]) -> String {
    match names {
        [] => "none".to_owned(),
        [name] => format!("'{name}'"),
        names => {
            let quoted: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
            format!("one of {}", quoted.join(", "))
        }
    }
}

/// One step of the way into a value.
#[derive(Clone, Debug)]
pub(crate) enum PathSegment {
    /// An item of a list, tuple or set.
    Index(usize),
    /// The value at a dict key (a struct field's too).
    Key(KeyText),
    /// A dict key itself.
    KeyItself(KeyText),
    /// The variant of an enum, the one key of its dict.
    Variant(&'static str),
}

/// A dict key, as a path shows it.
#[derive(Clone, Debug)]
pub(crate) enum KeyText {
    Str(String),
    Int(i64),
    /// A key of another type, by its type name.
    Other(&'static str),
}

impl KeyText {
    pub(crate) fn of(key: &Value) -> Self {
        match key {
            Value::Str(s) => KeyText::Str(s.to_string()),
            Value::Int(i) => KeyText::Int(*i),
            other => KeyText::Other(other.type_name()),
        }
    }
}

impl SerdeError {
    pub(crate) fn new(kind: SerdeErrorKind) -> Self {
        SerdeError {
            kind,
            path: Vec::new(),
        }
    }

    pub(crate) fn custom(message: impl Display) -> Self {
        SerdeError::new(SerdeErrorKind::Custom(message.to_string()))
    }

    /// `value` is not what `expected` takes.
    pub(crate) fn mismatch(expected: &dyn Expected, value: &Value) -> Self {
        SerdeError::new(SerdeErrorKind::Mismatch {
            expected: expected.to_string(),
            found: describe(value),
        })
    }

    /// What went wrong.
    pub fn kind(&self) -> &SerdeErrorKind {
        &self.kind
    }

    /// Where it went wrong, as the message shows it: dict keys as `.name`
    /// (or `['some key']`, `[3]` when not a name), items as `[3]`; empty at
    /// the top.
    pub fn path(&self) -> String {
        let mut path = String::new();
        for segment in self.path.iter().rev() {
            match segment {
                PathSegment::Index(index) => path.push_str(&format!("[{index}]")),
                PathSegment::Key(key) => push_key(&mut path, key),
                PathSegment::Variant(name) => push_key(&mut path, &KeyText::Str((*name).into())),
                PathSegment::KeyItself(key) => {
                    if !path.is_empty() {
                        path.push(' ');
                    }
                    path.push_str("key ");
                    match key {
                        KeyText::Str(s) => path.push_str(&quoted(s)),
                        KeyText::Int(i) => path.push_str(&i.to_string()),
                        KeyText::Other(type_name) => path.push_str(type_name),
                    }
                }
            }
        }
        path
    }

    /// This error, having happened at `segment` of the value one level up.
    pub(crate) fn at(mut self, segment: PathSegment) -> Self {
        self.path.push(segment);
        self
    }

    /// Whether the error is about the value at this level, not one inside it.
    fn is_here(&self) -> bool {
        self.path.is_empty()
    }

    /// Whether this is a struct's refusal of the key just read, whose
    /// message names the key already.
    pub(crate) fn names_its_key(&self) -> bool {
        self.is_here() && matches!(self.kind, SerdeErrorKind::UnknownKey { .. })
    }

    /// A mismatch about the value at this level describes it as it is:
    /// serde's visitors only see what they were handed
    /// (`Unexpected::Map` for a tensor passed through).
    pub(crate) fn found_here(mut self, value: &Value) -> Self {
        if self.is_here()
            && let SerdeErrorKind::Mismatch { found, .. } = &mut self.kind
        {
            *found = describe(value);
        }
        self
    }

    /// A key error about the dict at this level names the struct it was
    /// read for.
    pub(crate) fn in_struct(mut self, name: &'static str) -> Self {
        if self.is_here() {
            match &mut self.kind {
                SerdeErrorKind::MissingKey { owner, .. }
                | SerdeErrorKind::UnknownKey { owner, .. }
                | SerdeErrorKind::DuplicateKey { owner, .. } => {
                    owner.get_or_insert(name);
                }
                _ => {}
            }
        }
        self
    }
}

fn push_key(path: &mut String, key: &KeyText) {
    match key {
        KeyText::Str(name) if is_identifier(name) => {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(name);
        }
        KeyText::Str(text) => path.push_str(&format!("[{}]", quoted(text))),
        KeyText::Int(i) => path.push_str(&format!("[{i}]")),
        KeyText::Other(type_name) => path.push_str(&format!("[<{type_name}>]")),
    }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// `text` as Python's repr writes a `str`, cut at 40 characters.
fn quoted(text: &str) -> String {
    const SHOWN: usize = 40;
    let mut out = String::from("'");
    for (i, c) in text.chars().enumerate() {
        if i == SHOWN {
            out.push_str("...");
            break;
        }
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&c.escape_default().to_string()),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A value as an error shows it: scalars with their value (`int 300`,
/// `str 'cat'`), everything else by its Python type.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::None => "None".to_owned(),
        Value::Bool(b) => format!("bool {}", if *b { "True" } else { "False" }),
        Value::Int(i) => format!("int {i}"),
        Value::BigInt(bytes) => format!("int of {} bits", bytes.len() * 8),
        Value::Float(f) => format!("float {f:?}"),
        Value::Str(s) => format!("str {}", quoted(s)),
        other => other.type_name().to_owned(),
    }
}

/// What serde's visitors report, in Python's words.
fn describe_unexpected(unexpected: &Unexpected<'_>) -> String {
    match unexpected {
        Unexpected::Bool(b) => format!("bool {}", if *b { "True" } else { "False" }),
        Unexpected::Unsigned(i) => format!("int {i}"),
        Unexpected::Signed(i) => format!("int {i}"),
        Unexpected::Float(f) => format!("float {f:?}"),
        Unexpected::Char(c) => format!("str {}", quoted(&c.to_string())),
        Unexpected::Str(s) => format!("str {}", quoted(s)),
        Unexpected::Bytes(_) => "bytes".to_owned(),
        Unexpected::Unit | Unexpected::Option => "None".to_owned(),
        Unexpected::Seq => "list".to_owned(),
        Unexpected::Map => "dict".to_owned(),
        Unexpected::Enum => "enum".to_owned(),
        Unexpected::UnitVariant
        | Unexpected::NewtypeVariant
        | Unexpected::TupleVariant
        | Unexpected::StructVariant => "enum variant".to_owned(),
        Unexpected::NewtypeStruct => "newtype struct".to_owned(),
        Unexpected::Other(other) => (*other).to_owned(),
    }
}

impl Display for SerdeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path();
        if path.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{path}: {}", self.kind)
        }
    }
}

impl std::error::Error for SerdeError {}

impl serde::ser::Error for SerdeError {
    fn custom<T: Display>(message: T) -> Self {
        SerdeError::custom(message)
    }
}

impl serde::de::Error for SerdeError {
    fn custom<T: Display>(message: T) -> Self {
        SerdeError::custom(message)
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        SerdeError::new(SerdeErrorKind::Mismatch {
            expected: expected.to_string(),
            found: describe_unexpected(&unexpected),
        })
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Self::invalid_type(unexpected, expected)
    }

    fn invalid_length(len: usize, expected: &dyn Expected) -> Self {
        SerdeError::new(SerdeErrorKind::Length {
            expected: expected.to_string(),
            found: len,
        })
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        SerdeError::new(SerdeErrorKind::UnknownVariant {
            variant: variant.to_owned(),
            expected,
        })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        SerdeError::new(SerdeErrorKind::UnknownKey {
            key: field.to_owned(),
            owner: None,
            expected,
        })
    }

    fn missing_field(field: &'static str) -> Self {
        SerdeError::new(SerdeErrorKind::MissingKey {
            key: field,
            owner: None,
        })
    }

    fn duplicate_field(field: &'static str) -> Self {
        SerdeError::new(SerdeErrorKind::DuplicateKey {
            key: field,
            owner: None,
        })
    }
}
