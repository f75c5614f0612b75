//! Loading many files, a user must tell which one failed and why: every
//! error of `torch_save::load` and `safetensors::load` names the file once,
//! a refused global says where the pickle names it, and the command prints
//! each as the library says it, with the path once.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use tensorshare::registry::{RebuildError, RefusedGlobal};
use tensorshare::torch_save::{self, TorchSaveFormat};
use tensorshare::{Dict, Error, StrategyKind, Tensor, Value};

use support::{expect_success, tensorshare_exe, test_python};

/// A small checkpoint as `torch_save::save` writes it.
fn checkpoint(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let weight = Tensor::from_slice(&StrategyKind::Bytes, &[1.5f32; 4096], &[64, 64]).unwrap();
    let value: Value = Dict::new().with("fc.weight", weight).into();
    std::fs::write(
        &path,
        torch_save::to_bytes(&value, TorchSaveFormat::Zip).unwrap(),
    )
    .unwrap();
    path
}

/// `error` as printed, which must start by naming `path` and name it once.
fn names_the_file_once(error: &Error, path: &Path) -> String {
    let message = error.to_string();
    let shown = path.display().to_string();
    assert!(
        message.starts_with(&format!("{shown}: ")),
        "the error does not start with its file: {message}"
    );
    assert_eq!(message.matches(&shown).count(), 1, "{message}");
    message
}

/// The command's `error: ` line for `args`, which must fail.
fn command_error(args: &[&str]) -> String {
    let output = Command::new(tensorshare_exe()).args(args).output().unwrap();
    assert!(!output.status.success(), "tensorshare {args:?} succeeded");
    String::from_utf8_lossy(&output.stderr)
        .trim_end()
        .to_owned()
}

#[test]
fn a_truncated_file_is_named_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint(dir.path(), "truncated.pt");
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();

    let error = torch_save::load(&path).expect_err("half a checkpoint loaded");
    let message = names_the_file_once(&error, &path);
    assert!(
        matches!(&error, Error::InFile { cause, .. } if matches!(**cause, Error::TorchSave(_))),
        "{error:?}"
    );
    assert!(message.contains("torch.save archive: "), "{message}");

    let shown = path.display().to_string();
    let printed = command_error(&[
        "convert",
        &shown,
        &dir.path().join("out.pt").display().to_string(),
    ]);
    assert_eq!(printed, format!("error: {message}"));
}

#[test]
fn random_bytes_are_named_as_not_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("random.pt");
    // An xorshift stream: no zip, no pickle, the same on every run.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(&path, &bytes).unwrap();

    let error = torch_save::load(&path).expect_err("random bytes loaded");
    let message = names_the_file_once(&error, &path);
    assert!(matches!(error, Error::InFile { .. }), "{error:?}");

    // The command reads what is not a torch.save file as any pickle, and
    // says so, naming the file once all the same.
    let shown = path.display().to_string();
    let printed = command_error(&["inspect", &shown]);
    assert!(
        printed.starts_with(&format!("error: {shown}: pickle refused: ")),
        "{printed}"
    );
    assert_eq!(printed.matches(&shown).count(), 1, "{printed}");
    assert!(message.contains("not a torch.save file"), "{message}");
}

#[test]
fn a_torch_save_file_given_as_safetensors_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = checkpoint(dir.path(), "model.safetensors");

    let error = tensorshare::safetensors::load(&path).expect_err("a .pt loaded as safetensors");
    let message = names_the_file_once(&error, &path);
    assert!(
        message.contains("not a safetensors file: it starts as a torch.save file does"),
        "{message}"
    );

    let shown = path.display().to_string();
    let printed = command_error(&["inspect", &shown]);
    assert_eq!(printed, format!("error: {message}"));
}

#[test]
fn a_missing_file_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.pt");
    let error = torch_save::load(&path).expect_err("a missing file loaded");
    let message = error.to_string();
    assert!(message.starts_with("cannot read "), "{message}");
    assert_eq!(
        message.matches(&path.display().to_string()).count(),
        1,
        "{message}"
    );
    assert!(error.io_error().is_some(), "{error:?}");
}

/// Writes, with torch, a checkpoint whose pickle calls `os.system` when
/// `torch.load(weights_only=False)` reads it, and prints the byte of its
/// `data.pkl` where the pickle names `posix.system`.
const MALICIOUS: &str = r#"
import os, pickletools, sys, zipfile, torch

class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))

torch.save({"weight": torch.ones(2), "hook": Payload()}, sys.argv[1])
with zipfile.ZipFile(sys.argv[1]) as archive:
    name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
    pickle = archive.read(name)
for op, arg, pos in pickletools.genops(pickle):
    if op.name == "GLOBAL" and arg == "posix system":
        print(pos)
        break
"#;

#[test]
fn a_malicious_checkpoint_is_named_with_where_its_pickle_names_the_global() {
    let Some(python) =
        test_python("a_malicious_checkpoint_is_named_with_where_its_pickle_names_the_global")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("malicious.pt");
    let output = Command::new(&python)
        .args(["-c", MALICIOUS])
        .arg(&path)
        .output()
        .unwrap();
    let offset: usize = expect_success(&output, "torch.save of a payload")
        .trim()
        .parse()
        .expect("the script prints the GLOBAL's offset");

    let error = torch_save::load(&path).expect_err("a malicious checkpoint loaded");
    let message = names_the_file_once(&error, &path);
    let Error::InFile { cause, .. } = &error else {
        panic!("not named by its file: {error:?}");
    };
    let Error::Rebuild(RebuildError::NotAllowed(refused)) = &**cause else {
        panic!("not refused for its global: {cause:?}");
    };
    assert_eq!(
        refused
            .iter()
            .map(|RefusedGlobal { global, offset }| (global.to_string(), *offset))
            .collect::<Vec<_>>(),
        [("posix.system".to_owned(), Some(offset))]
    );
    assert!(
        message.contains(&format!("'posix.system' at byte {offset}")),
        "{message}"
    );
    assert!(message.contains("nothing was executed"), "{message}");

    let shown = path.display().to_string();
    let printed = command_error(&["inspect", &shown]);
    assert_eq!(printed, format!("error: {message}"));
}
