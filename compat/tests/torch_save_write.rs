//! The torch.save writers: what they name each storage in each format, and
//! the storages they refuse. Stock torch loading the files is tested in the
//! runtime crate (`tests/torch_save_write.rs`).

use tensorshare_compat::DType;
use tensorshare_compat::pickle::{Global, Node, Pickle};
use tensorshare_compat::torch_save::{
    self, ReadOptions, SavedStorage, TorchSaveFormat, WriteError,
};

const FORMATS: [TorchSaveFormat; 2] = [TorchSaveFormat::Zip, TorchSaveFormat::Legacy];

fn no_globals(_: &str, _: &str) -> bool {
    false
}

/// A file whose object is the list of `storages`' persistent ids.
fn write(format: TorchSaveFormat, storages: &[SavedStorage<'_>]) -> Result<Vec<u8>, WriteError> {
    let mut object = Pickle::new();
    let pids = storages
        .iter()
        .map(|s| torch_save::push_storage_pid(&mut object, format, s))
        .collect::<Result<Vec<_>, _>>()?;
    let root = object.push(Node::List(pids));
    object.set_root(root);
    torch_save::write_to_vec(format, &object, storages)
}

#[test]
fn storage_classes_and_counts_per_format() {
    let floats = [0u8; 12];
    let halves = [1u8, 2, 3, 4, 5, 6];
    let raw = [7u8, 8, 9];
    let storages = [
        SavedStorage::new("0", Some(DType::Float32), &floats),
        SavedStorage::new("1", Some(DType::UInt16), &halves),
        SavedStorage::new("2", None, &raw),
    ];
    for format in FORMATS {
        let file = write(format, &storages).unwrap();
        assert_eq!(torch_save::detect_format(&file).unwrap(), format);
        let archive = torch_save::read(&file, &no_globals, &ReadOptions::default()).unwrap();
        assert_eq!(archive.format, format);
        assert_eq!(
            archive.sys_info.is_some(),
            format == TorchSaveFormat::Legacy
        );
        let classes: Vec<(Global, u64, &[u8])> = archive
            .records
            .values()
            .map(|r| (r.storage_class.clone(), r.numel, r.data.as_slice()))
            .collect();
        let untyped = |name: &'static str| match format {
            TorchSaveFormat::Zip => Global::new("torch.storage", "UntypedStorage"),
            TorchSaveFormat::Legacy => Global::new("torch", name),
        };
        let (u16_count, raw_count) = match format {
            TorchSaveFormat::Zip => (6, 3),
            TorchSaveFormat::Legacy => (3, 3),
        };
        assert_eq!(
            classes,
            vec![
                (Global::new("torch", "FloatStorage"), 3, &floats[..]),
                (untyped("ShortStorage"), u16_count, &halves[..]),
                (untyped("ByteStorage"), raw_count, &raw[..]),
            ],
            "{format:?}"
        );
    }
}

#[test]
fn zip_records_are_stored_and_aligned() {
    let data = [0xabu8; 100];
    let file = write(
        TorchSaveFormat::Zip,
        &[SavedStorage::new("0", Some(DType::UInt8), &data)],
    )
    .unwrap();
    // The record's bytes start on a 64-byte boundary of the file.
    let at = file
        .windows(data.len())
        .position(|w| w == data)
        .expect("stored, not compressed");
    assert_eq!(at % 64, 0);
    for name in [
        "archive/data.pkl",
        "archive/version",
        "archive/byteorder",
        "archive/.format_version",
        "archive/.storage_alignment",
        "archive/.data/serialization_id",
    ] {
        assert!(
            file.windows(name.len()).any(|w| w == name.as_bytes()),
            "{name}"
        );
    }
}

#[test]
fn bad_storages_are_refused() {
    let data = [0u8; 6];
    let cases: [(&[SavedStorage<'_>], &str); 3] = [
        (
            &[
                SavedStorage::new("0", None, &data),
                SavedStorage::new("0", None, &data),
            ],
            "share the key '0'",
        ),
        (&[SavedStorage::new("../x", None, &data)], "'/'"),
        (
            &[SavedStorage::new("0", Some(DType::Float32), &data)],
            "not a whole number of 4-byte elements",
        ),
    ];
    for format in FORMATS {
        for (storages, expected) in &cases {
            let error = write(format, storages).unwrap_err().to_string();
            assert!(error.contains(expected), "{format:?}: {error}");
        }
    }
}
