#!/usr/bin/env python3
"""Writes golden torch pickles and .pt files, each beside a `.expected.json`.

    generate_fixtures.py OUTDIR              fixtures for the running torch
    generate_fixtures.py --merge FIXTURES    joins every OUTDIR/manifest.json
                                             under FIXTURES into MANIFEST.json

Every fixture is what the running torch writes, and its expected file is what
that torch says about the object it rebuilds from the fixture: dtype, shape,
stride, storage offset, requires_grad, Parameter or not, which storage, and
the first elements when the data is in the file. Runs under torch 1.13 to
2.15; whatever the running torch lacks is skipped and listed with the reason
in OUTDIR/manifest.json.

Under the pinned torch (compat/python/requirements.txt) it also writes the
hostile fixtures into OUTDIR/../hostile/: inputs a decoder must refuse, each
with `{"error_contains": ..., "why": ...}` beside it.
"""

import collections
import hashlib
import io
import json
import math
import os
import pickle
import pickletools
import platform
import re
import sys
import zipfile

# Filled in by main(): importing torch is slow and --merge does not need it.
torch = None
ForkingPickler = None

HERE = os.path.dirname(os.path.abspath(__file__))

HEAD_LEN = 8

# torch before 2.3 has no uint16/32/64, and 2.3+ lacks tolist() and copies for
# some of them: their values are read through the signed dtype of the same
# width and wrapped.
SIGNED_OF_UNSIGNED = {
    "uint16": ("int16", 16),
    "uint32": ("int32", 32),
    "uint64": ("int64", 64),
}

FORMS = {
    # form: (file suffix, "format", "strategy")
    "fd": ("fd.pkl", "pickle", "file_descriptor"),
    "fs": ("fs.pkl", "pickle", "file_system"),
    "plain": ("plain.pkl", "pickle", "bytes"),
    "plain_p2": ("plain_p2.pkl", "pickle", "bytes"),
    "zip": ("zip.pt", "torch.save zip", "bytes"),
    "legacy": ("legacy.pt", "torch.save legacy", "bytes"),
}
ALL_FORMS = ("fd", "fs", "plain", "zip", "legacy")
SAVE_FORMS = ("zip", "legacy")
P2_FORMS = ALL_FORMS + ("plain_p2",)


class Skip(Exception):
    """The running torch cannot build or write this case in this form."""


# ---------------------------------------------------------------- values

NAN = float("nan")
INF = float("inf")

# Per dtype: values that show sign, fraction, extremes and, where the format
# has them, nan and inf. Each list is exactly representable in its dtype so
# the fixture holds the value written here.
FLOAT_VALUES = {
    "float16": [1.5, -2.25, 0.0, -0.0, NAN, INF, -INF, 0.333251953125,
                65504.0, 6.103515625e-05, 5.960464477539063e-08, -1000.5],
    "bfloat16": [1.5, -2.25, 0.0, -0.0, NAN, INF, -INF, 3.140625,
                 3.3895313892515355e38, 1.1754943508222875e-38, -0.0078125, 256.0],
    "float32": [1.5, -2.25, 0.0, -0.0, NAN, INF, -INF, 0.3333333432674408,
                3.4028234663852886e38, 1.401298464324817e-45, -16777216.0, 0.10000000149011612],
    "float64": [1.5, -2.25, 0.0, -0.0, NAN, INF, -INF, 1.0 / 3.0,
                1.7976931348623157e308, 5e-324, -9007199254740991.0, 0.1],
    "float8_e4m3fn": [1.5, -2.25, 0.0, -0.0, NAN, 448.0, -0.015625, 0.875,
                      0.001953125, -3.5, 240.0, 6.0],
    "float8_e4m3fnuz": [1.5, -2.25, 0.0, NAN, 240.0, -0.015625, 0.875, 0.0009765625,
                        -3.5, 6.0, 1.0, -1.0],
    "float8_e5m2": [1.5, -2.5, 0.0, -0.0, NAN, INF, -INF, 57344.0,
                    1.52587890625e-05, -0.375, 3.0, 1024.0],
    "float8_e5m2fnuz": [1.5, -2.5, 0.0, NAN, 57344.0, 7.62939453125e-06, -0.375, 3.0,
                        1024.0, -1.0, 1.0, 0.5],
    "float8_e8m0fnu": [1.0, 2.0, 0.5, 0.25, 1024.0, 2.0 ** -20, NAN, 2.0 ** 100,
                       2.0 ** -127, 2.0 ** 127, 4.0, 8.0],
}

INT_VALUES = {
    "int8": [-128, -1, 0, 1, 127, 42, -42, 100, 7, -7, 64, -64],
    "uint8": [0, 1, 127, 128, 200, 255, 42, 7, 64, 254, 100, 3],
    "int16": [-32768, -300, 0, 1, 32767, 1234, -1234, 7, 256, -256, 1000, -1000],
    "uint16": [0, 1, 255, 256, 32768, 40000, 65535, 1234, 7, 65534, 1000, 3],
    "int32": [-2 ** 31, -70000, 0, 1, 2 ** 31 - 1, 123456, -123456, 7, 65536, -65536, 10 ** 9, 3],
    "uint32": [0, 1, 2 ** 31, 2 ** 32 - 1, 70000, 3000000000, 123456, 7, 65536, 2 ** 32 - 2, 10, 3],
    "int64": [-2 ** 63, -2 ** 40, 0, 1, 2 ** 63 - 1, 2 ** 53 + 1, -(2 ** 53) - 1, 7,
              2 ** 32, -2 ** 32, 10 ** 12, 3],
    "uint64": [0, 1, 2 ** 63, 2 ** 64 - 1, 2 ** 53 + 1, 2 ** 40, 2 ** 63 + 12345, 7,
               2 ** 32, 2 ** 64 - 2, 10 ** 12, 3],
}

BOOL_VALUES = [True, False, False, True, True, True, False, True, False, False, True, False]

COMPLEX_VALUES = {
    "complex64": [complex(1.5, -2.25), complex(0.0, 0.0), complex(NAN, 1.0), complex(INF, -INF),
                  complex(-0.5, 0.125), complex(3.0, 4.0)],
    "complex128": [complex(1.5, -2.25), complex(0.0, 0.0), complex(NAN, 1.0), complex(INF, -INF),
                   complex(1.0 / 3.0, -0.1), complex(3.0, 4.0)],
    "complex32": [complex(1.5, -2.25), complex(0.0, 0.0), complex(NAN, 1.0), complex(INF, -INF),
                  complex(-0.5, 0.125), complex(65504.0, -1000.5)],
}

# Dtypes newer torch has beyond the list above, filled from raw bytes (torch
# has no arithmetic on them) and written without a head: a decoder meets them
# in the wild and must name them or refuse them cleanly.
EXOTIC_DTYPES = ["bcomplex32", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2"]


def dtype_of(name):
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise Skip("torch.%s does not exist in this torch" % name)
    return dt


def from_raw_bytes(raw, dtype, shape):
    """A tensor of `dtype` whose bytes are `raw` (for dtypes torch cannot fill)."""
    t = torch.tensor(list(raw), dtype=torch.uint8)
    return t.view(dtype).reshape(shape)


def make_dtype_tensor(name):
    dt = dtype_of(name)
    if name == "bool":
        return torch.tensor(BOOL_VALUES, dtype=torch.bool).reshape(3, 4)
    if name in INT_VALUES:
        vals = INT_VALUES[name]
        if name in SIGNED_OF_UNSIGNED:
            signed, bits = SIGNED_OF_UNSIGNED[name]
            wrapped = [v - 2 ** bits if v >= 2 ** (bits - 1) else v for v in vals]
            t = torch.tensor(wrapped, dtype=getattr(torch, signed)).view(dt)
        else:
            t = torch.tensor(vals, dtype=dt)
        return t.reshape(3, 4)
    if name in FLOAT_VALUES:
        src = torch.tensor(FLOAT_VALUES[name], dtype=torch.float64)
        try:
            t = src.to(dt)
        except (RuntimeError, TypeError):
            try:
                t = src.float().to(dt)
            except (RuntimeError, TypeError) as exc:
                raise Skip("torch cannot convert float32 to %s: %s" % (name, first_line(exc)))
        t = t.reshape(3, 4)
        check_exact(name, t, [json_float(v) for v in FLOAT_VALUES[name]])
        return t
    if name in COMPLEX_VALUES:
        src = torch.tensor(COMPLEX_VALUES[name], dtype=torch.complex128)
        try:
            t = src.to(dt)
        except (RuntimeError, TypeError) as exc:
            raise Skip("torch cannot create %s from complex128: %s" % (name, first_line(exc)))
        t = t.reshape(2, 3)
        check_exact(name, t, [[json_float(v.real), json_float(v.imag)]
                              for v in COMPLEX_VALUES[name]])
        return t
    if name == "float4_e2m1fn_x2":
        # Two 4-bit values per byte; torch has no arithmetic for it, only bytes.
        return from_raw_bytes(bytes([0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0]), dt, (2, 4))
    if name in EXOTIC_DTYPES:
        size = torch.empty(0, dtype=dt).element_size()
        raw = bytes((17 * i + 3) % 256 for i in range(6 * size))
        return from_raw_bytes(raw, dt, (2, 3))
    raise AssertionError("no values for dtype " + name)


def check_exact(name, t, want):
    """Fails when a value list is not exactly representable in its dtype."""
    got = head_of(t, limit=None)
    if got != want:
        raise AssertionError("%s values not exact: wrote %r, torch holds %r" % (name, want, got))


# ---------------------------------------------------------------- cases


def base_matrix():
    return (torch.arange(48, dtype=torch.float32) * 0.5 - 3.25).reshape(6, 8)


def case_parameter():
    return torch.nn.Parameter(torch.tensor([[0.5, -1.25, 2.0], [3.5, -4.75, 6.0]]))


def case_parameter_frozen():
    return torch.nn.Parameter(torch.tensor([7, -8, 9], dtype=torch.int64), requires_grad=False)


def case_requires_grad():
    return torch.tensor([1.5, -2.5, 3.25, -0.125], requires_grad=True)


def case_containers():
    a = torch.tensor([1.0, -2.0, 3.5])
    b = torch.tensor([[1, -2], [3, -4]], dtype=torch.int32)
    c = torch.tensor([True, False])
    d = torch.tensor(-0.75, dtype=torch.float64)
    return [
        (a, {"alpha": b, 7: [c, None], "nested": ({"deep": d},)}),
        collections.OrderedDict([("w", d), ("k", 3), ("t", a)]),
        None,
        True,
        False,
        42,
        -7,
        2 ** 100,
        -(2 ** 70),
        1.25,
        "text \u00fc\u4e2d",
        b"\x00\xffbytes",
        (),
        [],
        {},
    ]


def case_aliasing():
    x = base_matrix()
    y = torch.tensor([9.0, -9.0])
    # x twice (one object), two views of x's storage, then an unrelated tensor
    # and x again: ids and storage ids must follow first appearance.
    return [x, x, x[0], x[2:, ::3], y, x]


def case_state_dict():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    module.train()
    with torch.no_grad():
        module(torch.arange(20, dtype=torch.float32).reshape(5, 4) / 7.0 - 1.0)
    return module.state_dict()


def view_cases():
    def transpose():
        return base_matrix().t()

    def stepped():
        return base_matrix()[::2, 1::3]

    def offset():
        return base_matrix()[3:]

    def expand():
        return torch.tensor([1.5, -2.0, 3.25]).expand(4, 3)

    def scalar():
        return torch.tensor(-7.5)

    def zero_1d():
        return torch.empty(0)

    def zero_2d():
        return torch.zeros(3, 0, dtype=torch.int64)

    def empty_slice():
        # No elements, but the storage behind it is not empty.
        return base_matrix()[2:2]

    def int64_stepped():
        return torch.arange(-10, 14, dtype=torch.int64).reshape(4, 6)[1:, ::2]

    def channels_last():
        t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 2, 2) - 11.5
        return t.contiguous(memory_format=torch.channels_last)

    def narrow_transpose():
        return base_matrix().narrow(1, 5, 3).t()[1:]

    return [
        ("view_transpose", transpose),
        ("view_stepped", stepped),
        ("view_offset", offset),
        ("view_expand", expand),
        ("view_scalar", scalar),
        ("view_zero_1d", zero_1d),
        ("view_zero_2d", zero_2d),
        ("view_empty_slice", empty_slice),
        ("view_int64_stepped", int64_stepped),
        ("view_channels_last", channels_last),
        ("view_narrow_transpose", narrow_transpose),
    ]


DTYPES = ["bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
          "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
          "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
          "float4_e2m1fn_x2"]

P2_CASES = {"dtype_float32", "view_stepped", "containers", "aliasing", "parameter"}


def all_cases():
    """(case name, group, builder, forms) in writing order."""
    cases = []
    for name in DTYPES:
        case = "dtype_" + name
        forms = P2_FORMS if case in P2_CASES else ALL_FORMS
        cases.append((case, "dtype", (lambda n=name: make_dtype_tensor(n)), forms))
    for name in EXOTIC_DTYPES:
        cases.append(("exotic_" + name, "exotic_dtype", (lambda n=name: make_dtype_tensor(n)),
                      ALL_FORMS))
    for case, build in view_cases():
        forms = P2_FORMS if case in P2_CASES else ALL_FORMS
        cases.append((case, "view", build, forms))
    for case, build, forms in [
        ("parameter", case_parameter, P2_FORMS),
        ("parameter_frozen", case_parameter_frozen, ALL_FORMS),
        ("requires_grad", case_requires_grad, ALL_FORMS),
        ("containers", case_containers, P2_FORMS),
        ("aliasing", case_aliasing, P2_FORMS),
        ("state_dict", case_state_dict, SAVE_FORMS),
    ]:
        cases.append((case, "object", build, forms))
    return cases


# ---------------------------------------------------------------- description


def json_float(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def to_double_list(flat):
    try:
        return flat.double().tolist()
    except (RuntimeError, TypeError):
        return flat.float().double().tolist()


def head_of(t, limit=HEAD_LEN):
    """First elements in logical row-major order, as JSON values, or None."""
    name = dtype_name(t)
    if name == "float4_e2m1fn_x2" or name in EXOTIC_DTYPES:
        return None
    if name in SIGNED_OF_UNSIGNED:
        signed, bits = SIGNED_OF_UNSIGNED[name]
        # view() before reshape(): copying uint tensors is missing in older torch.
        flat = t.detach().view(getattr(torch, signed)).reshape(-1)[:limit]
        return [v + 2 ** bits if v < 0 else v for v in flat.tolist()]
    flat = t.detach().reshape(-1)[:limit]
    if name == "bool":
        return [bool(v) for v in flat.tolist()]
    if name.startswith("int") or name == "uint8":
        return [int(v) for v in flat.tolist()]
    if name.startswith("complex"):
        if name == "complex32":
            flat = flat.to(torch.complex64)
        pairs = torch.view_as_real(flat).double().tolist()
        return [[json_float(re_), json_float(im)] for re_, im in pairs]
    return [json_float(v) for v in to_double_list(flat)]


def dtype_name(t):
    return str(t.dtype).replace("torch.", "", 1)


def untyped_storage(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    # torch 1.13: the TypedStorage wraps the UntypedStorage.
    return t.storage()._storage


def tensors_in(obj, out):
    """Every tensor occurrence, depth first, keys before values."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            tensors_in(item, out)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            tensors_in(key, out)
            tensors_in(value, out)
    return out


def describe(obj, kind, with_head):
    """The `tensors` list of an expected file, as torch sees `obj`."""
    tensor_ids = {}
    storage_ids = {}
    # Keep every storage alive while numbering so no _cdata is reused.
    keep = []
    records = []
    for t in tensors_in(obj, []):
        tid = tensor_ids.setdefault(id(t), len(tensor_ids))
        storage = untyped_storage(t)
        keep.append(storage)
        sid = storage_ids.setdefault(storage._cdata, len(storage_ids))
        nbytes = storage.nbytes()
        record = collections.OrderedDict([
            ("id", tid),
            ("dtype", dtype_name(t)),
            ("shape", list(t.shape)),
            ("stride", list(t.stride())),
            ("storage_offset", t.storage_offset()),
            ("requires_grad", bool(t.requires_grad)),
            ("parameter", isinstance(t, torch.nn.Parameter)),
            ("storage", collections.OrderedDict([
                ("id", sid),
                ("kind", "empty" if nbytes == 0 else kind),
                ("nbytes", nbytes),
            ])),
        ])
        # An empty storage travels as rebuild_storage_empty under
        # file_descriptor: its (zero) bytes are in the pickle.
        if with_head or (kind == "file_descriptor" and nbytes == 0):
            head = head_of(t)
            if head is not None:
                record["head"] = head
        records.append(record)
    return records


# ---------------------------------------------------------------- writing


def write_form(obj, form, path):
    """Writes `obj` in `form` to `path`; returns the bytes written."""
    if form in ("fd", "fs"):
        torch.multiprocessing.set_sharing_strategy(
            "file_descriptor" if form == "fd" else "file_system")
        data = bytes(ForkingPickler.dumps(obj))
    elif form == "plain":
        data = pickle.dumps(obj)
    elif form == "plain_p2":
        data = pickle.dumps(obj, protocol=2)
    elif form == "zip":
        torch.save(obj, path)
        with open(path, "rb") as f:
            return f.read()
    elif form == "legacy":
        torch.save(obj, path, _use_new_zipfile_serialization=False)
        with open(path, "rb") as f:
            return f.read()
    else:
        raise AssertionError(form)
    with open(path, "wb") as f:
        f.write(data)
    return data


def load_form(form, path, data):
    """Torch rebuilds the object from the written file: (object, how)."""
    if form in ("zip", "legacy"):
        try:
            return torch.load(path, weights_only=True), "torch.load(weights_only=True)"
        except Exception as exc:  # older torch refuses some plain values
            obj = torch.load(path, weights_only=False)
            return obj, "torch.load(weights_only=False) after %s" % first_line(exc)
    return pickle.loads(data), "pickle.loads"


def first_line(exc):
    """A one-line summary of an exception; for weights_only, the refusal itself."""
    text = str(exc)
    m = re.search(r"WeightsUnpickler error: ([^\n]*)", text)
    if m:
        return (type(exc).__name__ + ": weights_only refused: " + m.group(1))[:240]
    lines = text.strip().splitlines()
    return (type(exc).__name__ + ": " + (lines[0] if lines else ""))[:240]


def same_except_storage_ids(a, b):
    def strip(records):
        out = []
        for r in records:
            r = json.loads(json.dumps(r))
            del r["storage"]["id"]
            out.append(r)
        return out
    return strip(a) == strip(b)


def write_case(outdir, case, group, build, form, meta, manifest):
    """Writes one fixture and its expected file; raises Skip when torch cannot."""
    suffix, fmt, strategy = FORMS[form]
    filename = "%s.%s" % (case, suffix)
    path = os.path.join(outdir, filename)
    kind = strategy
    with_head = form not in ("fd", "fs")
    try:
        obj = build()
    except (Skip, AssertionError):
        raise
    except Exception as exc:
        raise Skip("building the case fails: %s" % first_line(exc))
    before = describe(obj, kind, with_head)
    try:
        data = write_form(obj, form, path)
    except Exception as exc:
        if os.path.exists(path):
            os.remove(path)
        raise Skip("writing fails: %s" % first_line(exc))
    del obj
    note = None
    reload_error = None
    try:
        reloaded, how = load_form(form, path, data)
    except Exception as exc:
        # Kept: torch writes it, so peers meet it; the expected file then says
        # what torch knew of the object it wrote.
        reload_error = first_line(exc)
        reloaded, how = None, None
    after = before if reloaded is None else describe(reloaded, kind, with_head)
    if before != after:
        if form in ("plain", "plain_p2") and same_except_storage_ids(before, after):
            # pickle.dumps writes each view's storage as its own
            # _load_from_bytes blob, so views of one storage come back apart.
            note = "storage ids follow the rebuilt object: plain pickles do not keep views of one storage together"
        else:
            raise AssertionError("%s %s: rebuilt object differs\nwrote  %s\nloaded %s"
                                 % (case, form, json.dumps(before), json.dumps(after)))
    expected = collections.OrderedDict([
        ("torch_version", meta["torch_version"]),
        ("python_version", meta["python_version"]),
        ("format", fmt),
        ("strategy", strategy),
        ("tensors", after),
    ])
    expected_name = "%s.%s.expected.json" % (case, form_stem(suffix))
    with open(os.path.join(outdir, expected_name), "w") as f:
        json.dump(expected, f, indent=1, allow_nan=False, ensure_ascii=False)
        f.write("\n")
    entry = collections.OrderedDict([
        ("path", filename),
        ("expected", expected_name),
        ("case", case),
        ("group", group),
        ("form", suffix),
        ("format", fmt),
        ("strategy", strategy),
        ("pickle_protocol", pickle_protocol(form, data)),
        ("reloaded_with", how),
        ("size", len(data)),
        ("sha256", hashlib.sha256(data).hexdigest()),
    ])
    if reload_error:
        entry["torch_reload_error"] = reload_error
        note = "torch writes this but cannot load it back; expected is the object it wrote"
    if note:
        entry["note"] = note
    manifest["fixtures"].append(entry)


def form_stem(suffix):
    return suffix.rsplit(".", 1)[0]


def pickle_protocol(form, data):
    if form == "zip":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            name = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
            data = z.read(name)
    for op, arg, _ in pickletools.genops(data):
        return arg if op.name == "PROTO" else 0  # protocol 0 or 1 has no PROTO
    return None


def torch_version():
    return re.split(r"[+]", torch.__version__)[0]


def pinned_torch_version():
    with open(os.path.join(HERE, "requirements.txt")) as f:
        for line in f:
            m = re.match(r"\s*torch==([0-9.]+)", line)
            if m:
                return m.group(1)
    return None


def generate(outdir):
    """Every case in every form into `outdir`, and the hostile set under the pinned torch."""
    os.makedirs(outdir, exist_ok=True)
    meta = {"torch_version": torch_version(), "python_version": platform.python_version()}
    manifest = collections.OrderedDict([
        ("torch_version", meta["torch_version"]),
        ("torch_version_full", torch.__version__),
        ("python_version", meta["python_version"]),
        ("pickle_default_protocol", pickle.DEFAULT_PROTOCOL),
        ("fixtures", []),
        ("skipped", []),
    ])
    for case, group, build, forms in all_cases():
        for form in forms:
            try:
                write_case(outdir, case, group, build, form, meta, manifest)
            except Skip as exc:
                manifest["skipped"].append(collections.OrderedDict([
                    ("case", case), ("form", FORMS[form][0]), ("reason", str(exc))]))
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("torch %s: %d fixtures, %d skipped -> %s" % (
        meta["torch_version"], len(manifest["fixtures"]), len(manifest["skipped"]), outdir))
    if meta["torch_version"] == pinned_torch_version():
        generate_hostile(os.path.join(os.path.dirname(os.path.abspath(outdir)), "hostile"))


# ---------------------------------------------------------------- hostile


class CallOnLoad:
    """Pickles as a call of `func(*args)`: how hostile pickles are made."""

    def __init__(self, func, args):
        self.func = func
        self.args = args

    def __reduce__(self):
        return (self.func, self.args)


def globals_in(data):
    """Dotted names of the GLOBAL / STACK_GLOBAL opcodes of a pickle."""
    names = []
    strings = []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            names.append(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL":
            names.append(strings[-2] + "." + strings[-1])
        if isinstance(arg, str):
            strings.append(arg)
    return names


def torch_refusal(load):
    """The error torch or CPython gives for a hostile fixture, or None."""
    try:
        load()
    except RecursionError as exc:
        return "RecursionError: " + str(exc)
    except Exception as exc:
        return first_line(exc)
    return "loaded without error"


def generate_hostile(outdir):
    os.makedirs(outdir, exist_ok=True)
    fixtures = []

    def emit(filename, data, error_contains, why, torch_says):
        """Writes one fixture; `torch_says` is text, or a loader to run on it."""
        with open(os.path.join(outdir, filename), "wb") as f:
            f.write(data)
        if callable(torch_says):
            torch_says = torch_refusal(torch_says)
        expected_name = form_stem(filename) + ".expected.json"
        with open(os.path.join(outdir, expected_name), "w") as f:
            json.dump(collections.OrderedDict([
                ("error_contains", error_contains), ("why", why)]), f, indent=1)
            f.write("\n")
        fixtures.append(collections.OrderedDict([
            ("path", filename),
            ("expected", expected_name),
            ("error_contains", error_contains),
            ("torch_behaviour", torch_says),
            ("size", len(data)),
            ("sha256", hashlib.sha256(data).hexdigest()),
        ]))

    def weights_only_load(path):
        return lambda: torch.load(path, weights_only=True)

    # Disallowed globals. Never unpickled here with a real unpickler: only
    # torch's weights_only unpickler, which refuses them before calling.
    data = pickle.dumps(CallOnLoad(os.system, ("echo this pickle ran a shell command",)),
                        protocol=2)
    assert "posix.system" in globals_in(data), globals_in(data)
    path = os.path.join(outdir, "posix_system.pkl")
    emit("posix_system.pkl", data, "posix.system",
         "os.system pickles as the global posix.system (GLOBAL opcode, protocol 2): loading it "
         "runs a shell command, so the decoder refuses the global by name",
         weights_only_load(path))

    data = pickle.dumps([torch.tensor([1.0, 2.0]), CallOnLoad(eval, ("1 + 1",))])
    assert "builtins.eval" in globals_in(data), globals_in(data)
    path = os.path.join(outdir, "builtins_eval.pkl")
    emit("builtins_eval.pkl", data, "builtins.eval",
         "a valid tensor followed by a call of builtins.eval (STACK_GLOBAL, protocol 4): the "
         "decoder must refuse the global even after a well-formed tensor",
         weights_only_load(path))

    # A view larger than its storage: 4 float32 elements, a view of 10.
    storage = torch.tensor([1.0, 2.0, 3.0, 4.0])._typed_storage()
    data = pickle.dumps(CallOnLoad(torch._utils._rebuild_tensor_v2, (
        storage, 0, (10,), (1,), False, collections.OrderedDict())))
    emit("view_outside_storage.pkl", data, "outside its storage",
         "_rebuild_tensor_v2 asks for 10 float32 elements of a 16-byte storage; torch's set_() "
         "silently grows the storage and hands back bytes nobody wrote, a decoder must refuse",
         lambda: pickle.loads(data))

    torch.multiprocessing.set_sharing_strategy("file_descriptor")
    storage = torch.tensor([1.0, 2.0, 3.0, 4.0])._typed_storage()
    data = bytes(ForkingPickler.dumps(CallOnLoad(torch.multiprocessing.reductions.rebuild_tensor, (
        torch.Tensor, storage, (2, torch.Size([3, 3]), (3, 1), False)))))
    emit("view_outside_storage.fd.pkl", data, "outside its storage",
         "rebuild_tensor (file_descriptor form) with a 3x3 view at offset 2 of a 16-byte "
         "storage: the view needs 44 bytes, the storage has 16",
         "not loaded: the DupFd in it is only valid while the writing process lives")

    storage = torch.tensor([1.0, 2.0, 3.0, 4.0])._typed_storage()
    data = pickle.dumps(CallOnLoad(torch._utils._rebuild_tensor_v2, (
        storage, 3, (4,), (-1,), False, collections.OrderedDict())))
    emit("negative_stride.pkl", data, "negative stride",
         "_rebuild_tensor_v2 with stride (-1,): torch has no negative strides",
         lambda: pickle.loads(data))

    torch.multiprocessing.set_sharing_strategy("file_descriptor")
    whole = bytes(ForkingPickler.dumps(base_matrix()))
    data = whole[:len(whole) // 2]
    emit("truncated.fd.pkl", data, "truncated",
         "a file_descriptor tensor pickle cut in half: the stream ends before STOP",
         lambda: pickle.loads(data))

    depth = 200000
    # EMPTY_LIST pushes, APPEND nests each list into the one below it: no MARK,
    # so a depth cap must count containers, not marks.
    data = b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b"."
    nested = pickle.loads(data)

    def repickle():
        pickle.dumps(nested)

    emit("deep_nesting.pkl", data, "nesting",
         "lists nested 200000 deep (EMPTY_LIST x 200000, APPEND x 199999): CPython's loads "
         "builds it, anything recursive over the result (pickle.dumps, repr, a tree drop) "
         "overflows the stack, so the decoder caps nesting",
         "pickle.loads builds it; pickle.dumps of the result: %s" % torch_refusal(repickle))
    del nested

    buf = io.BytesIO()
    torch.save({"weight": torch.tensor([1.0, -2.0, 3.0])}, buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    missing = [n for n in src.namelist() if re.search(r"/data/0$", n)][0]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.filename != missing:
                dst.writestr(info, src.read(info.filename))
    data = out.getvalue()
    path = os.path.join(outdir, "missing_storage_record.pt")
    emit("missing_storage_record.pt", data, "data/0",
         "a torch.save zip whose data.pkl refers to storage key '0' but has no %s record"
         % missing,
         weights_only_load(path))

    buf = io.BytesIO()
    torch.save(base_matrix(), buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue()[:-37]
    path = os.path.join(outdir, "truncated_legacy.pt")
    emit("truncated_legacy.pt", data, "truncated",
         "a legacy torch.save file whose last storage lacks its final 37 bytes",
         weights_only_load(path))

    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(collections.OrderedDict([
            ("torch_version", torch_version()),
            ("python_version", platform.python_version()),
            ("fixtures", fixtures),
        ]), f, indent=1)
        f.write("\n")
    print("hostile: %d fixtures -> %s" % (len(fixtures), outdir))


def merge(fixtures_dir):
    """Joins every torch-*/manifest.json and hostile/manifest.json."""
    merged = collections.OrderedDict([
        ("generator", "compat/python/generate_fixtures.py"),
        ("paths", "relative to this file"),
        ("torch_versions", []),
        ("fixtures", []),
        ("skipped", []),
        ("hostile", []),
    ])
    for entry in sorted(os.listdir(fixtures_dir), key=version_key):
        sub = os.path.join(fixtures_dir, entry, "manifest.json")
        if not entry.startswith("torch-") or not os.path.isfile(sub):
            continue
        with open(sub) as f:
            m = json.load(f, object_pairs_hook=collections.OrderedDict)
        merged["torch_versions"].append(collections.OrderedDict([
            ("torch_version", m["torch_version"]),
            ("torch_version_full", m["torch_version_full"]),
            ("python_version", m["python_version"]),
            ("dir", entry),
        ]))
        for fx in m["fixtures"]:
            item = collections.OrderedDict([("torch_version", m["torch_version"])])
            for k, v in fx.items():
                item[k] = entry + "/" + v if k in ("path", "expected") else v
            merged["fixtures"].append(item)
        for sk in m["skipped"]:
            item = collections.OrderedDict([("torch_version", m["torch_version"])])
            item.update(sk)
            merged["skipped"].append(item)
    hostile = os.path.join(fixtures_dir, "hostile", "manifest.json")
    if os.path.isfile(hostile):
        with open(hostile) as f:
            for item in json.load(f, object_pairs_hook=collections.OrderedDict)["fixtures"]:
                for k in ("path", "expected"):
                    item[k] = "hostile/" + item[k]
                merged["hostile"].append(item)
    with open(os.path.join(fixtures_dir, "MANIFEST.json"), "w") as f:
        json.dump(merged, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("MANIFEST.json: %d fixtures from %d torch versions, %d skipped, %d hostile" % (
        len(merged["fixtures"]), len(merged["torch_versions"]), len(merged["skipped"]),
        len(merged["hostile"])))


def version_key(name):
    nums = re.findall(r"\d+", name)
    return [int(n) for n in nums] or [0]


def main(argv):
    global torch, ForkingPickler
    if len(argv) == 3 and argv[1] == "--merge":
        merge(argv[2])
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    import torch as torch_module
    import torch.multiprocessing  # noqa: F401  registers torch's reducers
    from multiprocessing.reduction import ForkingPickler as forking_pickler
    torch = torch_module
    ForkingPickler = forking_pickler
    import warnings
    warnings.filterwarnings("ignore", category=UserWarning)
    generate(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
