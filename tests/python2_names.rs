//! Pickles of protocols 0-2 name `set`, `frozenset`, `bytearray` and empty
//! `bytes` under Python 2's `__builtin__`; the registry rebuilds them as
//! CPython does, and refuses those names from protocol 3 on, as CPython
//! does. The fixtures are CPython's own, written by
//! `compat/python/generate_python2_name_fixtures.py`.

use std::path::PathBuf;

use serde_json::{Value as Json, json};

use tensorshare::registry::RebuildError;
use tensorshare::torch_save;
use tensorshare::{DType, Error, Registry, Value};
use tensorshare_compat::pickle::Global;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("compat/tests/data/python2_names")
}

fn expected() -> Json {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A rebuilt value in the JSON shape the generator renders CPython's in.
fn render(value: &Value) -> Json {
    let all = |items: &[Value]| items.iter().map(render).collect::<Vec<_>>();
    let pairs = |pairs: &[(Value, Value)]| {
        pairs
            .iter()
            .map(|(key, value)| json!([render(key), render(value)]))
            .collect::<Vec<_>>()
    };
    match value {
        Value::None => Json::Null,
        Value::Bool(value) => json!(value),
        Value::Int(value) => json!(value),
        Value::Str(value) => json!(&**value),
        Value::Bytes(bytes) => json!({ "bytes": hex(bytes) }),
        Value::ByteArray(bytes) => json!({ "bytearray": hex(bytes) }),
        Value::List(items) => Json::Array(all(items)),
        Value::Tuple(items) => json!({ "tuple": all(items) }),
        Value::Set(items) => json!({ "set": all(items) }),
        Value::FrozenSet(items) => json!({ "frozenset": all(items) }),
        Value::Dict(items) => json!({ "dict": pairs(items) }),
        Value::OrderedDict(items, _) => json!({ "ordered_dict": pairs(items) }),
        Value::Global(global) => json!({ "global": [global.module, global.name] }),
        other => panic!("unexpected value {other:?}"),
    }
}

#[test]
fn cpython_pickles_of_every_protocol_rebuild_as_cpython_loads_them() {
    let expected = expected();
    let pickles = expected["pickles"].as_object().unwrap();
    assert_eq!(pickles.len(), 60);
    let registry = Registry::default();
    for (file, value) in pickles {
        let bytes = std::fs::read(fixtures().join(file)).unwrap();
        let rebuilt = registry
            .loads(&bytes)
            .unwrap_or_else(|err| panic!("{file}: {err}"));
        assert_eq!(&render(&rebuilt), value, "{file}");
    }
}

#[test]
fn python2_names_are_read_only_below_protocol_3_as_in_cpython() {
    let expected = expected();
    let mut registry = Registry::default();
    // What copy_reg._reconstructor reads as, without allowing the call.
    registry.register_constant(
        "copyreg",
        "_reconstructor",
        Value::Global(Global::new("copyreg", "_reconstructor")),
    );
    let cases = expected["by_hand"].as_object().unwrap();
    assert!(cases.len() >= 8);
    for (name, case) in cases {
        let hex = case["hex"].as_str().unwrap();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let result = registry.loads(&bytes).map_err(Error::from);
        match (&case["value"], result) {
            (Json::Null, Err(Error::Rebuild(RebuildError::NotAllowed(globals)))) => {
                // CPython: "No module named '__builtin__'".
                let cpython = case["error"].as_str().unwrap();
                assert!(cpython.contains("'__builtin__'"), "{name}: {cpython}");
                assert!(
                    globals.iter().all(|g| g.global.module == "__builtin__"),
                    "{name}: {globals:?}"
                );
            }
            (Json::Null, other) => panic!("{name}: CPython refuses it, we gave {other:?}"),
            (value, Ok(rebuilt)) => assert_eq!(&render(&rebuilt), value, "{name}"),
            (_, Err(err)) => panic!("{name}: CPython loads it, we refused: {err}"),
        }
    }
}

#[test]
fn protocol_4_refuses_python2_set_as_cpython_does() {
    // c__builtin__\nset\n at protocol 4: CPython's find_class renames only
    // below protocol 3, and `import __builtin__` fails.
    let err = Registry::default()
        .loads(b"\x80\x04c__builtin__\nset\n)R.")
        .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "cannot rebuild: the pickle names 1 global outside the allowlist: '__builtin__.set'"
        ),
        "{err}"
    );
    // The same bytes at protocol 2 are set().
    let value = Registry::default()
        .loads(b"\x80\x02c__builtin__\nset\n)R.")
        .unwrap();
    assert_eq!(render(&value), json!({ "set": [] }));
}

#[test]
fn bytes_is_rebuilt_only_from_no_arguments() {
    let registry = Registry::default();
    for bytes in [
        // bytes(1_000_000_000) would allocate a gigabyte.
        &b"\x80\x02c__builtin__\nbytes\nJ\x00\xca\x9a;\x85R."[..],
        b"\x80\x02c__builtin__\nbytes\nC\x01a\x85R.",
    ] {
        let err = registry.loads(bytes).unwrap_err();
        assert!(
            err.to_string()
                .contains("() (CPython pickles only empty bytes as bytes())"),
            "{err}"
        );
    }
}

#[test]
fn torch_save_with_a_set_of_names_loads() {
    let expected = &expected()["set_of_names.zip.pt"];
    let bytes = std::fs::read(fixtures().join("set_of_names.zip.pt")).unwrap();
    let (_, value) = torch_save::from_bytes_with(&bytes, &Registry::default()).unwrap();
    let Value::Dict(items) = value else {
        panic!("not a dict: {value:?}")
    };
    let field = |key: &str| {
        items
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(k) if &**k == key))
            .map(|(_, v)| v)
            .unwrap()
    };
    let Value::Set(names) = field("names") else {
        panic!("names: {:?}", field("names"))
    };
    let mut names: Vec<Json> = names.iter().map(render).collect();
    names.sort_by_key(Json::to_string);
    assert_eq!(Json::Array(names), expected["names"]);
    let Value::Tensor(weight) = field("weight") else {
        panic!("weight: {:?}", field("weight"))
    };
    assert_eq!(weight.dtype(), DType::Float32);
    let values: Vec<f32> = weight
        .to_contiguous_bytes()
        .unwrap()
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes(chunk.try_into().unwrap()))
        .collect();
    let expected: Vec<f32> = serde_json::from_value(expected["weight"].clone()).unwrap();
    assert_eq!(values, expected);
}
