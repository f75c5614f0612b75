//! Why a value is not what the reader asked for, and where in the message.

use std::fmt;

use super::Value;
use super::display::StrRepr;

/// Why a [`Value`] could not be read as a Rust type: what was expected,
/// what was found instead, and where, as a Python subscript from the value
/// the reading started at (`['batch'][0]`).
///
/// # Examples
///
/// ```
/// use tensorshare::{Dict, Tensor, Value};
///
/// let message = Value::from(Dict::new().with("image", "not a tensor"));
/// let error = message.try_get::<&Tensor>("image").unwrap_err();
/// assert_eq!(error.to_string(), "expected a Tensor at ['image'], found a str");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueAccessError {
    /// The value is of another Python type.
    #[error(
        "expected {}{}, found {}",
        with_article(expected),
        At(path),
        with_article(found)
    )]
    WrongType {
        /// The Python type expected (`Tensor`, `int`, `dict`, ...).
        expected: &'static str,
        /// The Python type found ([`Value::type_name`]).
        found: &'static str,
        /// Where the value is.
        path: Vec<PathSegment>,
    },
    /// A tuple or list of another length.
    #[error(
        "expected {} of {expected_len} items{}, found one of {found_len}",
        with_article(expected),
        At(path)
    )]
    WrongLength {
        /// The Python type expected (`tuple`).
        expected: &'static str,
        /// The number of items expected.
        expected_len: usize,
        /// The number found.
        found_len: usize,
        /// Where the value is.
        path: Vec<PathSegment>,
    },
    /// An int out of the Rust type's range.
    #[error("expected an int that fits in {target}{}, found {value}", At(path))]
    OutOfRange {
        /// The Rust type (`u8`, `i64`, ...).
        target: &'static str,
        /// The int found, in decimal (or its size, when too large to print).
        value: String,
        /// Where the value is.
        path: Vec<PathSegment>,
    },
    /// A dict without the key asked for.
    #[error("no key {key} in the {container}{}", At(path))]
    MissingKey {
        /// The key, as Python writes it (`'image'`).
        key: String,
        /// The dict's Python type (`dict`, `OrderedDict`).
        container: &'static str,
        /// Where the dict is.
        path: Vec<PathSegment>,
    },
}

/// One step into a value: a dict's key or a sequence's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// A dict item, by its key as Python writes it: `'image'`, `3`,
    /// `None`; a key of another type by its type (`<tuple>`).
    Key(String),
    /// A tuple or list item, by its index.
    Index(usize),
}

impl fmt::Display for PathSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathSegment::Key(key) => write!(f, "[{key}]"),
            PathSegment::Index(index) => write!(f, "[{index}]"),
        }
    }
}

impl PathSegment {
    /// The segment of a dict item under `key`.
    pub(crate) fn key(key: &Value) -> PathSegment {
        PathSegment::Key(key_repr(key))
    }
}

impl ValueAccessError {
    /// Where the value is, from the value the reading started at.
    pub fn path(&self) -> &[PathSegment] {
        match self {
            ValueAccessError::WrongType { path, .. }
            | ValueAccessError::WrongLength { path, .. }
            | ValueAccessError::OutOfRange { path, .. }
            | ValueAccessError::MissingKey { path, .. } => path,
        }
    }

    /// The same error, for a value found at `segment` of its container.
    pub(crate) fn within(mut self, segment: PathSegment) -> Self {
        match &mut self {
            ValueAccessError::WrongType { path, .. }
            | ValueAccessError::WrongLength { path, .. }
            | ValueAccessError::OutOfRange { path, .. }
            | ValueAccessError::MissingKey { path, .. } => path.insert(0, segment),
        }
        self
    }

    /// `value` is not a `expected`.
    pub(crate) fn wrong_type(expected: &'static str, value: &Value) -> Self {
        ValueAccessError::WrongType {
            expected,
            found: value.type_name(),
            path: Vec::new(),
        }
    }
}

/// Reading a value as itself never fails.
impl From<std::convert::Infallible> for ValueAccessError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

/// A key as Python's `repr` writes it, for the scalar keys messages use.
pub(crate) fn key_repr(key: &Value) -> String {
    match key {
        Value::Str(_) | Value::Int(_) | Value::Bool(_) | Value::None | Value::Float(_) => {
            key.to_string()
        }
        other => format!("<{}>", other.type_name()),
    }
}

/// A str as Python's `repr` writes it.
pub(crate) fn str_repr(s: &str) -> String {
    StrRepr(s).to_string()
}

/// A path, as a subscript after " at ", or nothing for the value itself.
struct At<'a>(&'a [PathSegment]);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        f.write_str(" at ")?;
        self.0.iter().try_for_each(|segment| segment.fmt(f))
    }
}

/// A Python type name with its article: `a str`, `an int`, `None`.
fn with_article(type_name: &str) -> String {
    match type_name {
        "NoneType" => "None".into(),
        name if name.starts_with(['a', 'e', 'i', 'o', 'u', 'O', 'U']) => format!("an {name}"),
        name => format!("a {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_was_expected_found_and_where() {
        let error = ValueAccessError::wrong_type("Tensor", &Value::from("x"))
            .within(PathSegment::Key(str_repr("image")))
            .within(PathSegment::Index(0))
            .within(PathSegment::Key(str_repr("batch")));
        assert_eq!(
            error.to_string(),
            "expected a Tensor at ['batch'][0]['image'], found a str"
        );
        assert_eq!(error.path().len(), 3);
        assert_eq!(
            ValueAccessError::wrong_type("int", &Value::None).to_string(),
            "expected an int, found None"
        );
        assert_eq!(
            ValueAccessError::wrong_type("dict", &Value::from(vec![1])).to_string(),
            "expected a dict, found a list"
        );
    }

    #[test]
    fn keys_read_as_python_writes_them() {
        assert_eq!(key_repr(&Value::from("it's")), r#""it's""#);
        assert_eq!(key_repr(&Value::from(r#"it's "so""#)), r#"'it\'s "so"'"#);
        assert_eq!(key_repr(&Value::from("a\nb\\")), r"'a\nb\\'");
        assert_eq!(key_repr(&Value::from(3)), "3");
        assert_eq!(key_repr(&Value::from(true)), "True");
        assert_eq!(key_repr(&Value::from((1, 2))), "<tuple>");
    }
}
