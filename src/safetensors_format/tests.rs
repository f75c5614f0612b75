//! Tests that cut across reading and writing, and the state dicts and
//! lookups every test module of `safetensors` builds them with.

use super::{SafetensorsError, SafetensorsFile, looks_like_safetensors};
use crate::DType;
use crate::model::{Storage, Tensor, TensorView, Value};

/// The file of `state_dict`, as `safetensors::to_bytes` writes it.
pub(super) fn to_bytes(state_dict: &Value) -> Result<Vec<u8>, SafetensorsError> {
    SafetensorsFile::new(state_dict.clone()).to_bytes()
}

/// The tensors of a file, as `safetensors::from_bytes` reads them.
pub(super) fn from_bytes(bytes: &[u8]) -> Result<Value, SafetensorsError> {
    Ok(SafetensorsFile::from_bytes(bytes)?.tensors)
}

/// A contiguous tensor of `dtype` and `sizes` over a storage of `bytes`.
pub(super) fn tensor(dtype: DType, sizes: &[usize], bytes: Vec<u8>) -> Tensor {
    Tensor::new(
        Storage::from_vec(bytes),
        TensorView::contiguous(dtype, sizes),
    )
    .unwrap()
}

/// A `dict` of the named values, in order.
pub(super) fn dict(items: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        items
            .into_iter()
            .map(|(k, v)| (Value::Str(k.into()), v))
            .collect::<Vec<_>>()
            .into(),
    )
}

/// The names and tensors of a `dict` of `str` to `Tensor`, in order.
pub(super) fn items(value: &Value) -> Vec<(String, Tensor)> {
    let Value::Dict(items) = value else {
        panic!("a dict: {value:?}")
    };
    items
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_owned(),
                v.as_tensor().unwrap().clone(),
            )
        })
        .collect()
}

/// The tensor named `name` in a `dict` of `str` to `Tensor`.
pub(super) fn get(value: &Value, name: &str) -> Tensor {
    items(value)
        .into_iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .1
}

#[test]
fn packed_float4_doubles_the_last_dimension_as_safetensors_torch_does() {
    let state_dict = dict(vec![(
        "w",
        Value::Tensor(tensor(DType::Float4E2M1FnX2, &[2, 3], vec![0x21; 6])),
    )]);
    let file = to_bytes(&state_dict).unwrap();
    // What safetensors.torch.save writes for torch.float4_e2m1fn_x2 of shape (2, 3).
    assert!(String::from_utf8_lossy(&file).contains(r#""dtype":"F4","shape":[2,6]"#));
    let back = get(&from_bytes(&file).unwrap(), "w");
    assert_eq!(
        (back.dtype(), back.sizes()),
        (DType::Float4E2M1FnX2, &[2, 3][..])
    );

    let scalar = dict(vec![(
        "s",
        Value::Tensor(tensor(DType::Float4E2M1FnX2, &[], vec![0x21])),
    )]);
    let error = to_bytes(&scalar).unwrap_err();
    assert!(
        matches!(error, SafetensorsError::NoSafetensorsShape { .. }),
        "{error}"
    );
}

#[test]
fn metadata_is_read_and_written() {
    let t = Value::Tensor(tensor(DType::UInt8, &[2], vec![7, 8]));
    let mut file = SafetensorsFile::new(dict(vec![("t", t)]));
    assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));
    file.metadata.insert("note".to_owned(), "hello".to_owned());
    let read = SafetensorsFile::from_bytes(&file.to_bytes().unwrap()).unwrap();
    assert_eq!(read.metadata, file.metadata);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    file.save(&path).unwrap();
    let loaded = SafetensorsFile::load(&path).unwrap();
    assert_eq!(loaded.metadata, file.metadata);
    assert_eq!(
        get(&loaded.tensors, "t").storage().bytes(),
        Some(&[7u8, 8][..])
    );
    // Nothing left beside it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn an_empty_state_dict_and_empty_tensors_are_files_too() {
    let empty = from_bytes(&to_bytes(&dict(vec![])).unwrap()).unwrap();
    assert!(items(&empty).is_empty());
    let zero = dict(vec![(
        "z",
        Value::Tensor(tensor(DType::Float16, &[0, 4], vec![])),
    )]);
    let back = get(&from_bytes(&to_bytes(&zero).unwrap()).unwrap(), "z");
    assert_eq!(back.sizes(), &[0, 4]);
}

#[test]
fn only_safetensors_files_look_like_one() {
    let file = to_bytes(&dict(vec![])).unwrap();
    assert!(looks_like_safetensors(&file));
    assert!(!looks_like_safetensors(
        b"PK\x03\x04\x14\x00\x00\x00\x08\x00"
    ));
    assert!(!looks_like_safetensors(b"\x80\x02]q\x00(K\x01e."));
    assert!(!looks_like_safetensors(
        b"\x02\x00\x00\x00\x00\x00\x00\x00{"
    ));
}

#[test]
fn a_stream_reads_and_writes_what_bytes_do() {
    let value = dict(vec![
        (
            "a",
            tensor(DType::Float32, &[2], vec![0, 0, 128, 63, 0, 0, 0, 64]).into(),
        ),
        ("b", tensor(DType::UInt8, &[3], vec![1, 2, 3]).into()),
    ]);
    let mut written = Vec::new();
    SafetensorsFile::new(value.clone())
        .write(&mut written)
        .expect("written to a Vec");
    assert_eq!(written, to_bytes(&value).unwrap());
    // A reader that hands out a few bytes at a time, as a pipe does.
    let trickle = std::io::Read::chain(&written[..5], &written[5..]);
    let read = SafetensorsFile::read(trickle)
        .expect("read from a stream")
        .tensors;
    let contents = |value: &Value| -> Vec<(String, DType, Vec<usize>, Vec<u8>)> {
        items(value)
            .into_iter()
            .map(|(name, t)| {
                let bytes = t.storage().bytes().unwrap().to_vec();
                (name, t.dtype(), t.sizes().to_vec(), bytes)
            })
            .collect()
    };
    assert_eq!(contents(&read), contents(&value));
}

#[test]
fn a_stream_shorter_than_its_header_claims_is_a_read_error_not_an_allocation() {
    // A valid header claiming a tensor of 2^40 bytes, followed by 3 of them.
    let header =
        br#"{"t":{"dtype":"U8","shape":[1099511627776],"data_offsets":[0,1099511627776]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&[1, 2, 3]);
    let error = SafetensorsFile::read(file.as_slice()).unwrap_err();
    assert!(
        matches!(&error, SafetensorsError::Read { cause, .. }
            if cause.kind() == std::io::ErrorKind::UnexpectedEof),
        "{error}"
    );
    assert!(error.to_string().contains("the input"), "{error}");
}
