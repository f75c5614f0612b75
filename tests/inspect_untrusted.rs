//! Untrusted inputs through `inspect`, `convert` and the rebuild walk:
//! shared references that would expand past any memory stay as small as
//! the pickle; globals outside the allowlist are all named, and with
//! `--opaque` shown with every call the pickle would make, nothing run.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use serde_json::{Value as Json, json};
use tensorshare::{Authkey, Registry, SharingContext, Value};

use support::{expect_success, test_python};

fn tensorshare(args: &[&str], input: &Path) -> Output {
    Command::new(support::tensorshare_exe())
        .args(args)
        .arg(input)
        .output()
        .unwrap()
}

/// `l = []`, then `depth` times `l = [l] * width`, pickled at protocol 2:
/// a few bytes per level, `width ** depth` leaves once expanded.
fn shared_list_bomb(depth: u32, width: usize) -> Vec<u8> {
    let mut pickle = b"\x80\x02]r\x00\x00\x00\x00".to_vec(); // EMPTY_LIST, LONG_BINPUT 0
    for level in 1..=depth {
        pickle.push(b'('); // MARK
        for _ in 0..width {
            pickle.push(b'j'); // LONG_BINGET level - 1
            pickle.extend_from_slice(&(level - 1).to_le_bytes());
        }
        pickle.push(b'l'); // LIST
        pickle.push(b'r'); // LONG_BINPUT level
        pickle.extend_from_slice(&level.to_le_bytes());
    }
    pickle.push(b'.');
    pickle
}

#[test]
fn shared_references_do_not_expand() {
    let bomb = shared_list_bomb(100, 10);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bomb.pkl");
    std::fs::write(&path, &bomb).unwrap();

    // The walk that `Connection::recv` and `Registry::loads` share.
    let started = Instant::now();
    let value = Registry::default().loads(&bomb).unwrap();
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    let mut inner = &value;
    for level in (1..=100).rev() {
        let items = inner
            .as_sequence()
            .unwrap_or_else(|| panic!("level {level}"));
        assert_eq!(items.len(), 10);
        assert!(
            items
                .iter()
                .all(|item| item.shared_identity() == items[0].shared_identity()),
            "level {level}: one list referenced ten times"
        );
        inner = &items[0];
    }
    assert_eq!(inner.as_sequence().map(<[Value]>::len), Some(0));
    assert_eq!(value.distinct().count(), 101);
    // The receiving side's walk, which attaches storages as it goes.
    let sharing = SharingContext::new(Authkey::random().unwrap());
    let received = sharing.loads(&bomb).unwrap();
    assert_eq!(received.distinct().count(), 101);
    // Sent on, it is written once per shared list, as pickle writes it.
    assert!(sharing.dumps(&received).unwrap().len() < 2 * bomb.len());

    // Both report forms are bounded by the input's size.
    let bound = 100 * bomb.len();
    let text = tensorshare(&["inspect"], &path);
    let text = expect_success(&text, "inspect");
    assert!(text.len() < bound, "{} bytes of text", text.len());
    assert!(text.contains("list #98, shown above"), "{text}");
    let json = tensorshare(&["inspect", "--json"], &path);
    let json = expect_success(&json, "inspect --json");
    assert!(json.len() < bound, "{} bytes of JSON", json.len());
    let mut deep = serde_json::Deserializer::from_str(&json);
    deep.disable_recursion_limit();
    let report = <Json as serde::Deserialize>::deserialize(&mut deep).unwrap();
    let outer = &report["object"];
    assert_eq!(outer.as_array().unwrap().len(), 10);
    assert_eq!(outer[0]["type"], "list");
    assert_eq!(outer[0]["id"], 0);
    assert_eq!(outer[1], json!({ "type": "list", "ref": 0 }));

    // convert writes the shared list once and memoizes it, as pickle does.
    let out = dir.path().join("bomb.pt");
    let converted = tensorshare(&["convert"], &path);
    assert!(!converted.status.success(), "convert needs an output");
    let converted = Command::new(support::tensorshare_exe())
        .arg("convert")
        .arg(&path)
        .arg(&out)
        .output()
        .unwrap();
    expect_success(&converted, "convert");
    let written = std::fs::metadata(&out).unwrap().len() as usize;
    assert!(written < bound, "{written} bytes written");
    if let Some(python) = test_python("shared_references_do_not_expand") {
        let check = "import sys, torch\n\
                     l = torch.load(sys.argv[1], weights_only=True)\n\
                     for level in range(100):\n\
                     \x20   assert len(l) == 10 and all(x is l[0] for x in l), level\n\
                     \x20   l = l[0]\n\
                     assert l == []\n\
                     print('ok')";
        let output = Command::new(python)
            .args(["-c", check])
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(expect_success(&output, "torch.load").trim(), "ok");
    }
}

/// `{'a': os.system('echo pwned'), 'b': builtins.eval}` pickled at
/// protocol 2, as CPython on Linux writes it.
const TWO_UNKNOWN_GLOBALS: &[u8] = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01cposix\nsystem\nq\x02X\n\x00\x00\x00echo pwnedq\x03\x85q\x04Rq\x05X\x01\x00\x00\x00bq\x06c__builtin__\neval\nq\x07u.";

#[test]
fn every_unknown_global_is_named() {
    let error = Registry::default()
        .loads(TWO_UNKNOWN_GLOBALS)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(
            "2 globals outside the allowlist: 'posix.system' at byte 14, \
             'builtins.eval' at byte 61"
        ),
        "{error}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evil.pkl");
    std::fs::write(&path, TWO_UNKNOWN_GLOBALS).unwrap();
    let output = tensorshare(&["inspect"], &path);
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("'posix.system' at byte 14, 'builtins.eval' at byte 61"),
        "{stderr}"
    );
    assert!(stderr.contains("inspect --opaque"), "{stderr}");
}

#[test]
fn opaque_shows_every_call_and_still_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evil.pkl");
    std::fs::write(&path, TWO_UNKNOWN_GLOBALS).unwrap();
    let output = tensorshare(&["inspect", "--opaque", "--json"], &path);
    assert_eq!(output.status.code(), Some(1));
    let report: Json = serde_json::from_slice(&output.stdout).unwrap();
    let items = &report["object"]["items"];
    assert_eq!(
        items[0],
        json!(["a", {"type": "call", "global": "posix.system", "opcode": "REDUCE", "args": ["echo pwned"]}])
    );
    assert_eq!(
        items[1],
        json!(["b", {"type": "global", "name": "builtins.eval", "allowed": false}])
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not plain data")
            && stderr.contains("2 globals outside the allowlist (posix.system, builtins.eval)")
            && stderr.contains("1 call"),
        "{stderr}"
    );

    let text = tensorshare(&["inspect", "--opaque"], &path);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("\"a\": call of posix.system by REDUCE, not made")
            && text.contains("arg[0] \"echo pwned\""),
        "{text}"
    );
}

#[test]
fn a_whole_module_shows_its_parameters_opaquely() {
    let Some(python) = test_python("a_whole_module_shows_its_parameters_opaquely") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.pt");
    let save = "import sys, torch\n\
                torch.manual_seed(0)\n\
                torch.save(torch.nn.Linear(2, 3), sys.argv[1])";
    let output = Command::new(python)
        .args(["-c", save])
        .arg(&path)
        .output()
        .unwrap();
    expect_success(&output, "torch.save(model)");

    let refused = tensorshare(&["inspect"], &path);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("torch.nn.modules.linear.Linear"),
        "{stderr}"
    );

    let output = tensorshare(&["inspect", "--opaque", "--json"], &path);
    assert_eq!(output.status.code(), Some(1));
    let report: Json = serde_json::from_slice(&output.stdout).unwrap();
    let model = &report["object"];
    assert_eq!(model["type"], "call");
    assert_eq!(model["global"], "torch.nn.modules.linear.Linear");
    assert_eq!(model["opcode"], "NEWOBJ");
    let tensors = report["tensors"].as_array().unwrap();
    let shapes: Vec<&Json> = tensors.iter().map(|t| &t["shape"]).collect();
    assert_eq!(shapes, [&json!([3, 2]), &json!([3])]);
    assert!(tensors.iter().all(|t| t["parameter"] == true));
}

#[test]
fn a_checkpoint_saved_on_a_gpu_says_where() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("compat/fixtures/saved_on_gpu/cuda0.zip.pt");
    let text = tensorshare(&["inspect"], &fixture);
    let text = expect_success(&text, "inspect");
    let tensor_lines: Vec<&str> = text.lines().filter(|l| l.contains("tensor #")).collect();
    assert!(tensor_lines.len() >= 4, "{text}");
    assert!(
        tensor_lines
            .iter()
            .all(|line| line.contains("shown above") || line.contains("saved on cuda:0")),
        "{text}"
    );
    // float32 elements at float32 precision, as torch shows them.
    assert!(text.contains("[-0.0037, 0.5, 2]"), "{text}");
    assert!(text.contains("[0.1, -2.5]"), "{text}");
}
