//! `.safetensors` files: hostile headers refused with a reason and no panic,
//! `tensorshare convert` to and from safetensors, and interop with stock
//! torch and the `safetensors` Python package: a GPU-saved state dict
//! converted by the command loads with `safetensors.torch.load_file` as
//! `torch.load(map_location="cpu")` loads the original, and a file
//! `save_file` wrote converts to a torch.save file torch loads equal.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use proptest::prelude::*;
use serde_json::Value as Json;

use tensorshare::model::{Storage, TensorView};
use tensorshare::safetensors::{SafetensorsError, SafetensorsFile, from_bytes, to_bytes};
use tensorshare::{DType, Tensor, Value};

use support::{expect_success, python_script, test_python};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("compat/fixtures/saved_on_gpu")
        .join(name)
}

fn tensorshare(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(support::tensorshare_exe())
        .args(args)
        .output()
        .unwrap()
}

fn convert(input: &Path, output: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["convert".as_ref(), input.as_os_str(), output.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    tensorshare(&args)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A file of `header` (JSON) and `data`, its length first.
fn file_of(header: &str, data: &[u8]) -> Vec<u8> {
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(data);
    file
}

fn sample() -> Value {
    let floats: Vec<u8> = (0..6u8).flat_map(|i| f32::from(i).to_le_bytes()).collect();
    let weight = Tensor::new(
        Storage::from_vec(floats),
        TensorView::contiguous(DType::Float32, &[2, 3]),
    )
    .unwrap();
    let ids = Tensor::new(
        Storage::from_vec(vec![1, 0, 0, 0, 0, 0, 0, 0]),
        TensorView::contiguous(DType::Int64, &[1]),
    )
    .unwrap();
    Value::OrderedDict(
        vec![
            (Value::Str("weight".into()), Value::Tensor(weight)),
            (Value::Str("ids".into()), Value::Tensor(ids)),
        ]
        .into(),
        Default::default(),
    )
}

/// Every kind of lie a header can tell, each refused with an error that
/// says what is wrong.
#[test]
fn hostile_headers_are_refused_with_a_reason() {
    let f32x2 = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    let mut gigabyte = (1u64 << 30).to_le_bytes().to_vec();
    gigabyte.extend_from_slice(b"{\"a\":1}");
    // Buffered whole by serde's `flatten` before any field is checked.
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "0 bytes, fewer than the 8"),
        ("seven bytes", vec![1; 7], "7 bytes, fewer than the 8"),
        (
            "a header length of u64::MAX",
            huge,
            "header of 18446744073709551615 bytes, but 2 bytes follow",
        ),
        (
            "a header length of 1 GiB in 15 bytes",
            gigabyte,
            "header of 1073741824 bytes, but 7 bytes follow",
        ),
        (
            "a truncated header",
            file_of(f32x2, &[0; 8])[..20].to_vec(),
            "is truncated or is not a safetensors file",
        ),
        (
            "truncated data",
            file_of(f32x2, &[0; 5]),
            "places its tensors' bytes in 8 bytes, but the file has 5",
        ),
        (
            "trailing bytes",
            file_of(f32x2, &[0; 12]),
            "places its tensors' bytes in 8 bytes, but the file has 12",
        ),
        (
            "offsets past the data",
            file_of(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}"#,
                &[0; 8],
            ),
            "places its tensors' bytes in 16 bytes, but the file has 8",
        ),
        (
            "overlapping tensors",
            file_of(
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                &[0; 12],
            ),
            "invalid offset for tensor `b`",
        ),
        (
            "a gap between tensors",
            file_of(
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#,
                &[0; 12],
            ),
            "invalid offset for tensor `b`",
        ),
        (
            "an end before the start",
            file_of(
                r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}"#,
                &[0; 4],
            ),
            "invalid offset for tensor `a`",
        ),
        (
            "a shape that disagrees with the offsets",
            file_of(
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                &[0; 8],
            ),
            "invalid shape, data type, or offset for tensor",
        ),
        (
            "a shape whose size overflows",
            file_of(
                r#"{"a":{"dtype":"F64","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}"#,
                &[0; 8],
            ),
            "overflow computing buffer size",
        ),
        (
            "a negative dimension",
            file_of(
                r#"{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}"#,
                &[0],
            ),
            "invalid safetensors header: invalid value: integer `-1`",
        ),
        (
            "an unknown dtype",
            file_of(
                r#"{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}"#,
                &[0; 16],
            ),
            "unknown variant `F128`",
        ),
        (
            "a dtype torch lacks",
            file_of(
                r#"{"a":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}}"#,
                &[0; 3],
            ),
            "tensor `a`: safetensors dtype F6_E2M3 has no torch dtype",
        ),
        (
            "F4 with an odd last dimension",
            file_of(
                r#"{"a":{"dtype":"F4","shape":[2,1],"data_offsets":[0,1]}}"#,
                &[0],
            ),
            "F4 shape [2, 1] has no even last dimension",
        ),
        (
            "a header that is not JSON",
            file_of("{not json", &[]),
            "invalid safetensors header: key must be a string",
        ),
        (
            "a header that is not UTF-8",
            {
                let mut file = 6u64.to_le_bytes().to_vec();
                file.extend_from_slice(b"{\"\xff\":1}");
                file
            },
            "invalid safetensors header",
        ),
        (
            "metadata that is not text",
            file_of(r#"{"__metadata__":{"n":1}}"#, &[]),
            "invalid type: integer `1`, expected a string",
        ),
        (
            "JSON nested past serde_json's limit",
            file_of(&deep, &[]),
            "recursion limit exceeded",
        ),
    ];
    for (what, bytes, expected) in cases {
        let error = match SafetensorsFile::from_bytes(&bytes) {
            Ok(file) => panic!("{what}: accepted: {file:?}"),
            Err(error) => error.to_string(),
        };
        assert!(
            error.contains(expected),
            "{what}: {error}\nwanted: {expected}"
        );
    }
}

#[test]
fn hostile_files_fail_the_commands_with_one_line_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let lying = dir.path().join("lying.safetensors");
    let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    std::fs::write(&lying, &bytes).unwrap();
    let overlapping = dir.path().join("overlapping.safetensors");
    std::fs::write(
        &overlapping,
        file_of(
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
            &[0; 6],
        ),
    )
    .unwrap();
    for (file, expected) in [
        (&lying, "header of 1099511627776 bytes, but 2 bytes follow"),
        (&overlapping, "invalid offset for tensor `b`"),
    ] {
        let out = dir.path().join("out.pt");
        for output in [
            tensorshare(&["inspect".as_ref(), file.as_os_str()]),
            convert(file, &out, &[]),
        ] {
            let stderr = stderr(&output);
            assert_eq!(output.status.code(), Some(1), "{stderr}");
            assert!(
                stderr.starts_with("error: ")
                    && stderr.contains(expected)
                    && stderr.lines().count() == 1
                    && !stderr.contains("panicked"),
                "{stderr}"
            );
        }
        assert!(!out.exists());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A valid file with bytes changed or cut off is read or refused, never
    /// a panic, and what is read fits its storages.
    #[test]
    fn bent_files_never_panic(
        cut in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        truncate in any::<bool>(),
    ) {
        let mut bytes = to_bytes(&sample()).unwrap();
        for (at, value) in flips {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        if let Ok(value) = from_bytes(&bytes) {
            for tensor in value.tensors() {
                let nbytes = tensor.numel() * tensor.dtype().element_size();
                prop_assert!(nbytes <= tensor.storage().nbytes());
            }
        }
    }

    /// State dicts of random float32 tensors read back as they were written.
    #[test]
    fn state_dicts_round_trip(
        tensors in prop::collection::btree_map("[a-z.]{1,12}", prop::collection::vec(any::<f32>(), 0..20), 0..6),
    ) {
        let items: Vec<(Value, Value)> = tensors
            .iter()
            .map(|(name, floats)| {
                let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
                let t = Tensor::new(
                    Storage::from_vec(bytes),
                    TensorView::contiguous(DType::Float32, &[floats.len()]),
                )
                .unwrap();
                (Value::Str(name.as_str().into()), Value::Tensor(t))
            })
            .collect();
        let back = from_bytes(&to_bytes(&Value::Dict(items.into())).unwrap()).unwrap();
        let Value::Dict(back) = back else { panic!("a dict") };
        prop_assert_eq!(back.len(), tensors.len());
        for (name, value) in back.iter() {
            let floats = &tensors[name.as_str().unwrap()];
            let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
            prop_assert_eq!(value.as_tensor().unwrap().storage().bytes().unwrap(), &bytes[..]);
        }
    }
}

#[test]
fn convert_writes_safetensors_by_extension_or_flag_and_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let state_dict = fixture("cuda0_state_dict.zip.pt");
    let by_name = dir.path().join("model.safetensors");
    let output = convert(&state_dict, &by_name, &[]);
    expect_success(&output, "convert to .safetensors");
    let stderr = stderr(&output);
    assert!(
        stderr.starts_with("wrote ")
            && stderr.contains("(safetensors, 11 tensors,")
            && stderr.contains("8 saved on cuda:0")
            && stderr.contains("model.embed_tokens.weight = lm_head.weight"),
        "{stderr}"
    );
    // Permissions as for any file the command writes.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&by_name).unwrap().permissions().mode();
    assert_ne!(mode & 0o044, 0, "{mode:o}");

    // --safetensors to stdout: the same bytes.
    let piped = Command::new(support::tensorshare_exe())
        .args(["convert", "--safetensors"])
        .arg(&state_dict)
        .arg("-")
        .output()
        .unwrap();
    expect_success(&piped, "convert --safetensors to stdout");
    assert_eq!(piped.stdout, std::fs::read(&by_name).unwrap());
    let said = String::from_utf8_lossy(&piped.stderr);
    let counted = format!(
        "wrote stdout (safetensors, 11 tensors, {} bytes)",
        piped.stdout.len()
    );
    assert!(said.contains(&counted), "{said}");

    // Back to torch.save: every name, in the file's order.
    let back = dir.path().join("back.pt");
    expect_success(&convert(&by_name, &back, &[]), "convert from .safetensors");
    let bytes = std::fs::read(&back).unwrap();
    let (_, value) =
        tensorshare::torch_save::from_bytes_with(&bytes, &tensorshare::Registry::default())
            .unwrap();
    let Value::Dict(items) = value else {
        panic!("a dict")
    };
    assert_eq!(items.len(), 11);

    // inspect --json says what it is.
    let report = tensorshare(&["inspect".as_ref(), "--json".as_ref(), by_name.as_os_str()]);
    let report: Json =
        serde_json::from_slice(&expect_success(&report, "inspect").into_bytes()).unwrap();
    assert_eq!(report["format"], "safetensors");
    assert_eq!(report["tensors"].as_array().unwrap().len(), 11);
}

#[test]
fn checkpoints_convert_through_key_and_refusals_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = fixture("cuda0.zip.pt");
    let out = dir.path().join("model.safetensors");

    let refused = convert(&checkpoint, &out, &[]);
    assert_eq!(refused.status.code(), Some(1));
    let message = stderr(&refused);
    assert!(
        message.contains("`model` is a dict, not a tensor")
            && message.contains("convert one with `--key model`"),
        "{message}"
    );
    assert!(!out.exists());

    expect_success(
        &convert(&checkpoint, &out, &["--key", "model"]),
        "--key model",
    );
    let file = SafetensorsFile::load(&out).unwrap();
    assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));
    assert_eq!(file.tensors.tensors().len(), 3);

    let missing = convert(&checkpoint, &out, &["--key", "state_dict"]);
    assert!(
        stderr(&missing).contains("has no key `state_dict` (its str keys: `model`, `table`"),
        "{}",
        stderr(&missing)
    );
    let not_a_dict = convert(&checkpoint, &out, &["--key", "step", "--key", "x"]);
    assert!(
        stderr(&not_a_dict).contains("--key x: the input[\"step\"] is an int, not a dict"),
        "{}",
        stderr(&not_a_dict)
    );
    // --key works for torch.save output too.
    let pt = dir.path().join("model.pt");
    expect_success(
        &convert(&checkpoint, &pt, &["--key", "model"]),
        "--key to .pt",
    );

    // --legacy writes a torch.save file: not with a .safetensors OUT.
    let conflict = convert(&checkpoint, &out, &["--legacy", "--key", "model"]);
    assert_eq!(conflict.status.code(), Some(2));
    assert!(stderr(&conflict).contains("--legacy writes a torch.save file"));
    let conflict = convert(&checkpoint, &pt, &["--legacy", "--safetensors"]);
    assert_eq!(conflict.status.code(), Some(2));
}

/// Runs `safetensors_interop.py` with `args`; its JSON line.
fn interop(python: &str, args: &[&std::ffi::OsStr]) -> Json {
    let output = Command::new(python)
        .arg(python_script("safetensors_interop.py"))
        .args(args)
        .output()
        .unwrap();
    let stdout = expect_success(&output, "safetensors_interop.py");
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[test]
fn a_gpu_saved_state_dict_converts_to_what_load_file_reads_as_torch_load_does() {
    let Some(python) =
        test_python("a_gpu_saved_state_dict_converts_to_what_load_file_reads_as_torch_load_does")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("cuda0_state_dict.zip.pt");
    let out = dir.path().join("model.safetensors");
    expect_success(&convert(&input, &out, &[]), "convert");
    let compared = interop(
        &python,
        &["compare".as_ref(), out.as_os_str(), input.as_os_str()],
    );
    assert_eq!(
        compared["keys"].as_array().map(Vec::len),
        Some(11),
        "{compared}"
    );

    // A checkpoint's state dict, picked with --key.
    let checkpoint = fixture("cuda0.legacy.pt");
    expect_success(
        &convert(&checkpoint, &out, &["--key", "model"]),
        "convert --key",
    );
    let compared = interop(
        &python,
        &[
            "compare".as_ref(),
            out.as_os_str(),
            checkpoint.as_os_str(),
            "--key".as_ref(),
            "model".as_ref(),
        ],
    );
    assert_eq!(
        compared["keys"].as_array().map(Vec::len),
        Some(3),
        "{compared}"
    );
}

#[test]
fn files_save_file_wrote_convert_to_torch_save_files_torch_loads_equal() {
    let Some(python) =
        test_python("files_save_file_wrote_convert_to_torch_save_files_torch_loads_equal")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("python.safetensors");
    let expected = dir.path().join("expected.pt");
    interop(
        &python,
        &["write".as_ref(), written.as_os_str(), expected.as_os_str()],
    );

    for legacy in [false, true] {
        let converted = dir.path().join("converted.pt");
        let extra: &[&str] = if legacy { &["--legacy"] } else { &[] };
        expect_success(&convert(&written, &converted, extra), "convert to .pt");
        let compared = interop(
            &python,
            &[
                "compare".as_ref(),
                converted.as_os_str(),
                expected.as_os_str(),
            ],
        );
        assert_eq!(
            compared["keys"].as_array().map(Vec::len),
            Some(22),
            "{compared}"
        );
    }

    // Written back from torch.save, every tensor is where save_file put it:
    // the same dtype, shape and byte range (F4's doubled last dimension
    // and the dtypes load_file cannot read included).
    let ours = dir.path().join("ours.safetensors");
    expect_success(&convert(&expected, &ours, &[]), "convert to .safetensors");
    let header = |path: &Path| -> Json {
        let bytes = std::fs::read(path).unwrap();
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mut json: Json = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
        json.as_object_mut().unwrap().remove("__metadata__");
        json
    };
    assert_eq!(header(&ours), header(&written));
    let metadata = SafetensorsFile::load(&written).unwrap().metadata;
    assert_eq!(
        metadata.get("written_by").map(String::as_str),
        Some("safetensors_interop.py")
    );
}

#[test]
fn the_facade_error_wraps_the_safetensors_error() {
    let error = from_bytes(b"short").unwrap_err();
    assert!(matches!(
        error,
        tensorshare::Error::Safetensors(SafetensorsError::TooShort { len: 5 })
    ));
    let missing = SafetensorsFile::load("/nonexistent/model.safetensors").unwrap_err();
    let error = tensorshare::Error::from(missing);
    assert_eq!(
        error.io_error().map(std::io::Error::kind),
        Some(std::io::ErrorKind::NotFound)
    );
}

/// A `.pt` given to the safetensors reader, zip or legacy, is named for what
/// it is, with the reader to use, not read as an absurd header length.
#[test]
fn a_torch_save_file_is_named_as_one() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures/torch-2.15.0");
    for (name, starts) in [
        ("dtype_float32.zip.pt", "a zip archive"),
        ("dtype_float32.legacy.pt", "the legacy magic number"),
    ] {
        let path = fixtures.join(name);
        let error = tensorshare::safetensors::load(&path).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(
                &error,
                tensorshare::Error::InFile { path: named, cause } if *named == path && matches!(
                    **cause,
                    tensorshare::Error::Safetensors(SafetensorsError::TorchSave { .. })
                )
            ),
            "{name}: {message}"
        );
        for expected in [starts, "torch.save", "torch_save::load"] {
            assert!(message.contains(expected), "{name}: {message}");
        }
    }
}
