//! Rust types as Python objects, through serde: a `#[derive(Serialize)]`
//! struct becomes the dict torch code expects ([`to_value`]), and a dict
//! a torch process sent becomes a `#[derive(Deserialize)]` struct
//! ([`from_value`]). Tensors, storages and [`Value`]s pass through whole,
//! uncopied. This layer needs only the model.

mod de;
mod error;
mod passed;
mod ser;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use error::{SerdeError, SerdeErrorKind};

use crate::model::Value;

/// A Rust value as the Python object torch code expects: a struct becomes
/// a dict keyed by its field names, a [`Tensor`](crate::Tensor) field the
/// tensor itself.
///
/// Send the result with [`Connection::send`](crate::Connection::send),
/// pickle it with [`SharingContext::dumps`](crate::SharingContext::dumps)
/// or save it with [`torch_save::to_bytes`](crate::torch_save::to_bytes).
///
/// | Rust (serde's data model) | Python |
/// |---|---|
/// | `bool` | `bool` |
/// | integers, `i128` and `u128` included | `int` |
/// | `f32`, `f64` | `float` (an `f32` widened exactly) |
/// | `char`, `str`, `String` | `str` |
/// | bytes (a `serde_bytes` field, `serde_bytes::ByteBuf`) | `bytes` |
/// | `Vec<u8>`, `[u8; N]` | a list of ints, as serde sees a sequence |
/// | `None`, `()`, a unit struct | `None` |
/// | `Some(x)` | `x` (so `Some(None)` is `None`) |
/// | `Vec`, slices, sets, other sequences | `list` |
/// | tuples, tuple structs | `tuple` |
/// | a struct | `dict`, field names as `str` keys, in declaration order |
/// | a map (`HashMap`, `BTreeMap`, ...) | `dict`, in the map's order |
/// | a newtype struct | its content |
/// | a unit variant | `str`: the variant's name |
/// | other variants | `{'Variant': content}`, content a tuple for a tuple variant and a dict for a struct variant (serde's default, externally tagged; `#[serde(tag = "...")]` and `untagged` give serde's other forms) |
/// | [`Tensor`](crate::Tensor) | `torch.Tensor` (or `Parameter`): the same tensor, not copied |
/// | [`Storage`](crate::model::Storage) | `torch.UntypedStorage` |
/// | [`Value`] | itself |
///
/// A tensor (or storage, or `Value`) serializes into a `Value` and nothing
/// else: `serde_json::to_string` of a struct holding one fails, saying to
/// convert it first. A tensor's elements are no serde data, and copying
/// them into nested lists would lose its dtype and cost a copy.
///
/// # Errors
///
/// [`SerdeErrorKind::UnhashableKey`] for a map key Python cannot hash (a
/// list, dict, set or bytearray: the dict would not unpickle), and any
/// error of the type's own `Serialize` code, each with the path to where
/// it happened.
///
/// # Examples
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tensorshare::{StrategyKind, Tensor, Value};
///
/// #[derive(Serialize, Deserialize)]
/// struct Batch {
///     image: Tensor,
///     label: i64,
///     names: Vec<String>,
/// }
///
/// let image = Tensor::from_slice(&StrategyKind::Bytes, &[0.0f32; 6], &[2, 3])?;
/// let batch = Batch { image, label: 7, names: vec!["cat".into()] };
///
/// // What torch receives: {'image': tensor(...), 'label': 7, 'names': ['cat']}
/// let value = tensorshare::to_value(&batch)?;
/// let pairs = value.as_dict().expect("a dict");
/// let keys: Vec<_> = pairs.iter().filter_map(|(key, _)| key.as_str()).collect();
/// assert_eq!(keys, ["image", "label", "names"]);
/// assert!(pairs[0].1.as_tensor().unwrap().same_as(&batch.image));
/// # Ok::<(), tensorshare::Error>(())
/// ```
///
/// The struct can also derive through tensorshare's own serde, with no
/// serde dependency of its own:
///
/// ```
/// use tensorshare::serde::Serialize;
///
/// #[derive(Serialize)]
/// #[serde(crate = "tensorshare::serde")]
/// struct Step {
///     epoch: u32,
/// }
///
/// let value = tensorshare::to_value(&Step { epoch: 3 }).unwrap();
/// assert_eq!(value.type_name(), "dict");
/// ```
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, SerdeError> {
    value.serialize(ser::ValueSerializer)
}

/// A Python object, such as the dict a torch process sent, read as a Rust
/// type: a struct from a dict keyed by its field names.
///
/// Reads what [`to_value`] writes, and what else Python holds that fits:
///
/// - an integer type from any `int` in its range, `i128`, `u64` and
///   `u128` from ints past 64 bits too; `f32` and `f64` from `float` or
///   `int`;
/// - `char` and strings from `str`; bytes (`serde_bytes`) from `bytes` or
///   `bytearray`;
/// - sequences (`Vec`, sets, arrays, tuples) from `list`, `tuple`, `set`,
///   `frozenset` or `torch.Size`, and from `bytes` and `bytearray`, whose
///   items are ints; a tuple or array needs exactly its length;
/// - structs and maps from `dict` or `collections.OrderedDict`; keys the
///   struct has no field for are ignored (unless
///   `#[serde(deny_unknown_fields)]`), and a missing one is an error
///   naming it, unless the field is an `Option` or `#[serde(default)]`;
/// - `Option` from `None` or the value; `()` and unit structs from `None`;
/// - an enum from a `str` (a unit variant) or a one-key dict
///   `{'Variant': content}`;
/// - [`Tensor`](crate::Tensor) from a `torch.Tensor` or `Parameter`;
///   [`Storage`](crate::model::Storage) from an untyped or typed storage;
///   [`Value`] from anything, whole and still shared. A `Value` field
///   keeps any part of a message as it came (a dtype, a tuple, a nested
///   dict whose shape varies).
///
/// `&str` and `&[u8]` fields borrow from `value`. `#[serde(flatten)]`
/// fields and untagged enums work, tensors inside them too; a `Value`
/// read through them is rebuilt from serde's copy of the data, so it holds
/// lists where the Python object had tuples.
///
/// A Python object can hold one list in many places (a pickle keeps it
/// one object); a Rust value holds a copy in each. Past a million items,
/// `from_value` reads at most 16 per value of the graph (each shared one
/// counted once), and follows containers 128 levels deep.
///
/// # Errors
///
/// A [`SerdeError`] whose message gives the path to what does not fit
/// and why: `missing key 'label' in dict for struct Batch`,
/// `image: expected a Tensor, found str 'cat.png'`,
/// `items[3].label: expected i64, found float 2.5`.
///
/// # Examples
///
/// ```
/// use serde::Deserialize;
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// #[derive(Deserialize)]
/// struct Reply {
///     loss: f64,
///     logits: Tensor,
///     note: Option<String>,
/// }
///
/// let logits = Tensor::from_slice(&StrategyKind::Bytes, &[0.0f32, 0.0], &[2])?;
/// // What a torch process sends as {'loss': 0.25, 'logits': tensor([0., 0.])}
/// let sent = Value::from(Dict::new().with("loss", 0.25).with("logits", &logits));
/// let reply: Reply = tensorshare::from_value(&sent)?;
/// assert_eq!(reply.loss, 0.25);
/// assert!(reply.logits.same_as(&logits));
/// assert_eq!(reply.note, None);
///
/// #[derive(Debug, Deserialize)]
/// struct Batch {
///     label: Tensor,
/// }
/// let error = tensorshare::from_value::<Batch>(&sent).unwrap_err();
/// assert_eq!(error.to_string(), "missing key 'label' in dict for struct Batch");
/// # Ok::<(), tensorshare::Error>(())
/// ```
pub fn from_value<'a, T: Deserialize<'a>>(value: &'a Value) -> Result<T, SerdeError> {
    let _registrations = passed::Registrations::begin();
    let budget = de::Budget::new(value);
    T::deserialize(de::ValueDeserializer::root(&budget))
}
