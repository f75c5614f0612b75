#!/usr/bin/env python3
"""Loads torch.save files with stock torch and prints what they hold as JSON.

    python describe_saved.py FILE [FILE ...]

Each file is loaded with `torch.load(path, map_location="cpu",
weights_only=True)`, as a CPU-only machine reads a checkpoint saved from a
GPU (files ending in `.pkl` with `pickle.load`, for torch's plain
pickles); one JSON
document per file is printed on its own line, `{"error": ...}` for a file
torch refuses. Tensors are described by
dtype, shape, stride, storage offset, requires_grad, whether they are a
Parameter, their values (row-major bytes in hex) and which storage they view,
numbered in order of first appearance so that aliasing can be compared
across files. tests/torch_save_write.rs and tests/convert.rs compare these
descriptions with the ones the Rust side computes, or between files.
"""

import collections
import json
import pickle
import struct
import sys

import torch


def tensor_hex(tensor):
    try:
        flat = tensor.detach().contiguous().clone()
    except (RuntimeError, NotImplementedError):
        # Dtypes without kernels (bits8, float4, ...): the storage's bytes.
        return "storage:" + bytes(tensor.untyped_storage()).hex()
    return bytes(flat.untyped_storage()).hex()


class Describer:
    def __init__(self):
        self.storages = {}

    def storage_index(self, untyped):
        key = (untyped.data_ptr(), untyped.nbytes())
        if untyped.nbytes() == 0:
            # Empty storages have no address to compare.
            key = ("empty", len(self.storages))
        return self.storages.setdefault(key, len(self.storages))

    def __call__(self, obj):
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            return {
                "tensor": {
                    "dtype": str(obj.dtype).removeprefix("torch."),
                    "shape": list(obj.shape),
                    "stride": list(obj.stride()),
                    "offset": obj.storage_offset(),
                    "requires_grad": obj.requires_grad,
                    "parameter": isinstance(obj, torch.nn.Parameter),
                    "storage": self.storage_index(storage),
                    "storage_nbytes": storage.nbytes(),
                    "hex": tensor_hex(obj),
                }
            }
        if isinstance(obj, torch.TypedStorage):
            untyped = obj._untyped_storage
            return {
                "typed_storage": {
                    "dtype": str(obj.dtype).removeprefix("torch."),
                    "storage": self.storage_index(untyped),
                    "hex": bytes(untyped).hex(),
                }
            }
        if isinstance(obj, torch.UntypedStorage):
            return {
                "storage": {
                    "storage": self.storage_index(obj),
                    "hex": bytes(obj).hex(),
                }
            }
        if isinstance(obj, collections.OrderedDict):
            described = {"ordered_dict": [[self(k), self(v)] for k, v in obj.items()]}
            # What the pickle set on it: a state dict's `_metadata`.
            if vars(obj):
                described["attributes"] = {name: self(v) for name, v in vars(obj).items()}
            return described
        if isinstance(obj, dict):
            return {"dict": [[self(k), self(v)] for k, v in obj.items()]}
        if isinstance(obj, list):
            return {"list": [self(v) for v in obj]}
        if isinstance(obj, tuple):
            return {"tuple": [self(v) for v in obj]}
        if isinstance(obj, (set, frozenset)):
            items = sorted((self(v) for v in obj), key=json.dumps)
            return {type(obj).__name__: items}
        if isinstance(obj, (bytes, bytearray)):
            return {"bytes": bytes(obj).hex()}
        if isinstance(obj, bool) or obj is None:
            return obj
        if isinstance(obj, (int, str)):
            return obj
        if isinstance(obj, float):
            return {"float": struct.pack("<d", obj).hex()}
        if isinstance(obj, torch.dtype):
            return {"dtype": str(obj).removeprefix("torch.")}
        return {"other": type(obj).__qualname__}


def load(path):
    if path.endswith(".pkl"):
        with open(path, "rb") as f:
            return pickle.load(f)
    return torch.load(path, map_location="cpu", weights_only=True)


def main():
    for path in sys.argv[1:]:
        try:
            description = Describer()(load(path))
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            description = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(description, sort_keys=True))


if __name__ == "__main__":
    main()
