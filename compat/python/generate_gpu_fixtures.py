#!/usr/bin/env python3
"""Writes checkpoints as a GPU machine saves them, without a GPU.

    generate_gpu_fixtures.py OUTDIR

Most real checkpoints were saved from CUDA: their persistent ids name the
location (`cuda:0`, `cuda:1`, `mps`) and the file holds the bytes. torch
writes whatever location its taggers return, so registering a tagger
(`torch.serialization.register_package`) that names CPU storages `cuda:0`
writes exactly that file on a CPU-only machine.

For each location and torch.save form (zip and legacy) it writes
`LOCATION.FORM.pt` and, beside it, `LOCATION.FORM.expected.json`: the
`tensors` list in the form generate_fixtures.py records, each storage with
its `location`, as torch describes the object that
`torch.load(path, map_location="cpu", weights_only=True)` returns in a
fresh process (the oracle: no tagger registered there).
"""

import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate_fixtures  # noqa: E402  the fixtures' own describe()

LOCATIONS = ("cuda:0", "cuda:1", "mps")
FORMS = {"zip": True, "legacy": False}

ORACLE = """
import json, sys, torch, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {here!r})
import generate_fixtures
generate_fixtures.torch = torch
obj = torch.load({path!r}, map_location="cpu", weights_only=True)
print(json.dumps(generate_fixtures.describe(obj, "bytes", True)))
"""


def checkpoint():
    """A small training checkpoint: weights, a view, shared storage, names."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(4, 3) / 100)
    table = torch.arange(24, dtype=torch.int64).reshape(4, 6)
    return {
        "model": {
            "weight": weight,
            "bias": torch.tensor([-0.0037, 0.5, 2.0], dtype=torch.float32),
            "half": torch.tensor([0.1, -2.5], dtype=torch.float16),
        },
        "table": table,
        "table_row": table[2],
        "step": 1200,
        "tags": {"ema", "fp16"},
    }


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    outdir = argv[1]
    os.makedirs(outdir, exist_ok=True)
    current = {"location": None}

    def tagger(obj):
        if obj.device.type == "cpu" and current["location"]:
            return current["location"]
        return None

    def never_restores(obj, location):
        return None

    # Priority 0 runs before torch's own CPU tagger (10).
    torch.serialization.register_package(0, tagger, never_restores)
    for location in LOCATIONS:
        current["location"] = location
        for form, zip_form in FORMS.items():
            stem = f"{location.replace(':', '')}.{form}"
            path = os.path.join(outdir, f"{stem}.pt")
            torch.save(checkpoint(), path, _use_new_zipfile_serialization=zip_form)
            oracle = subprocess.run(
                [sys.executable, "-c", ORACLE.format(here=HERE, path=path)],
                check=True, capture_output=True, text=True)
            tensors = json.loads(oracle.stdout)
            for record in tensors:
                record["storage"]["location"] = location
            expected = {"format": f"torch.save {form}", "location": location,
                        "tensors": tensors}
            with open(os.path.join(outdir, f"{stem}.expected.json"), "w") as f:
                json.dump(expected, f, indent=1)
                f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
