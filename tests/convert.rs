//! `tensorshare convert IN OUT [--legacy]`: the torch 1.13, 2.4 and 2.15
//! fixtures (zip, legacy and plain pickles) converted to both torch.save
//! formats load in stock torch with `weights_only=True` as the originals
//! do; pickles of shared storages convert while their sender lives and are
//! refused clearly once it is gone.

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;

use tensorshare::connection::AUTHKEY_ENV;
use tensorshare::model::{Storage, TensorView};
use tensorshare::torch_save;
use tensorshare::{Authkey, DType, Registry, SharingContext, StrategyKind, Tensor, Value};

use support::{expect_success, test_python, torch_describes};

fn convert(input: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(support::tensorshare_exe())
        .arg("convert")
        .arg(input)
        .arg(output)
        .args(extra)
        .env_remove(AUTHKEY_ENV)
        .output()
        .unwrap()
}

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures");
    let mut files = Vec::new();
    for version in [
        "torch-1.13.1",
        "torch-2.4.1",
        "torch-2.15.0",
        "saved_on_gpu",
    ] {
        for entry in std::fs::read_dir(root.join(version)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if [".zip.pt", ".legacy.pt", ".plain.pkl", ".plain_p2.pkl"]
                .iter()
                .any(|suffix| name.ends_with(suffix))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn converted_fixtures_load_in_torch_as_the_originals_do() {
    let Some(python) = test_python("converted_fixtures_load_in_torch_as_the_originals_do") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let originals = fixtures();
    assert!(originals.len() > 300, "{} fixtures", originals.len());
    // Per fixture: the original, its zip conversion, its legacy conversion.
    let mut paths = Vec::new();
    for (index, original) in originals.iter().enumerate() {
        let zip = dir.path().join(format!("{index}.zip.pt"));
        let legacy = dir.path().join(format!("{index}.legacy.pt"));
        let what = format!("convert {}", original.display());
        expect_success(&convert(original, &zip, &[]), &what);
        expect_success(&convert(original, &legacy, &["--legacy"]), &what);
        paths.extend([original.clone(), zip, legacy]);
    }
    let described = torch_describes(&python, &paths);
    assert_eq!(described.len(), paths.len());

    let by_path: HashMap<&Path, &Json> =
        paths.iter().map(PathBuf::as_path).zip(&described).collect();
    let mut torch_refuses = Vec::new();
    for (original, seen) in originals.iter().zip(described.chunks(3)) {
        let [before, zip, legacy] = seen else {
            unreachable!()
        };
        let mut expected = before;
        if before.get("error").is_some() {
            // Stock torch cannot load some originals itself (legacy streams
            // and plain pickles naming UntypedStorage): compare with what it
            // loads from the zip file of the same fixture.
            torch_refuses.push(original.display().to_string());
            let name = original.to_string_lossy();
            let stem = [".legacy.pt", ".plain.pkl", ".plain_p2.pkl"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or_else(|| panic!("{name}: {before}"));
            let sibling = PathBuf::from(format!("{stem}.zip.pt"));
            expected = by_path[sibling.as_path()];
            assert!(
                expected.get("error").is_none(),
                "{}: {expected}",
                sibling.display()
            );
        }
        assert_eq!(zip, expected, "zip conversion of {}", original.display());
        assert_eq!(
            legacy,
            expected,
            "legacy conversion of {}",
            original.display()
        );
    }
    eprintln!(
        "compared {} fixtures; torch itself refuses {} originals: {torch_refuses:?}",
        originals.len(),
        torch_refuses.len()
    );
}

#[test]
fn pickles_of_a_gone_sender_are_refused_clearly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures/torch-2.15.0");
    let dir = tempfile::tempdir().unwrap();
    for name in ["aliasing.fd.pkl", "aliasing.fs.pkl"] {
        let output = convert(&root.join(name), &dir.path().join("out.pt"), &[]);
        assert!(!output.status.success(), "{name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("cannot be reached")
                && stderr.contains("while the sending process is alive"),
            "{name}: {stderr}"
        );
        assert!(!dir.path().join("out.pt").exists(), "{name}");
    }
}

fn sample() -> Value {
    let bytes: Vec<u8> = (0..12)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let storage = Storage::from_vec(bytes);
    let whole = Tensor::new(
        storage.clone(),
        TensorView::contiguous(DType::Float32, &[3, 4]),
    )
    .unwrap();
    let row = Tensor::new(
        storage,
        TensorView {
            storage_offset: 4,
            ..TensorView::contiguous(DType::Float32, &[4])
        },
    )
    .unwrap();
    Value::List(vec![Value::Tensor(whole), Value::Tensor(row)].into())
}

#[test]
fn shared_pickles_convert_while_their_sender_lives() {
    support::build_manager_executable();
    let authkey = Authkey::random().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for strategy in [StrategyKind::FileDescriptor, StrategyKind::FileSystem] {
        let sharing = SharingContext::new(authkey.clone()).with_strategy(strategy);
        let value = sample();
        let pickle = dir.path().join("shared.pkl");
        for legacy in [false, true] {
            // A file_descriptor share is fetched once: one pickle per convert.
            std::fs::write(&pickle, sharing.dumps(&value).unwrap()).unwrap();
            let out = dir.path().join("out.pt");
            let mut extra = vec!["--authkey".to_owned(), authkey.to_hex()];
            if legacy {
                extra.push("--legacy".to_owned());
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            expect_success(&convert(&pickle, &out, &extra), &format!("{strategy:?}"));
            let (_, loaded) =
                torch_save::from_bytes_with(&std::fs::read(&out).unwrap(), &Registry::default())
                    .unwrap();
            let Value::List(items) = loaded else {
                panic!("{loaded:?}")
            };
            let [Value::Tensor(whole), Value::Tensor(row)] = &items[..] else {
                panic!("{items:?}")
            };
            assert!(
                whole.storage().same_as(row.storage()),
                "{strategy:?}: aliasing kept"
            );
            let Value::List(expected) = &value else {
                unreachable!()
            };
            for (got, want) in [whole, row].into_iter().zip(expected.iter()) {
                let Value::Tensor(want) = want else {
                    unreachable!()
                };
                assert_eq!(got.view(), want.view());
                assert_eq!(got.to_contiguous_bytes(), want.to_contiguous_bytes());
            }
        }
    }
}

/// `convert IN -` and `convert - -`: the torch.save file on stdout and
/// nothing else there; the status line on stderr, for a file output too.
#[test]
fn convert_writes_to_stdout_and_reports_on_stderr() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures/torch-2.15.0");
    let input = root.join("aliasing.zip.pt");
    let dir = tempfile::tempdir().unwrap();

    let to_file = dir.path().join("file.pt");
    let file_output = convert(&input, &to_file, &[]);
    expect_success(&file_output, "convert to a file");
    assert!(file_output.stdout.is_empty(), "stdout: {file_output:?}");
    assert!(
        String::from_utf8_lossy(&file_output.stderr).contains("wrote"),
        "{file_output:?}"
    );
    let file = std::fs::read(&to_file).unwrap();

    let output = convert(&input, Path::new("-"), &[]);
    assert!(output.status.success(), "{output:?}");
    let zip = output.stdout;
    assert!(zip.starts_with(b"PK\x03\x04"), "not a zip: {:?}", &zip[..8]);
    // The end-of-central-directory record, with no comment, ends the output.
    assert_eq!(
        zip.get(zip.len() - 22..zip.len() - 18),
        Some(&b"PK\x05\x06"[..])
    );
    // Only the random serialization id differs from the file's bytes.
    assert_eq!(zip.len(), file.len());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("wrote") && stderr.contains(&zip.len().to_string()),
        "{stderr}"
    );

    // `-` in and out, legacy: the same bytes as written to a file.
    let legacy_file = dir.path().join("legacy.pt");
    expect_success(
        &convert(&input, &legacy_file, &["--legacy"]),
        "convert --legacy",
    );
    let mut child = Command::new(support::tensorshare_exe())
        .args(["convert", "-", "-", "--legacy"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        &std::fs::read(&input).unwrap(),
    )
    .unwrap();
    let legacy = child.wait_with_output().unwrap();
    assert!(legacy.status.success(), "{legacy:?}");
    assert_eq!(legacy.stdout, std::fs::read(&legacy_file).unwrap());

    let Some(python) = test_python("convert_writes_to_stdout_and_reports_on_stderr") else {
        return;
    };
    // Stock torch loads what came out of stdout, from memory.
    for data in [&zip, &legacy.stdout] {
        let mut torch = Command::new(&python)
            .args([
                "-c",
                "import io, sys, torch\n\
                 value = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)\n\
                 print(type(value).__name__)",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut torch.stdin.take().unwrap(), data).unwrap();
        let loaded = torch.wait_with_output().unwrap();
        expect_success(&loaded, "torch.load(io.BytesIO(stdout))");
    }
    // And it holds what the original holds.
    let from_stdout = dir.path().join("stdout.pt");
    std::fs::write(&from_stdout, &zip).unwrap();
    let described = torch_describes(&python, &[input, from_stdout]);
    assert_eq!(described[0], described[1]);
}

/// `convert` takes the sender's authkey as `echo` does: from
/// TENSORSHARE_AUTHKEY, `--authkey-file` or `--authkey`, one at most.
#[test]
fn convert_takes_the_authkey_as_echo_does() {
    let authkey = Authkey::random().unwrap();
    let hex = authkey.to_hex();
    let sharing = SharingContext::new(authkey.clone());
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("authkey");
    std::fs::write(&key_file, format!("{hex}\n")).unwrap();
    let pickle = dir.path().join("shared.pkl");
    let out = dir.path().join("out.pt");
    let run = |args: &[&str], env: Option<&str>| {
        // A file_descriptor share is fetched once: one pickle per convert.
        std::fs::write(&pickle, sharing.dumps(&sample()).unwrap()).unwrap();
        let mut command = Command::new(support::tensorshare_exe());
        command
            .arg("convert")
            .arg(&pickle)
            .arg(&out)
            .args(args)
            .env_remove(AUTHKEY_ENV);
        if let Some(value) = env {
            command.env(AUTHKEY_ENV, value);
        }
        command.output().unwrap()
    };
    expect_success(&run(&[], Some(&hex)), "the authkey from the environment");
    expect_success(
        &run(&["--authkey-file", key_file.to_str().unwrap()], None),
        "the authkey from a file",
    );
    for (args, env) in [
        (vec!["--authkey", hex.as_str()], Some(hex.as_str())),
        (
            vec!["--authkey-file", key_file.to_str().unwrap()],
            Some(&hex),
        ),
        (
            vec![
                "--authkey",
                &hex,
                "--authkey-file",
                key_file.to_str().unwrap(),
            ],
            None,
        ),
    ] {
        let output = run(&args, env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains("Usage: tensorshare convert"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn checkpoints_saved_on_a_gpu_convert_to_cpu_storages_and_say_so() {
    let gpu = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures/saved_on_gpu");
    let dir = tempfile::tempdir().unwrap();
    for (name, location) in [("cuda0.zip.pt", "cuda:0"), ("mps.legacy.pt", "mps")] {
        let out = dir.path().join(name);
        let output = convert(&gpu.join(name), &out, &[]);
        expect_success(&output, name);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("4 saved on {location}"))
                && stderr.contains("map_location=\"cpu\""),
            "{name}: {stderr}"
        );
        // Written as CPU storages: read back, they say they were saved on cpu.
        let bytes = std::fs::read(&out).unwrap();
        let (_, value) = torch_save::from_bytes_with(&bytes, &Registry::default()).unwrap();
        let locations: Vec<_> = value
            .tensors()
            .iter()
            .map(|t| t.storage().saved_location().map(str::to_owned))
            .collect();
        assert!(!locations.is_empty());
        assert!(
            locations.iter().all(|l| l.as_deref() == Some("cpu")),
            "{locations:?}"
        );
    }
}

/// Saves a module's state dict as torch does, zip and legacy; prints its
/// `_metadata`.
const SAVE_STATE_DICT: &str = r#"
import json, sys, torch
torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
state = module.state_dict()
torch.save(state, sys.argv[1])
torch.save(state, sys.argv[2], _use_new_zipfile_serialization=False)
print(json.dumps(state._metadata))
"#;

/// Loads each file with `weights_only=True` into a fresh module, strictly,
/// and prints each one's `_metadata` (null when it has none) once the
/// module's tensors are the file's.
const LOAD_STATE_DICTS: &str = r#"
import json, sys, torch
seen = []
for path in sys.argv[1:]:
    state = torch.load(path, weights_only=True)
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    module.load_state_dict(state, strict=True)
    for name, tensor in module.state_dict().items():
        assert torch.equal(tensor, state[name]), (path, name)
    seen.append(getattr(state, "_metadata", None))
print(json.dumps(seen))
"#;

/// A module's `state_dict()` converted to both torch.save formats keeps its
/// `_metadata` (each submodule's version, which `load_state_dict` passes
/// on), so it loads into the module exactly as the original does; to
/// safetensors, which has no place for it, the command says so.
#[test]
fn a_state_dicts_metadata_survives_convert() {
    let Some(python) = test_python("a_state_dicts_metadata_survives_convert") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("state.pt");
    let legacy = dir.path().join("state.legacy.pt");
    let saved = support::python_output_for(
        &python,
        SAVE_STATE_DICT,
        &[zip.to_str().unwrap(), legacy.to_str().unwrap()],
        b"",
        "torch.save of a state dict",
    );
    let metadata: Json = serde_json::from_str(saved.trim()).unwrap();
    assert_eq!(
        metadata["1"]["version"], 2,
        "BatchNorm's version: {metadata}"
    );
    let mut converted = Vec::new();
    for original in [&zip, &legacy] {
        for (extra, suffix) in [(&[][..], "zip.pt"), (&["--legacy"][..], "legacy.pt")] {
            let name = format!(
                "{}.{suffix}",
                original.file_stem().unwrap().to_string_lossy()
            );
            let out = dir.path().join(name);
            expect_success(&convert(original, &out, extra), "convert a state dict");
            converted.push(out.to_str().unwrap().to_owned());
        }
    }
    let args: Vec<&str> = converted.iter().map(String::as_str).collect();
    let loaded = support::python_output_for(
        &python,
        LOAD_STATE_DICTS,
        &args,
        b"",
        "load_state_dict of the converted files",
    );
    let loaded: Vec<Json> = serde_json::from_str(loaded.trim()).unwrap();
    for (path, seen) in converted.iter().zip(&loaded) {
        assert_eq!(seen, &metadata, "{path}");
    }

    let safetensors = dir.path().join("state.safetensors");
    let output = convert(&zip, &safetensors, &[]);
    let stderr = expect_success(&output, "convert to safetensors");
    let stderr = format!("{stderr}{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        stderr.contains("not written: the state dict's `_metadata`"),
        "{stderr}"
    );
}
