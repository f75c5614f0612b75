#!/usr/bin/env python3
"""The Python side of the safetensors interop tests (tests/safetensors.rs).

    safetensors_interop.py write OUT.safetensors EXPECTED.pt
    safetensors_interop.py compare A B [--key KEY]...

`write` writes one state dict twice: with `safetensors.torch.save_file`
(every dtype it writes, `float8_e8m0fnu` and `float4_e2m1fn_x2` included,
which its own `load_file` cannot read back) and with `torch.save`, the
expectation for what `tensorshare convert OUT.safetensors X.pt` must give.

`compare` loads two files, each by its name: `*.safetensors` with
`safetensors.torch.load_file`, anything else with `torch.load(path,
map_location="cpu", weights_only=True)`, as a CPU-only machine reads a
checkpoint saved from a GPU; `--key` picks the value under KEY in B first,
once per level. It prints one JSON line, `{"keys": [...]}` when both hold
the same names with tensors of the same dtype, shape and bytes, and exits 1
saying what differs otherwise.
"""

import collections
import json
import sys

import torch
from safetensors.torch import load_file, save_file


def load(path):
    if path.endswith(".safetensors"):
        return load_file(path)
    return torch.load(path, map_location="cpu", weights_only=True)


def raw(tensor):
    """The bytes of a tensor's elements in logical order, for any dtype."""
    flat = tensor.detach().contiguous()
    return bytes(flat.reshape(-1).view(torch.uint8).numpy()) if flat.numel() else b""


def state_dict():
    torch.manual_seed(2)
    weights = collections.OrderedDict()
    weights["f32"] = torch.randn(3, 4)
    weights["f16"] = torch.randn(5).to(torch.float16)
    weights["bf16"] = torch.randn(2, 2).to(torch.bfloat16)
    weights["f64"] = torch.randn(2, dtype=torch.float64)
    weights["c64"] = torch.randn(3, dtype=torch.complex64)
    weights["i8"] = torch.tensor([-128, 0, 127], dtype=torch.int8)
    weights["i16"] = torch.tensor([-3, 300], dtype=torch.int16)
    weights["i32"] = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    weights["i64"] = torch.tensor([[-(2**40), 2**40]])
    weights["u8"] = torch.tensor([0, 255], dtype=torch.uint8)
    weights["u16"] = torch.tensor([1, 65535], dtype=torch.uint16)
    weights["u32"] = torch.tensor([7, 2**32 - 1], dtype=torch.uint32)
    weights["u64"] = torch.tensor([9, 2**63], dtype=torch.uint64)
    weights["bool"] = torch.tensor([True, False, True])
    bytes8 = torch.arange(0, 240, 16, dtype=torch.uint8)[:12].reshape(3, 4)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                 "float8_e8m0fnu", "float4_e2m1fn_x2"):
        weights[name] = bytes8.clone().view(getattr(torch, name))
    weights["scalar"] = torch.tensor(2.5)
    weights["empty"] = torch.zeros(0, 3)
    return weights


def write(out, expected):
    weights = state_dict()
    save_file(weights, out, metadata={"format": "pt", "written_by": "safetensors_interop.py"})
    torch.save(weights, expected)
    print(json.dumps({"keys": list(weights)}))


def compare(a_path, b_path, keys):
    a = load(a_path)
    b = load(b_path)
    for key in keys:
        b = b[key]
    problems = []
    if sorted(a) != sorted(b):
        problems.append(f"keys differ: {sorted(a)} != {sorted(b)}")
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            problems.append(f"{name}: {type(x).__name__} and {type(y).__name__}")
            continue
        if x.dtype != y.dtype or x.shape != y.shape:
            problems.append(f"{name}: {x.dtype} {tuple(x.shape)} != {y.dtype} {tuple(y.shape)}")
        elif raw(x) != raw(y):
            problems.append(f"{name}: the bytes differ")
    if problems:
        print(json.dumps({"problems": problems}))
        return 1
    print(json.dumps({"keys": sorted(a)}))
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "write":
        write(argv[2], argv[3])
        return 0
    if len(argv) >= 4 and argv[1] == "compare":
        rest = argv[4:]
        if len(rest) % 2 or any(flag != "--key" for flag in rest[::2]):
            sys.stderr.write(__doc__)
            return 2
        return compare(argv[2], argv[3], rest[1::2])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
