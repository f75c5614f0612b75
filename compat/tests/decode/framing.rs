//! Protocol 4 frames, enforced as CPython's pure-Python unpickler
//! (`pickle._Unframer`) enforces them. Each case carries what
//! `pickle._loads` says of it; with `TENSORSHARE_TEST_PYTHON` set, the
//! interpreter is asked again. `_pickle.c` checks no frame: where the
//! pure-Python unpickler refuses, `pickle.loads` reads on.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use tensorshare_compat::pickle::{DecodeError, DecodeErrorCode, Limits, decode};

use super::support::{allow_all, hex, render_root};
use super::test_python::test_python;

/// `FRAME` announcing `len` bytes.
fn frame(len: u64) -> Vec<u8> {
    [&[0x95][..], &len.to_le_bytes()].concat()
}

/// `PROTO 4`, then `parts`.
fn p4(parts: &[&[u8]]) -> Vec<u8> {
    [&b"\x80\x04"[..], &parts.concat()].concat()
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    /// What we decode (the root as JSON), or the error.
    ours: Result<Value, DecodeError>,
    /// What `pickle._loads` gives: the value's repr, or the error message.
    cpython: &'static str,
}

fn crosses(offset: usize, frame_end: usize) -> Result<Value, DecodeError> {
    Err(DecodeError {
        offset,
        code: DecodeErrorCode::CrossesFrameEnd { frame_end },
    })
}

fn inside(offset: usize, frame_end: usize) -> Result<Value, DecodeError> {
    Err(DecodeError {
        offset,
        code: DecodeErrorCode::FrameInsideFrame { frame_end },
    })
}

const EXHAUSTED: &str = "pickle exhausted before end of frame";
const NEW_FRAME: &str = "beginning of a new frame before end of current frame";

fn cases() -> Vec<Case> {
    vec![
        // Refused: the frame (bytes 11..14) ends inside SHORT_BINUNICODE's
        // text. pickle.loads: 'abc'.
        Case {
            name: "argument_crosses_the_frame_end",
            bytes: p4(&[&frame(3), b"\x8c\x03abc."]),
            ours: crosses(11, 14),
            cpython: EXHAUSTED,
        },
        // Refused: BINUNICODE's length field crosses the end.
        Case {
            name: "length_field_crosses_the_frame_end",
            bytes: p4(&[&frame(3), b"X\x01\x00\x00\x00a."]),
            ours: crosses(11, 14),
            cpython: EXHAUSTED,
        },
        // Refused: INT's line ends after the frame. pickle.loads: 123.
        Case {
            name: "line_crosses_the_frame_end",
            bytes: p4(&[&frame(4), b"I123\n."]),
            ours: crosses(11, 15),
            cpython: EXHAUSTED,
        },
        // Refused: FRAME's own size field crosses the end.
        Case {
            name: "frame_size_crosses_the_frame_end",
            bytes: p4(&[&frame(4), b"N\x95\x01\x00", &[0; 6], b"0N."]),
            ours: crosses(12, 15),
            cpython: EXHAUSTED,
        },
        // Refused: a second FRAME before the first (11..31) is used up.
        // pickle.loads: None.
        Case {
            name: "frame_inside_a_frame",
            bytes: p4(&[&frame(20), b"N", &frame(2), b"0N.", &[b'.'; 8]]),
            ours: inside(12, 31),
            cpython: NEW_FRAME,
        },
        // Refused: an empty frame announced inside one that still holds
        // its STOP; the bytes after it would be read as their own frame.
        Case {
            name: "empty_frame_inside_a_frame",
            bytes: p4(&[
                &frame(11),
                b"N",
                &frame(0),
                b".\x8c\x05posix\x8c\x06system\x93.",
            ]),
            ours: inside(12, 22),
            cpython: NEW_FRAME,
        },
        // Read: an opcode at a frame's last byte takes its argument from
        // after the frame, unframed.
        Case {
            name: "argument_after_a_used_up_frame",
            bytes: p4(&[&frame(1), b"K\x05."]),
            ours: Ok(json!(5)),
            cpython: "5",
        },
        // Read: a line after a used-up frame.
        Case {
            name: "line_after_a_used_up_frame",
            bytes: p4(&[&frame(1), b"N0I123\n."]),
            ours: Ok(json!(123)),
            cpython: "123",
        },
        // Read: a line that ends on the frame's last byte.
        Case {
            name: "line_filling_its_frame",
            bytes: p4(&[&frame(5), b"I123\n."]),
            ours: Ok(json!(123)),
            cpython: "123",
        },
        // Read: frames back to back, and an empty one.
        Case {
            name: "frames_back_to_back",
            bytes: p4(&[&frame(1), b"N", &frame(0), &frame(1), b"."]),
            ours: Ok(Value::Null),
            cpython: "None",
        },
        // Read: how pickle writes a large payload, unframed between two
        // frames.
        Case {
            name: "payload_between_frames",
            bytes: p4(&[
                &frame(2),
                b"]\x94\x8e",
                &3u64.to_le_bytes(),
                b"abc",
                &frame(3),
                b"a\x94.",
            ]),
            ours: Ok(json!([{ "bytes": "616263" }])),
            cpython: "[b'abc']",
        },
        // Read: STOP before the frame's end; the rest is not looked at.
        Case {
            name: "stop_inside_its_frame",
            bytes: p4(&[&frame(5), b"N.NNN"]),
            ours: Ok(Value::Null),
            cpython: "None",
        },
    ]
}

fn ours(bytes: &[u8]) -> Result<Value, DecodeError> {
    decode(bytes, &allow_all, &Limits::default()).map(|decoded| render_root(&decoded.pickle))
}

#[test]
fn frames_are_enforced_as_pure_python_pickle_enforces_them() {
    for case in cases() {
        assert_eq!(ours(&case.bytes), case.ours, "{}", case.name);
        if let Err(err) = &case.ours {
            let cpython = err.to_string();
            assert!(cpython.contains(case.cpython), "{}: {cpython}", case.name);
        }
    }
}

#[test]
fn frame_errors_say_where_the_frame_ends() {
    let err = ours(&p4(&[&frame(3), b"\x8c\x03abc."])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "at byte 11: an opcode runs past the end of its frame at byte 14; CPython's pickle \
         refuses it too ('pickle exhausted before end of frame'): the pickle is corrupted or \
         crafted"
    );
}

/// Asks the interpreter in `TENSORSHARE_TEST_PYTHON` what `pickle._loads`
/// makes of every case.
#[test]
fn pure_python_pickle_agrees() {
    let Some(python) = test_python("pure_python_pickle_agrees") else {
        return;
    };
    let script = r#"
import json, pickle, sys
for name, data in json.load(sys.stdin):
    try:
        said = repr(pickle._loads(bytes.fromhex(data)))
    except Exception as error:
        said = str(error)
    print(json.dumps([name, said]))
"#;
    let cases = cases();
    let input: Vec<Value> = cases
        .iter()
        .map(|case| json!([case.name, hex(&case.bytes)]))
        .collect();
    let mut child = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(Value::Array(input).to_string().as_bytes())
        .unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let said: Vec<(String, String)> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(said.len(), cases.len());
    for (case, (name, said)) in cases.iter().zip(said) {
        assert_eq!((case.name, case.cpython), (name.as_str(), said.as_str()));
    }
}
