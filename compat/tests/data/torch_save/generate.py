#!/usr/bin/env python3
"""Writes the torch.save files that compat/tests/torch_save.rs reads.

    python generate.py            (run with the pinned torch, from any directory)

Each file is written by the running torch, except `legacy_view_metadata.pt`,
which is built by hand in the layout of torch < 1.0 (storage views carried in
the persistent id) and checked to load with the running torch. `expected.json`
records, per file, what torch says each named tensor holds: its dtype, the
storage class the file names, the storage's element count and the storage
bytes in hex. The tests look each name up in the decoded object pickle and
compare the storage record it points at.
"""

import collections
import io
import json
import os
import pickle
import struct
import sys
import warnings
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001


def storage_class_name(tensor):
    """The class torch.save names in the persistent id for this tensor."""
    legacy = torch.storage._dtype_to_storage_type_map().get(tensor.dtype)
    return legacy if legacy is not None else "UntypedStorage"


def storage_numel(tensor):
    """The element count torch.save writes: bytes for UntypedStorage."""
    storage = tensor.untyped_storage()
    if storage_class_name(tensor) == "UntypedStorage":
        return storage.nbytes()
    return storage.nbytes() // tensor.element_size()


def describe(tensor):
    return {
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "storage_class": storage_class_name(tensor),
        "storage_numel": storage_numel(tensor),
        "storage_hex": bytes(tensor.untyped_storage()).hex(),
        "storage_offset": tensor.storage_offset(),
    }


def save(name, obj, tensors, legacy):
    path = os.path.join(HERE, name)
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
    return name, {"format": "legacy" if legacy else "zip", "tensors": tensors}


def legacy_view_metadata():
    """A legacy stream whose persistent ids carry `(view_key, offset, size)`.

    torch < 1.0 pickled storage views this way; torch still loads them.
    """
    data = struct.pack("<6f", 0.0, 1.0, 2.0, 3.0, 4.0, 5.0)

    class Pid:
        def __init__(self, pid):
            self.pid = pid

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return obj.pid if isinstance(obj, Pid) else None

    float_storage = torch.FloatStorage
    whole = Pid(("storage", float_storage, "root", "cpu", 6, None))
    view = Pid(("storage", float_storage, "root", "cpu", 6, ("view", 2, 3)))
    out = io.BytesIO()
    for header in (MAGIC_NUMBER, PROTOCOL_VERSION,
                   {"protocol_version": PROTOCOL_VERSION, "little_endian": True,
                    "type_sizes": {"short": 2, "int": 4, "long": 8}}):
        pickle.dump(header, out, protocol=2)
    Pickler(out, protocol=2).dump({"whole": whole, "view": view})
    pickle.dump(["root"], out, protocol=2)
    out.write(struct.pack("<q", 6) + data)
    payload = out.getvalue()

    loaded = torch.load(io.BytesIO(payload), weights_only=False)
    assert loaded["whole"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], loaded
    assert loaded["view"].tolist() == [2.0, 3.0, 4.0], loaded
    with open(os.path.join(HERE, "legacy_view_metadata.pt"), "wb") as f:
        f.write(payload)
    storage = {"storage_class": "FloatStorage", "storage_numel": 6, "storage_hex": data.hex()}
    return "legacy_view_metadata.pt", {
        "format": "legacy",
        "tensors": {},
        "storages": {"whole": dict(storage, view=None),
                     "view": dict(storage, view=[2, 3])},
    }


def main():
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    expected = {}

    dtypes = {
        "float32": torch.tensor([1.5, -2.0, 3.25]),
        "float64": torch.tensor([1e300, -0.5], dtype=torch.float64),
        "float16": torch.tensor([0.5, -1.0], dtype=torch.float16),
        "bfloat16": torch.tensor([1.5, 2.0], dtype=torch.bfloat16),
        "int64": torch.tensor([-(2**40), 7]),
        "int32": torch.tensor([-5, 6], dtype=torch.int32),
        "int8": torch.tensor([-128, 127], dtype=torch.int8),
        "uint8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "complex64": torch.tensor([1 + 2j], dtype=torch.complex64),
        # No legacy storage class: saved as UntypedStorage (numel in bytes)
        # with the dtype as the last argument of _rebuild_tensor_v3.
        "uint16": torch.tensor([1, 65535], dtype=torch.uint16),
        "uint32": torch.tensor([7, 2**32 - 1], dtype=torch.uint32),
        "float8_e4m3fn": torch.tensor([1.0, -2.0], dtype=torch.float8_e4m3fn),
    }
    described = {name: describe(t) for name, t in dtypes.items()}
    name, entry = save("zip_dtypes.pt", dtypes, described, legacy=False)
    expected[name] = entry
    # torch 2.15 writes the UntypedStorage dtypes into legacy files too, but
    # cannot load them back (UntypedStorage has no .dtype): keep those out of
    # the file torch must be able to read and put them in their own.
    typed = {k: v for k, v in dtypes.items() if storage_class_name(v) != "UntypedStorage"}
    untyped = {k: v for k, v in dtypes.items() if storage_class_name(v) == "UntypedStorage"}
    name, entry = save("legacy_dtypes.pt", typed, {k: described[k] for k in typed}, legacy=True)
    expected[name] = entry
    name, entry = save("legacy_untyped.pt", untyped, {k: described[k] for k in untyped},
                       legacy=True)
    expected[name] = entry

    base = torch.arange(8, dtype=torch.float32)
    views = {"base": base, "tail": base[5:], "strided": base[1::3]}
    for legacy in (False, True):
        name, entry = save("legacy_views.pt" if legacy else "zip_views.pt", views,
                           {k: describe(v) for k, v in views.items()}, legacy)
        expected[name] = entry

    parameter = torch.nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    for legacy in (False, True):
        name, entry = save("legacy_parameter.pt" if legacy else "zip_parameter.pt", parameter,
                           {"": describe(parameter.detach())}, legacy)
        expected[name] = entry

    linear = torch.nn.Linear(3, 2)
    state = linear.state_dict()
    assert isinstance(state, collections.OrderedDict)
    for legacy in (False, True):
        name, entry = save("legacy_state_dict.pt" if legacy else "zip_state_dict.pt", state,
                           {k: describe(v) for k, v in state.items()}, legacy)
        expected[name] = entry

    empty = {"empty": torch.empty(0), "empty_untyped": torch.empty(0, dtype=torch.uint16)}
    name, entry = save("zip_empty.pt", empty, {k: describe(v) for k, v in empty.items()},
                       legacy=False)
    expected[name] = entry
    empty_typed = {"empty": empty["empty"]}
    name, entry = save("legacy_empty.pt", empty_typed, {"empty": describe(empty["empty"])},
                       legacy=True)
    expected[name] = entry

    # Written to a buffer, the zip records live under `archive/`; written to a
    # path, under the file's stem: the tests rely on both prefixes.
    buffer = io.BytesIO()
    small = {"x": torch.tensor([1.0, 2.0])}
    torch.save(small, buffer)
    with open(os.path.join(HERE, "zip_buffer.pt"), "wb") as f:
        f.write(buffer.getvalue())
    assert zipfile.ZipFile(io.BytesIO(buffer.getvalue())).namelist()[0].startswith("archive/")
    expected["zip_buffer.pt"] = {"format": "zip",
                                 "tensors": {"x": describe(small["x"])}}

    name, entry = legacy_view_metadata()
    expected[name] = entry

    # pickle.dumps of a tensor carries a legacy stream inside
    # torch.storage._load_from_bytes(b'...').
    plain = torch.tensor([10, 20, 30], dtype=torch.int16)
    with open(os.path.join(HERE, "plain_pickle.pkl"), "wb") as f:
        f.write(pickle.dumps(plain, protocol=4))
    expected["plain_pickle.pkl"] = {"format": "pickle", "tensors": {"": describe(plain)}}

    for name, entry in expected.items():
        if entry["format"] in ("zip", "legacy") and name != "legacy_untyped.pt":
            torch.load(os.path.join(HERE, name), weights_only=False)

    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({"torch": torch.__version__, "files": expected}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(expected)} files under {HERE} with torch {torch.__version__}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
