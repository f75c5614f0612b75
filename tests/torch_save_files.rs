//! `torch.save` and `.safetensors` files read through a mapping and written
//! storage by storage: every golden fixture reads through the mapping as it
//! reads from memory, zip storages are windows of the file, files written
//! by path load in stock torch as the originals do, and a file truncated
//! while mapped gives a clear error, never a crash.

mod support;

use std::path::{Path, PathBuf};

use tensorshare::safetensors::SafetensorsError;
use tensorshare::torch_save::{self, FileError, TorchSaveFormat};
use tensorshare::{Dict, Error, Registry, StrategyKind, Tensor, Value};
use tensorshare_strategies::bytes::file_window::FileWindow;

use support::{test_python, torch_describes};

/// Every `torch.save` fixture, zip and legacy, of every torch release.
fn saved_fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures");
    let mut files = Vec::new();
    for version in [
        "torch-1.13.1",
        "torch-2.4.1",
        "torch-2.15.0",
        "saved_on_gpu",
    ] {
        let dir = root.join(version);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".zip.pt") || name.ends_with(".legacy.pt") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The value's structure (storages by kind and size) and every distinct
/// storage's bytes, in order.
fn contents(value: &Value) -> (String, Vec<Vec<u8>>) {
    let bytes = value
        .distinct()
        .filter_map(Value::storage)
        .map(|storage| storage.bytes().expect("bytes at hand").to_vec())
        .collect();
    (format!("{value:?}"), bytes)
}

/// Windows of a mapped file among the value's storages.
fn windows(value: &Value) -> usize {
    value
        .distinct()
        .filter_map(Value::storage)
        .filter(|storage| storage.local_segment::<FileWindow>().is_some())
        .count()
}

#[test]
fn every_fixture_reads_through_the_mapping_as_from_memory() {
    let fixtures = saved_fixtures();
    assert!(fixtures.len() > 200, "{} fixtures", fixtures.len());
    let registry = Registry::default();
    let mut read = 0;
    let mut zip_windows = 0;
    for path in &fixtures {
        let bytes = std::fs::read(path).unwrap();
        let from_memory = torch_save::from_bytes_with(&bytes, &registry);
        let mapped = torch_save::load_with(path, &registry);
        match (from_memory, mapped) {
            (Ok((format, expected)), Ok((mapped_format, value))) => {
                assert_eq!(format, mapped_format, "{}", path.display());
                assert_eq!(contents(&expected), contents(&value), "{}", path.display());
                if format == TorchSaveFormat::Zip {
                    zip_windows += windows(&value);
                }
                read += 1;
            }
            (Err(expected), Err(error)) => {
                // The same cause, which the file's error names it by.
                let cause = match &error {
                    Error::InFile { cause, .. } => cause.to_string(),
                    error => error.to_string(),
                };
                assert_eq!(expected.to_string(), cause, "{}", path.display());
            }
            (expected, mapped) => panic!(
                "{}: from memory {:?}, mapped {:?}",
                path.display(),
                expected.map(|_| ()),
                mapped.map(|_| ())
            ),
        }
    }
    assert!(read > 200, "{read} fixtures read");
    assert!(
        zip_windows > 100,
        "{zip_windows} zip storages left in the file"
    );
}

/// A state dict of `n` float32 tensors of `len` elements each.
fn state_dict(n: usize, len: usize) -> Value {
    let mut dict = Dict::new();
    for i in 0..n {
        let data: Vec<f32> = (0..len).map(|j| (i * len + j) as f32).collect();
        let tensor = Tensor::from_slice(&StrategyKind::Bytes, &data, &[len]).unwrap();
        dict = dict.with(format!("layer{i}.weight"), tensor);
    }
    dict.into()
}

/// A state dict whose float32 tensors follow one-byte ones, so that a
/// legacy stream holds them at every address modulo 4.
fn state_dict_at_every_alignment() -> Value {
    let mut dict = Dict::new();
    for i in 0..4 {
        let byte = Tensor::from_slice(&StrategyKind::Bytes, &[i as u8], &[1]).unwrap();
        let data: Vec<f32> = (0..1000).map(|j| (i * 1000 + j) as f32).collect();
        let weight = Tensor::from_slice(&StrategyKind::Bytes, &data, &[1000]).unwrap();
        dict = dict
            .with(format!("layer{i}.step"), byte)
            .with(format!("layer{i}.weight"), weight);
    }
    dict.into()
}

/// Cuts the file at `path` to its first page in place, as another
/// program rewriting it would.
fn cut_to_a_page(path: &Path) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(4096)
        .unwrap();
}

/// The tensor `layer{i}.weight` of a state dict.
fn weight_of(state_dict: &Value, i: usize) -> &Tensor {
    state_dict
        .get(&format!("layer{i}.weight"))
        .and_then(Value::as_tensor)
        .unwrap()
}

#[test]
fn zip_and_legacy_storages_are_windows_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let value = state_dict_at_every_alignment();
    let zip = dir.path().join("model.pt");
    let legacy = dir.path().join("model.legacy.pt");
    torch_save::save(&value, &zip).unwrap();
    torch_save::save_as(&value, &legacy, TorchSaveFormat::Legacy).unwrap();

    let (format, loaded) = torch_save::load_with(&zip, &Registry::default()).unwrap();
    assert_eq!(format, TorchSaveFormat::Zip);
    assert_eq!(windows(&loaded), 8);
    assert_eq!(contents(&loaded).1, contents(&value).1);
    let weight = loaded
        .get("layer3.weight")
        .and_then(Value::as_tensor)
        .unwrap();
    assert_eq!(weight.as_slice::<f32>().unwrap()[999], 3999.0);

    let (format, loaded) = torch_save::load_with(&legacy, &Registry::default()).unwrap();
    assert_eq!(format, TorchSaveFormat::Legacy);
    assert_eq!(windows(&loaded), 8, "every legacy record stays in the file");
    assert_eq!(contents(&loaded).1, contents(&value).1);
    // Each record follows an 8-byte count wherever the one before ended:
    // the one-byte tensors put the weights at every address modulo 4.
    let mut unaligned = 0;
    for i in 0..4 {
        let weight = weight_of(&loaded, i);
        let in_file = weight.storage().bytes().unwrap().as_ptr();
        let expected: Vec<f32> = (0..1000).map(|j| (i * 1000 + j) as f32).collect();
        assert_eq!(weight.to_vec::<f32>().unwrap(), expected, "read in place");
        let slice = weight
            .as_slice::<f32>()
            .expect("a view, copied if unaligned");
        assert_eq!(slice, expected);
        if !(in_file as usize).is_multiple_of(4) {
            unaligned += 1;
            assert_ne!(slice.as_ptr().cast::<u8>(), in_file, "viewed from a copy");
            let again = weight.as_slice::<f32>().unwrap().as_ptr();
            assert_eq!(again, slice.as_ptr(), "copied once, then viewed again");
        } else {
            assert_eq!(slice.as_ptr().cast::<u8>(), in_file, "viewed in the file");
        }
    }
    assert_eq!(unaligned, 3, "the weights lie at every address modulo 4");

    // The reader form reads the same.
    let read = torch_save::read(std::fs::File::open(&zip).unwrap()).unwrap();
    assert_eq!(contents(&read).1, contents(&value).1);
}

#[test]
fn a_file_truncated_after_loading_is_refused_when_written_out() {
    for format in [TorchSaveFormat::Zip, TorchSaveFormat::Legacy] {
        a_truncated_file_of(format);
    }
}

#[test]
fn an_unaligned_storage_of_a_truncated_file_is_copied_as_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("model.pt");
    let value = state_dict_at_every_alignment();
    torch_save::save_as(&value, &input, TorchSaveFormat::Legacy).unwrap();
    let loaded = torch_save::load(&input).unwrap();
    cut_to_a_page(&input);
    // Each weight's view is of what is left, zeros past the cut; those the
    // file holds unaligned are read through a copy, which must not fault.
    let mut copied_past_the_cut = 0;
    for i in 0..4 {
        let weight = weight_of(&loaded, i);
        let window = weight.storage().local_segment::<FileWindow>().unwrap();
        let unaligned = !(weight.storage().bytes().unwrap().as_ptr() as usize).is_multiple_of(4);
        let view = weight.as_slice::<f32>().expect("a view of what is left");
        assert_eq!(view.len(), 1000);
        if window.range().start >= 4096 {
            assert!(view.iter().all(|&x| x == 0.0), "layer{i}");
            copied_past_the_cut += usize::from(unaligned);
        }
    }
    assert!(copied_past_the_cut > 0, "no unaligned weight past the cut");
    let error = torch_save::save(&loaded, dir.path().join("out.pt")).unwrap_err();
    assert!(
        matches!(error, Error::TorchSaveFile(FileError::SourceChanged { .. })),
        "{error}"
    );
}

fn a_truncated_file_of(input_format: TorchSaveFormat) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("model.pt");
    torch_save::save_as(&state_dict(8, 1 << 16), &input, input_format).unwrap();
    let loaded = torch_save::load(&input).unwrap();
    assert_eq!(windows(&loaded), 8, "{input_format:?}");

    // Another program rewrites the checkpoint in place.
    cut_to_a_page(&input);
    // Reading the lost bytes gives zeros, not SIGBUS: in place, and
    // through the copy a view of a legacy stream's unaligned storage makes.
    let last = loaded
        .get("layer7.weight")
        .and_then(Value::as_tensor)
        .unwrap();
    assert_eq!(last.to_vec::<f32>().unwrap()[100], 0.0);
    assert_eq!(last.as_slice::<f32>().unwrap()[100], 0.0);

    for format in [TorchSaveFormat::Zip, TorchSaveFormat::Legacy] {
        let output = dir.path().join("out.pt");
        let error = torch_save::save_as(&loaded, &output, format).unwrap_err();
        assert!(
            matches!(error, Error::TorchSaveFile(FileError::SourceChanged { .. })),
            "{error}"
        );
        assert!(
            error.to_string().contains("truncated or rewritten"),
            "{error}"
        );
        assert!(!output.exists(), "nothing written");
    }
    let output = dir.path().join("out.safetensors");
    let error = tensorshare::safetensors::save(&loaded, &output).unwrap_err();
    assert!(
        matches!(
            error,
            Error::Safetensors(SafetensorsError::SourceChanged { .. })
        ),
        "{error}"
    );
    assert!(!output.exists(), "nothing written");
    // No temporary file is left behind either.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");

    // Read again, the truncated file is a clear error.
    let error = torch_save::load(&input).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("{}: torch.save archive: ", input.display())),
        "{error}"
    );
}

#[test]
fn safetensors_tensors_are_windows_of_the_file_and_truncation_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let value = state_dict(3, 1 << 15);
    tensorshare::safetensors::save(&value, &path).unwrap();
    let loaded = tensorshare::safetensors::load(&path).unwrap();
    assert_eq!(windows(&loaded), 3);
    let weight = loaded
        .get("layer2.weight")
        .and_then(Value::as_tensor)
        .unwrap();
    assert_eq!(
        weight.as_slice::<f32>().unwrap()[7],
        (2 * (1 << 15) + 7) as f32
    );

    cut_to_a_page(&path);
    let error = torch_save::save(&loaded, dir.path().join("out.pt")).unwrap_err();
    assert!(
        matches!(error, Error::TorchSaveFile(FileError::SourceChanged { .. })),
        "{error}"
    );
}

#[test]
fn files_written_by_path_load_in_torch_as_the_originals_do() {
    let Some(python) = test_python("files_written_by_path_load_in_torch_as_the_originals_do")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let originals: Vec<PathBuf> = saved_fixtures()
        .into_iter()
        // Zip files, which stock torch loads all of (it refuses some of its
        // own legacy streams; `tests/convert.rs` compares those with their
        // zip sibling).
        .filter(|path| {
            let name = path.to_string_lossy();
            name.contains("torch-2.15.0") && name.ends_with(".zip.pt")
        })
        .collect();
    assert!(originals.len() > 25, "{} fixtures", originals.len());
    let mut paths = Vec::new();
    for (index, original) in originals.iter().enumerate() {
        let Ok(value) = torch_save::load(original) else {
            // Refused as from memory (the test above checks the two agree).
            continue;
        };
        let zip = dir.path().join(format!("{index}.zip.pt"));
        let legacy = dir.path().join(format!("{index}.legacy.pt"));
        if torch_save::save(&value, &zip).is_err() {
            // A value torch.save cannot write either (mixed dtypes).
            continue;
        }
        torch_save::save_as(&value, &legacy, TorchSaveFormat::Legacy).unwrap();
        paths.extend([original.clone(), zip, legacy]);
    }
    assert!(paths.len() > 75, "{} files", paths.len());
    let described = torch_describes(&python, &paths);
    assert_eq!(described.len(), paths.len());
    for (triple, files) in described.chunks(3).zip(paths.chunks(3)) {
        assert_eq!(triple[0], triple[1], "{}", files[1].display());
        assert_eq!(triple[0], triple[2], "{}", files[2].display());
    }
}

#[test]
fn torchscript_archives_are_named_as_such_in_one_short_line() {
    let Some(python) = test_python("torchscript_archives_are_named_as_such_in_one_short_line")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scripted.pt");
    // Six submodule classes of its own, plus torch's Linear: seven
    // `__torch__` globals in its data.pkl.
    // TorchScript compiles from source: the classes are written out.
    let mut script = String::from("import sys, torch\n");
    for i in 0..6 {
        script.push_str(&format!(
            "class Block{i}(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = torch.nn.Linear(2, 2)\n    def forward(self, x):\n        return self.fc(x)\n"
        ));
    }
    script.push_str(
        "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.blocks = torch.nn.Sequential(Block0(), Block1(), Block2(), Block3(), Block4(), Block5())\n    def forward(self, x):\n        return self.blocks(x)\ntorch.jit.save(torch.jit.script(Net()), sys.argv[1])\n",
    );
    let source = dir.path().join("make_scripted.py");
    std::fs::write(&source, script).unwrap();
    let output = std::process::Command::new(&python)
        .arg(&source)
        .arg(&path)
        .output()
        .unwrap();
    support::expect_success(&output, "torch.jit.save");
    let error = torch_save::load(&path).unwrap_err().to_string();
    assert!(
        error.contains(
            "a TorchScript archive: torch.jit.load reads it; tensorshare does not run TorchScript"
        ),
        "{error}"
    );
    assert!(error.contains(" more; nothing was executed"), "{error}");
    assert_eq!(error.matches("'__torch__.").count(), 4, "{error}");
    // Short past the file's name, however long the user's path is.
    let message = error
        .strip_prefix(&format!("{}: ", path.display()))
        .unwrap_or_else(|| panic!("not named by its file: {error}"));
    assert!(
        message.len() < 600,
        "{} characters: {message}",
        message.len()
    );
}
