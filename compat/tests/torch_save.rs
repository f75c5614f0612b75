//! torch.save readers against files torch 2.15 wrote
//! (`tests/data/torch_save/generate.py`) and against damaged and hostile
//! variants of them.

use std::io::{Cursor, Write};
use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::Value;
use tensorshare_compat::DType;
use tensorshare_compat::pickle::{
    DecodeErrorCode, GlobalFilter, Limits, Node, NodeId, Pickle, decode_all,
};
use tensorshare_compat::torch_save::{
    self, ReadOptions, StreamPart, TorchSaveArchive, TorchSaveError, TorchSaveFormat,
};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch_save")
}

fn fixture(name: &str) -> Vec<u8> {
    let path = data_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn expected() -> Value {
    serde_json::from_slice(&fixture("expected.json")).expect("expected.json parses")
}

/// What the saved objects name besides storage classes.
fn tensor_globals(module: &str, name: &str) -> bool {
    match module {
        "torch._utils" => matches!(
            name,
            "_rebuild_tensor_v2" | "_rebuild_tensor_v3" | "_rebuild_parameter"
        ),
        "collections" => name == "OrderedDict",
        "torch.storage" => name == "_load_from_bytes",
        "torch" => DType::from_name(name).is_some(),
        _ => false,
    }
}

fn read(bytes: &[u8]) -> Result<TorchSaveArchive, TorchSaveError> {
    torch_save::read(bytes, &tensor_globals, &ReadOptions::default())
}

fn global_name(pickle: &Pickle, id: NodeId) -> Option<(&str, &str)> {
    match pickle.get(id)? {
        Node::Global(g) => Some((&*g.module, &*g.name)),
        _ => None,
    }
}

/// The value under a str key of a dict or a dict-filled object
/// (`OrderedDict`).
fn lookup(pickle: &Pickle, container: NodeId, key: &str) -> NodeId {
    let pairs = match pickle.get(container).unwrap() {
        Node::Dict(pairs) => pairs,
        Node::Object(object) => &object.dict_items,
        other => panic!("not a dict: {other:?}"),
    };
    pairs
        .iter()
        .find(|&&(k, _)| pickle.get(k).unwrap() == &Node::Str(key.to_owned()))
        .map(|&(_, v)| v)
        .unwrap_or_else(|| panic!("no key {key:?}"))
}

fn reduce_args(pickle: &Pickle, object: NodeId) -> (&str, &[NodeId]) {
    let Node::Object(object) = pickle.get(object).unwrap() else {
        panic!("not an object")
    };
    let (_, name) = global_name(pickle, object.callable).expect("callable is a global");
    let tensorshare_compat::pickle::Construction::Reduce { args } = object.construction else {
        panic!("not a REDUCE")
    };
    let Node::Tuple(args) = pickle.get(args).unwrap() else {
        panic!("args not a tuple")
    };
    (name, args)
}

/// The storage persistent id of a rebuilt tensor or parameter, and the
/// dtype global `_rebuild_tensor_v3` names, if it is one.
fn tensor_pid(pickle: &Pickle, mut tensor: NodeId) -> (NodeId, Option<String>) {
    loop {
        let (name, args) = reduce_args(pickle, tensor);
        match name {
            "_rebuild_parameter" => tensor = args[0],
            "_rebuild_tensor_v2" => return (args[0], None),
            "_rebuild_tensor_v3" => {
                let dtype = global_name(pickle, *args.last().unwrap())
                    .unwrap()
                    .1
                    .to_owned();
                return (args[0], Some(dtype));
            }
            other => panic!("unexpected rebuilder {other}"),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks every named tensor of one golden file against what torch said.
fn check_tensors(file: &str, archive: &TorchSaveArchive, tensors: &serde_json::Map<String, Value>) {
    let pickle = &archive.object;
    let mut keys = std::collections::BTreeSet::new();
    for (name, want) in tensors {
        let node = if name.is_empty() {
            pickle.root().unwrap()
        } else {
            lookup(pickle, pickle.root().unwrap(), name)
        };
        let (pid, v3_dtype) = tensor_pid(pickle, node);
        let storage = archive
            .storage(pid)
            .unwrap_or_else(|e| panic!("{file} {name}: {e}"));
        let record = storage.record;
        keys.insert(record.key.clone());
        let class = want["storage_class"].as_str().unwrap();
        assert_eq!(record.storage_class.name, class, "{file} {name}");
        assert_eq!(
            record.numel,
            want["storage_numel"].as_u64().unwrap(),
            "{file} {name}"
        );
        assert_eq!(
            hex(&record.data),
            want["storage_hex"].as_str().unwrap(),
            "{file} {name}"
        );
        assert_eq!(
            record.data.len() as u64,
            record.numel * record.element_size() as u64
        );
        assert_eq!(record.location, "cpu");
        let dtype = want["dtype"].as_str().unwrap();
        if class == "UntypedStorage" {
            assert_eq!(record.dtype, None, "{file} {name}");
            assert_eq!(record.storage_class.module, "torch.storage");
            assert_eq!(v3_dtype.as_deref(), Some(dtype), "{file} {name}");
        } else {
            assert_eq!(record.dtype.map(DType::name), Some(dtype), "{file} {name}");
            assert_eq!(record.storage_class.module, "torch");
        }
    }
    assert_eq!(
        keys.len(),
        archive.records.len(),
        "{file}: records nobody references"
    );
}

#[test]
fn golden_files_decode_to_the_bytes_torch_saved() {
    let expected = expected();
    let files = expected["files"].as_object().unwrap();
    let mut checked = 0;
    for (file, entry) in files {
        let format = match entry["format"].as_str().unwrap() {
            "zip" => TorchSaveFormat::Zip,
            "legacy" => TorchSaveFormat::Legacy,
            _ => continue,
        };
        if entry.get("storages").is_some() {
            // Storages without tensors: legacy_view_metadata_resolves_to_the_viewed_slice.
            continue;
        }
        let bytes = fixture(file);
        assert_eq!(torch_save::detect_format(&bytes).unwrap(), format, "{file}");
        let archive = read(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(archive.format, format, "{file}");
        assert_eq!(
            archive.sys_info.is_some(),
            format == TorchSaveFormat::Legacy,
            "{file}"
        );
        check_tensors(file, &archive, entry["tensors"].as_object().unwrap());
        checked += 1;
    }
    assert!(checked >= 12, "only {checked} golden files");
}

#[test]
fn the_format_specific_readers_refuse_the_other_format() {
    let zip = fixture("zip_views.pt");
    let legacy = fixture("legacy_views.pt");
    let options = ReadOptions::default();
    torch_save::read_zip(&zip, &tensor_globals, &options).expect("the zip reads");
    torch_save::read_legacy(&legacy, &tensor_globals, &options).expect("the legacy stream reads");
    let err = torch_save::read_zip(&legacy, &tensor_globals, &options).unwrap_err();
    assert!(matches!(err, TorchSaveError::Zip { .. }), "{err}");
    let err = torch_save::read_legacy(&zip, &tensor_globals, &options).unwrap_err();
    assert!(matches!(err, TorchSaveError::NotTorchSave { .. }), "{err}");
    assert!(err.to_string().contains("read_zip"), "{err}");
}

#[test]
fn views_share_one_record() {
    for file in ["zip_views.pt", "legacy_views.pt"] {
        let archive = read(&fixture(file)).unwrap();
        assert_eq!(archive.records.len(), 1, "{file}");
        let record = archive.records.values().next().unwrap();
        assert_eq!(record.dtype, Some(DType::Float32));
        assert_eq!(record.numel, 8);
    }
}

#[test]
fn legacy_view_metadata_resolves_to_the_viewed_slice() {
    let entry = &expected()["files"]["legacy_view_metadata.pt"];
    let archive = read(&fixture("legacy_view_metadata.pt")).unwrap();
    assert_eq!(archive.records.len(), 1);
    let root = archive.object.root().unwrap();
    let storage_hex = entry["storages"]["whole"]["storage_hex"].as_str().unwrap();
    let whole = archive
        .storage(lookup(&archive.object, root, "whole"))
        .unwrap();
    assert_eq!(hex(whole.bytes), storage_hex);
    assert_eq!(whole.pid.view, None);
    let view = archive
        .storage(lookup(&archive.object, root, "view"))
        .unwrap();
    let pid_view = view.pid.view.clone().unwrap();
    assert_eq!(
        (pid_view.key.as_str(), pid_view.offset, pid_view.numel),
        ("view", 2, 3)
    );
    // Elements 2..5 of the six float32s torch loads as [2.0, 3.0, 4.0].
    assert_eq!(hex(view.bytes), storage_hex[16..40]);
    assert_eq!(view.record.key, "root");
}

#[test]
fn a_plain_pickle_carries_a_legacy_stream() {
    let entry = &expected()["files"]["plain_pickle.pkl"]["tensors"][""];
    let pickle = decode_all(
        &fixture("plain_pickle.pkl"),
        &tensor_globals,
        &Limits::default(),
    )
    .unwrap()
    .pickle;
    let payload = pickle
        .iter()
        .find_map(|(_, node)| match node {
            Node::Bytes(b) => Some(b.clone()),
            _ => None,
        })
        .expect("the _load_from_bytes argument");
    let archive = torch_save::read_legacy(
        &payload.contiguous(),
        &tensor_globals,
        &ReadOptions::default(),
    )
    .unwrap();
    assert_eq!(archive.records.len(), 1);
    let record = archive.records.values().next().unwrap();
    assert_eq!(record.dtype, Some(DType::Int16));
    assert_eq!(record.storage_class.name, "ShortStorage");
    assert_eq!(hex(&record.data), entry["storage_hex"].as_str().unwrap());
    // The object is the bare storage persistent id.
    assert!(matches!(
        archive.object.get(archive.object.root().unwrap()).unwrap(),
        Node::PersistentId(_)
    ));
}

#[test]
fn a_legacy_stream_cut_anywhere_is_truncated() {
    for file in [
        "legacy_parameter.pt",
        "legacy_view_metadata.pt",
        "legacy_untyped.pt",
    ] {
        let bytes = fixture(file);
        for end in 0..bytes.len() {
            match read(&bytes[..end]) {
                Err(TorchSaveError::Truncated { offset, .. }) => assert_eq!(offset, end),
                Err(other) => panic!("{file} cut at {end}: {other}"),
                Ok(_) => panic!("{file} cut at {end} reads"),
            }
        }
        let message = read(&bytes[..bytes.len() - 1]).unwrap_err().to_string();
        assert!(message.contains("truncated"), "{message}");
        assert!(
            message.contains(&format!("byte {}", bytes.len() - 1)),
            "{message}"
        );
    }
}

#[test]
fn a_zip_cut_short_is_an_error() {
    let bytes = fixture("zip_parameter.pt");
    for end in (0..bytes.len()).step_by(7) {
        assert!(read(&bytes[..end]).is_err(), "cut at {end}");
    }
}

/// The entries of a zip, rewritten with `edit` deciding each one's fate:
/// `None` drops it, `Some(bytes)` stores those bytes.
fn rewrite_zip(bytes: &[u8], edit: impl Fn(&str, Vec<u8>) -> Option<Vec<u8>>) -> Vec<u8> {
    let mut source = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for index in 0..source.len() {
        let mut file = source.by_index(index).unwrap();
        let name = file.name().to_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut data).unwrap();
        if let Some(data) = edit(&name, data) {
            out.start_file(name, options).unwrap();
            out.write_all(&data).unwrap();
        }
    }
    out.finish().unwrap().into_inner()
}

#[test]
fn rewritten_zips_still_read() {
    let bytes = rewrite_zip(&fixture("zip_dtypes.pt"), |_, data| Some(data));
    let archive = read(&bytes).unwrap();
    assert_eq!(archive.records.len(), 13);
}

#[test]
fn a_missing_zip_record_is_named() {
    let bytes = rewrite_zip(&fixture("zip_views.pt"), |name, data| {
        (name != "zip_views/data/0").then_some(data)
    });
    let err = read(&bytes).unwrap_err();
    assert!(matches!(&err, TorchSaveError::MissingRecord { name } if name == "zip_views/data/0"));
    assert!(err.to_string().contains("\"zip_views/data/0\""), "{err}");
}

#[test]
fn a_short_zip_record_is_named() {
    let bytes = rewrite_zip(&fixture("zip_views.pt"), |name, mut data| {
        if name == "zip_views/data/0" {
            data.pop();
        }
        Some(data)
    });
    let err = read(&bytes).unwrap_err();
    assert!(
        matches!(&err, TorchSaveError::ShortRecord { name, expected: 32, found: 31 }
            if name == "zip_views/data/0"),
        "{err}"
    );
}

#[test]
fn a_long_zip_record_is_cut_to_its_storage() {
    let bytes = rewrite_zip(&fixture("zip_buffer.pt"), |name, mut data| {
        if name == "archive/data/0" {
            data.extend_from_slice(b"extra");
        }
        Some(data)
    });
    let archive = read(&bytes).unwrap();
    assert_eq!(archive.records["0"].data.len(), 8);
}

#[test]
fn zip_byte_order_is_checked() {
    let big = rewrite_zip(&fixture("zip_buffer.pt"), |name, data| {
        Some(if name.ends_with("/byteorder") {
            b"big".to_vec()
        } else {
            data
        })
    });
    let err = read(&big).unwrap_err();
    assert!(matches!(err, TorchSaveError::BigEndian { .. }), "{err}");
    assert!(err.to_string().contains("big-endian"), "{err}");

    let odd = rewrite_zip(&fixture("zip_buffer.pt"), |name, data| {
        Some(if name.ends_with("/byteorder") {
            b"middle".to_vec()
        } else {
            data
        })
    });
    assert!(matches!(
        read(&odd).unwrap_err(),
        TorchSaveError::UnknownByteOrder { .. }
    ));

    // Files from before the byteorder record are little-endian.
    let old = rewrite_zip(&fixture("zip_buffer.pt"), |name, data| {
        (!name.ends_with("/byteorder")).then_some(data)
    });
    assert_eq!(read(&old).unwrap().records["0"].data.len(), 8);
}

#[test]
fn the_archive_root_is_whatever_directory_holds_data_pkl() {
    let original = fixture("zip_buffer.pt");
    let renamed = {
        let mut source = zip::ZipArchive::new(Cursor::new(original.as_slice())).unwrap();
        let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for index in 0..source.len() {
            let mut file = source.by_index(index).unwrap();
            let name = file.name().replacen("archive/", "resnet_checkpoint/", 1);
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut file, &mut data).unwrap();
            out.start_file(name, zip::write::SimpleFileOptions::default())
                .unwrap();
            out.write_all(&data).unwrap();
        }
        out.finish().unwrap().into_inner()
    };
    // Deflated this time: torch stores, but other zip tools may not.
    assert_eq!(read(&renamed).unwrap().records["0"].data.len(), 8);

    let two_roots = {
        let mut source = zip::ZipArchive::new(Cursor::new(original.as_slice())).unwrap();
        let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut source.by_name("archive/data.pkl").unwrap(), &mut data)
            .unwrap();
        out.raw_copy_file(source.by_name("archive/data.pkl").unwrap())
            .unwrap();
        out.start_file("other/data.pkl", zip::write::SimpleFileOptions::default())
            .unwrap();
        out.write_all(&data).unwrap();
        out.finish().unwrap().into_inner()
    };
    let err = read(&two_roots).unwrap_err();
    assert!(
        matches!(err, TorchSaveError::AmbiguousArchiveRoot { .. }),
        "{err}"
    );

    let none = rewrite_zip(&fixture("zip_buffer.pt"), |name, data| {
        (!name.ends_with("data.pkl")).then_some(data)
    });
    assert!(matches!(
        read(&none).unwrap_err(),
        TorchSaveError::NoDataPickle
    ));
}

#[test]
fn duplicate_zip_names_are_refused() {
    let bytes = fixture("zip_views.pt");
    // Add a record, then give it the name of `.../data/0` in every header.
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mut source = zip::ZipArchive::new(Cursor::new(bytes.as_slice())).unwrap();
    for index in 0..source.len() {
        out.raw_copy_file(source.by_index(index).unwrap()).unwrap();
    }
    out.start_file("zip_views/data/X", zip::write::SimpleFileOptions::default())
        .unwrap();
    out.write_all(b"0123").unwrap();
    let mut bytes = out.finish().unwrap().into_inner();
    let from = b"zip_views/data/X";
    let to = b"zip_views/data/0";
    let mut patched = 0;
    for start in 0..bytes.len() - from.len() {
        if &bytes[start..start + from.len()] == from {
            bytes[start..start + from.len()].copy_from_slice(to);
            patched += 1;
        }
    }
    assert_eq!(patched, 2, "local and central headers");
    let err = read(&bytes).unwrap_err();
    assert!(matches!(err, TorchSaveError::DuplicateEntry), "{err}");
}

#[test]
fn limits_are_enforced() {
    for file in ["zip_dtypes.pt", "legacy_dtypes.pt"] {
        let bytes = fixture(file);
        let few = ReadOptions {
            max_records: 2,
            ..ReadOptions::default()
        };
        let err = torch_save::read(&bytes, &tensor_globals, &few).unwrap_err();
        assert!(
            matches!(err, TorchSaveError::TooManyRecords { limit: 2, .. }),
            "{file}: {err}"
        );

        let small = ReadOptions {
            max_total_bytes: 16,
            ..ReadOptions::default()
        };
        let err = torch_save::read(&bytes, &tensor_globals, &small).unwrap_err();
        assert!(
            matches!(err, TorchSaveError::SizeLimit { limit: 16, .. }),
            "{file}: {err}"
        );
        assert!(err.to_string().contains("max_total_bytes"), "{err}");

        let shallow = ReadOptions {
            limits: Limits::default().with_max_nodes(8),
            ..ReadOptions::default()
        };
        let err = torch_save::read(&bytes, &tensor_globals, &shallow).unwrap_err();
        assert!(
            matches!(&err, TorchSaveError::Pickle { cause, .. }
                if matches!(cause.code, DecodeErrorCode::TooManyNodes { .. })),
            "{file}: {err}"
        );
    }
    let many_entries = fixture("zip_buffer.pt");
    let none = ReadOptions {
        max_records: 0,
        ..ReadOptions::default()
    };
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mut source = zip::ZipArchive::new(Cursor::new(many_entries.as_slice())).unwrap();
    for index in 0..source.len() {
        out.raw_copy_file(source.by_index(index).unwrap()).unwrap();
    }
    for index in 0..torch_save::ZIP_METADATA_ENTRIES {
        out.start_file(
            format!("archive/junk/{index}"),
            zip::write::SimpleFileOptions::default(),
        )
        .unwrap();
    }
    let bytes = out.finish().unwrap().into_inner();
    let err = torch_save::read(&bytes, &tensor_globals, &none).unwrap_err();
    assert!(
        matches!(err, TorchSaveError::TooManyEntries { .. }),
        "{err}"
    );
}

#[test]
fn the_callers_filter_governs_the_object_pickle() {
    let nothing = |_: &str, _: &str| false;
    for file in ["zip_parameter.pt", "legacy_parameter.pt"] {
        let err = torch_save::read(&fixture(file), &nothing, &ReadOptions::default()).unwrap_err();
        let TorchSaveError::Pickle { cause, .. } = &err else {
            panic!("{file}: {err}")
        };
        assert!(
            matches!(&cause.code, DecodeErrorCode::DisallowedGlobal { name, .. }
                if name == "_rebuild_parameter"),
            "{file}: {err}"
        );
    }
}

/// The first 137 bytes of a legacy file: magic, version and sys_info.
fn legacy_header() -> Vec<u8> {
    let bytes = fixture("legacy_parameter.pt");
    let archive = read(&bytes).unwrap();
    assert!(archive.sys_info.is_some());
    bytes[..137].to_vec()
}

fn legacy_stream(object: &[u8], keys: &[u8], data: &[u8]) -> Vec<u8> {
    let mut stream = legacy_header();
    stream.extend_from_slice(object);
    stream.extend_from_slice(keys);
    stream.extend_from_slice(data);
    stream
}

#[test]
fn storage_classes_are_allowed_only_in_persistent_ids() {
    // pickle.dumps(torch.FloatStorage, protocol=2) as the object.
    let stream = legacy_stream(b"\x80\x02ctorch\nFloatStorage\nq\x00.", b"\x80\x02].", b"");
    let err = read(&stream).unwrap_err();
    assert!(
        matches!(&err, TorchSaveError::StorageClassOutsidePersistentId { global, .. }
            if global.name == "FloatStorage"),
        "{err}"
    );
    // The caller may allow it anywhere.
    let lenient = |module: &str, name: &str| {
        tensor_globals(module, name) || (module, name) == ("torch", "FloatStorage")
    };
    torch_save::read(&stream, &lenient, &ReadOptions::default()).expect("read leniently");
}

/// `('storage', torch.FloatStorage, key, 'cpu', numel, None)` as a BINPERSID
/// pickle with a list-of-keys pickle after it.
fn float_pid(key: &str, numel: u8) -> Vec<u8> {
    let mut object = b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\n".to_vec();
    object.push(b'X');
    object.extend_from_slice(&(key.len() as u32).to_le_bytes());
    object.extend_from_slice(key.as_bytes());
    object.extend_from_slice(b"X\x03\x00\x00\x00cpuK");
    object.push(numel);
    object.extend_from_slice(b"NtQ.");
    object
}

fn keys_pickle(keys: &[&str]) -> Vec<u8> {
    let mut out = b"\x80\x02](".to_vec();
    for key in keys {
        out.push(b'X');
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
    }
    out.extend_from_slice(b"e.");
    out
}

fn counted(count: u64, data: &[u8]) -> Vec<u8> {
    let mut out = count.to_le_bytes().to_vec();
    out.extend_from_slice(data);
    out
}

#[test]
fn legacy_key_list_and_data_must_agree() {
    let data = counted(2, &[0, 0, 128, 63, 0, 0, 0, 64]);
    let good = legacy_stream(&float_pid("k", 2), &keys_pickle(&["k"]), &data);
    let archive = read(&good).unwrap();
    assert_eq!(archive.records["k"].data, [0, 0, 128, 63, 0, 0, 0, 64]);

    let err = read(&legacy_stream(&float_pid("k", 2), &keys_pickle(&[]), b"")).unwrap_err();
    assert!(
        matches!(err, TorchSaveError::MissingStorageData { ref key } if key == "k"),
        "{err}"
    );

    let err = read(&legacy_stream(
        &float_pid("k", 2),
        &keys_pickle(&["k", "j"]),
        &data,
    ))
    .unwrap_err();
    assert!(matches!(err, TorchSaveError::UnreferencedStorageKey { ref key } if key == "j"));

    let err = read(&legacy_stream(
        &float_pid("k", 2),
        &keys_pickle(&["k", "k"]),
        &data,
    ))
    .unwrap_err();
    assert!(
        matches!(err, TorchSaveError::DuplicateStorageKey { .. }),
        "{err}"
    );

    let wrong_count = counted(3, &[0; 12]);
    let err = read(&legacy_stream(
        &float_pid("k", 2),
        &keys_pickle(&["k"]),
        &wrong_count,
    ))
    .unwrap_err();
    assert!(
        matches!(err, TorchSaveError::StorageCountMismatch { count: 3, element_size: 4,
            expected_nbytes: 8, offset, .. } if offset == good.len() - 16),
        "{err}"
    );

    let err = read(&legacy_stream(&float_pid("k", 2), b"\x80\x02K\x01.", &data)).unwrap_err();
    assert!(
        matches!(err, TorchSaveError::InvalidStorageKeys { .. }),
        "{err}"
    );

    // Bytes after the last storage are ignored, as torch ignores them.
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"junk");
    read(&trailing).expect("trailing bytes are ignored");
}

#[test]
fn malformed_persistent_ids_are_refused() {
    let cases: [(&[u8], &str); 4] = [
        (b"\x80\x02X\x01\x00\x00\x00kQ.", "not a tuple"),
        (b"\x80\x02(X\x05\x00\x00\x00otherK\x01tQ.", "not a 'storage' one"),
        (b"\x80\x02(X\x07\x00\x00\x00storageK\x01tQ.", "has 2 fields, expected 6"),
        (
            b"\x80\x02(X\x07\x00\x00\x00storagectorch._utils\n_rebuild_tensor_v2\nX\x01\x00\x00\x00kX\x03\x00\x00\x00cpuK\x01NtQ.",
            "unsupported storage class torch._utils._rebuild_tensor_v2",
        ),
    ];
    for (object, message) in cases {
        let err = read(&legacy_stream(object, &keys_pickle(&[]), b"")).unwrap_err();
        assert!(matches!(err, TorchSaveError::PersistentId { .. }), "{err}");
        assert!(err.to_string().contains(message), "{err}");
    }
}

#[test]
fn non_torch_inputs_are_refused_clearly() {
    let mut tar = vec![0u8; 1024];
    tar[..8].copy_from_slice(b"storages");
    tar[257..263].copy_from_slice(b"ustar\0");
    let err = read(&tar).unwrap_err();
    assert!(matches!(err, TorchSaveError::TarFormat));
    assert!(err.to_string().contains("torch < 0.4"), "{err}");
    assert!(err.to_string().contains("re-save"), "{err}");

    let err = read(b"\x80\x02K\x05.").unwrap_err();
    assert!(matches!(err, TorchSaveError::NotTorchSave { .. }), "{err}");
    let err = read(b"hello, world").unwrap_err();
    assert!(matches!(err, TorchSaveError::NotTorchSave { .. }), "{err}");
    // What the file starts with, said once, not the decoder's account of a
    // non-pickle inside this one's.
    assert_eq!(
        err.to_string(),
        "not a torch.save file: it starts with byte 0x68 (b\"hello, w\"), which no pickle \
         starts with; torch.save files are zip archives or legacy streams that start with \
         torch's magic-number pickle"
    );
    let err = read(b"\x80\x02zz").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("not a torch.save file: its first pickle does not decode (at byte 2: "),
        "{err}"
    );

    let mut wrong_version = fixture("legacy_parameter.pt");
    wrong_version[18] = 0xea; // 1001 -> 1002
    let err = read(&wrong_version).unwrap_err();
    assert!(
        matches!(&err, TorchSaveError::UnsupportedProtocolVersion { found } if found == "1002"),
        "{err}"
    );
}

#[test]
fn big_endian_legacy_streams_are_refused() {
    let mut bytes = fixture("legacy_parameter.pt");
    // sys_info's `little_endian` value: NEWTRUE -> NEWFALSE.
    assert_eq!(bytes[73], 0x88);
    bytes[73] = 0x89;
    let err = read(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            TorchSaveError::BigEndian {
                part: StreamPart::SysInfo
            }
        ),
        "{err}"
    );
}

#[test]
fn persistent_ids_parse_on_their_own() {
    let archive = read(&fixture("zip_parameter.pt")).unwrap();
    let (pid, _) = tensor_pid(&archive.object, archive.object.root().unwrap());
    let parsed = torch_save::parse_storage_pid(&archive.object, pid).unwrap();
    assert_eq!(parsed.key, "0");
    assert_eq!(parsed.location, "cpu");
    assert_eq!(parsed.numel, 4);
    assert_eq!(parsed.dtype, Some(DType::Float32));
    assert_eq!(parsed.nbytes(), Some(16));
    assert_eq!(parsed.view, None);
    // The tuple inside works too.
    let Node::PersistentId(tuple) = archive.object.get(pid).unwrap() else {
        panic!()
    };
    assert_eq!(
        torch_save::parse_storage_pid(&archive.object, *tuple).unwrap(),
        parsed
    );
    let err =
        torch_save::parse_storage_pid(&archive.object, archive.object.root().unwrap()).unwrap_err();
    assert!(matches!(err, torch_save::PersistentIdError::NotATuple));
}

#[test]
fn storage_class_filter() {
    for (module, name) in [
        ("torch", "FloatStorage"),
        ("torch", "BFloat16Storage"),
        ("torch.cuda", "HalfStorage"),
        ("torch.storage", "UntypedStorage"),
        ("torch", "_UntypedStorage"),
    ] {
        assert!(
            torch_save::is_storage_class_global(module, name),
            "{module}.{name}"
        );
    }
    for (module, name) in [
        ("torch", "load"),
        ("torch.storage", "FloatStorage"),
        ("os", "system"),
    ] {
        assert!(
            !torch_save::is_storage_class_global(module, name),
            "{module}.{name}"
        );
    }
    let filter: &dyn GlobalFilter = &tensor_globals;
    assert!(!filter.allows("torch", "FloatStorage"));
}

/// Flips bytes of a real file at positions and to values proptest picks.
fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8)]) -> Vec<u8> {
    for &(position, value) in edits {
        let len = bytes.len();
        bytes[position % len] = value;
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = read(&bytes);
        let mut zip = b"PK\x03\x04".to_vec();
        zip.extend_from_slice(&bytes);
        let _ = read(&zip);
    }

    #[test]
    fn mutated_legacy_files_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        for file in ["legacy_views.pt", "legacy_view_metadata.pt"] {
            let _ = read(&mutate(fixture(file), &edits));
        }
    }

    #[test]
    fn mutated_zip_files_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let _ = read(&mutate(fixture("zip_views.pt"), &edits));
    }
}
