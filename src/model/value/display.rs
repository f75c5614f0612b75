//! A value as Python's `print` shows it: `repr` of its containers and
//! scalars, and tensors by dtype, shape and first elements.

use std::fmt::{self, Write};

use tensorshare_compat::dtype::Scalar;

use super::{Opaque, Value};
use crate::DType;
use crate::model::Tensor;

/// How many elements of a tensor are shown before `...`.
const SHOWN_ELEMENTS: usize = 6;

/// How deep containers are shown before `...`: deeper than any message
/// the registry rebuilds by default, shallow enough for any stack.
const SHOWN_DEPTH: usize = 256;

/// What Python's `print(obj)` shows, near enough: `{'weight':
/// tensor([0.5, -1.0], dtype=torch.float32, shape=[2]), 'step': 3}`.
///
/// Containers, strs, bytes, numbers, `True`, `False` and `None` print as
/// their `repr` does (an `OrderedDict` as Python 3.12 writes it); a tensor
/// prints its first elements (those in this process), dtype and shape; a
/// storage its kind and size; what the registry did not rebuild its
/// global.
///
/// # Examples
///
/// ```
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// let weight = Tensor::from_slice(&StrategyKind::Bytes, &[0.5f32, -1.0], &[2])?;
/// let state = Value::from(Dict::new().with("weight", weight).with("step", 3));
/// assert_eq!(
///     state.to_string(),
///     "{'weight': tensor([0.5, -1.0], dtype=torch.float32, shape=[2]), 'step': 3}",
/// );
/// assert_eq!(Value::from((1.0, "it's", None::<i64>)).to_string(), "(1.0, \"it's\", None)");
/// # Ok::<(), tensorshare::Error>(())
/// ```
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_value(f, self, 0)
    }
}

/// As a [`Value`] shows it: its first elements (those in this process),
/// dtype and shape.
///
/// # Examples
///
/// ```
/// use tensorshare::{StrategyKind, Tensor};
///
/// let ids = Tensor::from_slice(&StrategyKind::Bytes, &[3i64, 1, 4], &[3])?;
/// assert_eq!(format!("{ids}"), "tensor([3, 1, 4], dtype=torch.int64, shape=[3])");
/// # Ok::<(), tensorshare::Error>(())
/// ```
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_tensor(f, self)
    }
}

fn write_value(f: &mut fmt::Formatter<'_>, value: &Value, depth: usize) -> fmt::Result {
    if depth > SHOWN_DEPTH {
        return f.write_str("...");
    }
    let depth = depth + 1;
    match value {
        Value::None => f.write_str("None"),
        Value::Bool(true) => f.write_str("True"),
        Value::Bool(false) => f.write_str("False"),
        Value::Int(i) => write!(f, "{i}"),
        Value::BigInt(bytes) => write_big_int(f, bytes),
        Value::Float(x) => f.write_str(&float_repr(DType::Float64, *x)),
        Value::Str(s) => write_str_repr(f, s),
        Value::Bytes(bytes) => write_bytes_repr(f, bytes),
        Value::ByteArray(bytes) => {
            f.write_str("bytearray(")?;
            write_bytes_repr(f, bytes)?;
            f.write_char(')')
        }
        Value::Tuple(items) => {
            f.write_char('(')?;
            write_items(f, items, depth)?;
            f.write_str(if items.len() == 1 { ",)" } else { ")" })
        }
        Value::List(items) => {
            f.write_char('[')?;
            write_items(f, items, depth)?;
            f.write_char(']')
        }
        Value::Dict(pairs) => write_pairs(f, pairs, depth),
        Value::OrderedDict(pairs, _) => {
            f.write_str("OrderedDict(")?;
            if !pairs.is_empty() {
                write_pairs(f, pairs, depth)?;
            }
            f.write_char(')')
        }
        Value::Set(items) | Value::FrozenSet(items) => {
            let frozen = matches!(value, Value::FrozenSet(_));
            match (frozen, items.is_empty()) {
                (false, true) => f.write_str("set()"),
                (true, true) => f.write_str("frozenset()"),
                (false, false) => write_set(f, items, depth),
                (true, false) => {
                    f.write_str("frozenset(")?;
                    write_set(f, items, depth)?;
                    f.write_char(')')
                }
            }
        }
        Value::Tensor(tensor) => write_tensor(f, tensor),
        Value::Storage(storage) => {
            write!(
                f,
                "UntypedStorage(nbytes={}, {})",
                storage.nbytes(),
                storage.kind()
            )
        }
        Value::TypedStorage(storage, dtype) => write!(
            f,
            "TypedStorage(dtype=torch.{dtype}, nbytes={}, {})",
            storage.nbytes(),
            storage.kind()
        ),
        Value::DType(dtype) => write!(f, "torch.{dtype}"),
        Value::Size(sizes) => write!(f, "torch.Size({sizes:?})"),
        Value::Global(global) => write!(f, "<{global}>"),
        Value::Callable(callable) => write!(f, "<{}>", callable.name()),
        Value::Custom(custom) => write!(f, "<{} object>", custom.global),
        Value::Opaque(opaque) => match &**opaque {
            Opaque::Global(global) => write!(f, "<{global}, not allowed>"),
            Opaque::Call(call) => {
                write_value(f, &call.callee, depth)?;
                f.write_char('(')?;
                write_items(f, &call.args, depth)?;
                f.write_str(", not called)")
            }
        },
    }
}

fn write_items(f: &mut fmt::Formatter<'_>, items: &[Value], depth: usize) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_value(f, item, depth)?;
    }
    Ok(())
}

fn write_set(f: &mut fmt::Formatter<'_>, items: &[Value], depth: usize) -> fmt::Result {
    f.write_char('{')?;
    write_items(f, items, depth)?;
    f.write_char('}')
}

fn write_pairs(f: &mut fmt::Formatter<'_>, pairs: &[(Value, Value)], depth: usize) -> fmt::Result {
    f.write_char('{')?;
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_value(f, key, depth)?;
        f.write_str(": ")?;
        write_value(f, value, depth)?;
    }
    f.write_char('}')
}

/// `tensor([1.0, 2.0, ...], dtype=torch.float32, shape=[2, 3])`, without
/// the elements when its bytes are not in this process.
fn write_tensor(f: &mut fmt::Formatter<'_>, tensor: &Tensor) -> fmt::Result {
    let dtype = tensor.dtype();
    f.write_str("tensor(")?;
    let elements = tensor.elements().filter(|_| dtype != DType::Float4E2M1FnX2);
    if let Some(elements) = elements {
        f.write_char('[')?;
        for (i, bytes) in elements.enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if i == SHOWN_ELEMENTS {
                f.write_str("...")?;
                break;
            }
            match dtype.decode_element(bytes) {
                Some(scalar) => write_scalar(f, dtype, scalar)?,
                None => f.write_char('?')?,
            }
        }
        f.write_str("], ")?;
    }
    write!(f, "dtype=torch.{dtype}, shape={:?})", tensor.sizes())
}

fn write_scalar(f: &mut fmt::Formatter<'_>, dtype: DType, scalar: Scalar) -> fmt::Result {
    match scalar {
        Scalar::Bool(b) => f.write_str(if b { "True" } else { "False" }),
        Scalar::Int(i) => write!(f, "{i}"),
        Scalar::UInt(u) => write!(f, "{u}"),
        Scalar::Float(x) => f.write_str(&float_repr(dtype, x)),
        Scalar::Complex(re, im) => {
            let part = |x: f64| dtype.shortest_decimal(x);
            let sign = if im.is_sign_negative() { "-" } else { "+" };
            write!(f, "({}{sign}{}j)", part(re), part(im.abs()))
        }
        Scalar::PackedFloat4(low, high) => {
            write!(
                f,
                "({}, {})",
                float_repr(dtype, low),
                float_repr(dtype, high)
            )
        }
    }
}

/// `x` as Python's `repr` writes a float: the shortest decimal that reads
/// back as the element, with `.0` when it is whole and a signed exponent
/// of two digits at least (`1e-07`, `1e+16`).
fn float_repr(dtype: DType, x: f64) -> String {
    let shortest = dtype.shortest_decimal(x);
    match shortest.split_once('e') {
        Some((mantissa, exponent)) => {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None if x.is_finite() && !shortest.contains('.') => shortest + ".0",
        None => shortest,
    }
}

/// A str as Python's `repr` writes it, for messages that quote one (a key
/// not found, a path into a value).
pub(crate) struct StrRepr<'a>(pub(crate) &'a str);

impl fmt::Display for StrRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_str_repr(f, self.0)
    }
}

/// A str as Python's `repr` writes it: in single quotes, or double quotes
/// when it holds a single quote and no double one.
fn write_str_repr(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    f.write_char(quote)?;
    for c in s.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if c == quote => write!(f, "\\{c}")?,
            c if (c as u32) < 0x20 || c == '\x7f' => write!(f, "\\x{:02x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char(quote)
}

/// Bytes as Python's `repr` writes them: `b'...'`, printable ASCII as it
/// is and the rest escaped.
fn write_bytes_repr(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    let quote = if bytes.contains(&b'\'') && !bytes.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    write!(f, "b{quote}")?;
    for &b in bytes {
        match b {
            b'\\' => f.write_str("\\\\")?,
            b'\n' => f.write_str("\\n")?,
            b'\r' => f.write_str("\\r")?,
            b'\t' => f.write_str("\\t")?,
            b if char::from(b) == quote => write!(f, "\\{quote}")?,
            0x20..0x7f => f.write_char(char::from(b))?,
            b => write!(f, "\\x{b:02x}")?,
        }
    }
    f.write_char(quote)
}

/// A pickled long (little-endian two's complement) in decimal.
fn write_big_int(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    if bytes.len() <= 16 {
        let fill = if bytes.last().is_some_and(|b| b & 0x80 != 0) {
            0xff
        } else {
            0
        };
        let mut wide = [fill; 16];
        wide[..bytes.len()].copy_from_slice(bytes);
        return write!(f, "{}", i128::from_le_bytes(wide));
    }
    // Decimal digits of a longer one take a bignum; its size is what a
    // reader can use.
    write!(f, "<int of {} bytes>", bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dict, StrategyKind};

    #[test]
    fn scalars_print_as_python_repr() {
        let cases: [(Value, &str); 14] = [
            (Value::None, "None"),
            (Value::Bool(true), "True"),
            (Value::Int(-3), "-3"),
            (Value::Float(1.0), "1.0"),
            (Value::Float(0.1), "0.1"),
            (Value::Float(1e-7), "1e-07"),
            (Value::Float(1e16), "1e+16"),
            (Value::Float(f64::NAN), "nan"),
            (Value::Float(f64::NEG_INFINITY), "-inf"),
            (Value::Str("a'b".into()), "\"a'b\""),
            (Value::Str("a'\"\n".into()), "'a\\'\"\\n'"),
            (Value::Bytes(b"a\x00'".to_vec().into()), "b\"a\\x00'\""),
            (
                Value::BigInt(vec![0x00, 0x00, 0x00, 0x80, 0xff].into()),
                "-2147483648",
            ),
            (Value::BigInt(vec![1; 20].into()), "<int of 20 bytes>"),
        ];
        for (value, printed) in cases {
            assert_eq!(value.to_string(), printed, "{value:?}");
        }
    }

    #[test]
    fn containers_print_as_python_repr() {
        let one = Value::Tuple(vec![Value::Int(1)].into());
        assert_eq!(one.to_string(), "(1,)");
        assert_eq!(Value::Tuple(Vec::new().into()).to_string(), "()");
        assert_eq!(Value::Set(Vec::new().into()).to_string(), "set()");
        assert_eq!(
            Value::FrozenSet(vec![Value::Int(2)].into()).to_string(),
            "frozenset({2})"
        );
        let ordered = Dict::new().with("a", 1).into_ordered_dict();
        assert_eq!(ordered.to_string(), "OrderedDict({'a': 1})");
        assert_eq!(
            Value::OrderedDict(Vec::new().into(), Default::default()).to_string(),
            "OrderedDict()"
        );
        let nested = Value::List(vec![one, Value::from(Dict::new().with(1, "x"))].into());
        assert_eq!(nested.to_string(), "[(1,), {1: 'x'}]");
    }

    #[test]
    fn a_tensor_prints_its_first_elements_dtype_and_shape() {
        let t = Tensor::from_slice(&StrategyKind::Bytes, &[1i64, 2, 3, 4, 5, 6, 7, 8], &[2, 4])
            .expect("a tensor");
        assert_eq!(
            Value::from(t).to_string(),
            "tensor([1, 2, 3, 4, 5, 6, ...], dtype=torch.int64, shape=[2, 4])"
        );
        let halves = Tensor::from_slice(&StrategyKind::Bytes, &[half::f16::from_f32(0.1)], &[1])
            .expect("a tensor");
        assert_eq!(
            Value::from(halves).to_string(),
            "tensor([0.1], dtype=torch.float16, shape=[1])"
        );
    }

    #[test]
    fn nesting_past_the_shown_depth_prints_dots_not_a_stack_overflow() {
        let mut value = Value::None;
        for _ in 0..100_000 {
            value = Value::List(vec![value].into());
        }
        let shown = SHOWN_DEPTH + 1;
        let expected = format!("{}...{}", "[".repeat(shown), "]".repeat(shown));
        assert_eq!(value.to_string(), expected);
        // Dropping a value this deep is recursive too: take it apart from the top.
        while let Value::List(items) = value {
            value = items.first().cloned().unwrap_or(Value::None);
        }
    }
}
