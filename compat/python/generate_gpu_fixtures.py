#!/usr/bin/env python3
"""Writes checkpoints as a GPU machine saves them, without a GPU.

    generate_gpu_fixtures.py OUTDIR

Most real checkpoints were saved from CUDA: their persistent ids name the
location (`cuda:0`, `cuda:1`, `mps`) and the file holds the bytes. torch
writes whatever location its taggers return, so registering a tagger
(`torch.serialization.register_package`) that names CPU storages `cuda:0`
writes exactly that file on a CPU-only machine.

For each location and torch.save form (zip and legacy) it writes
`LOCATION.FORM.pt`, a training checkpoint, and for `cuda:0` also
`cuda0_state_dict.zip.pt`, a model's state dict as `pytorch_model.bin`
files hold it (the input of `tensorshare convert X.bin Y.safetensors`);
beside each, `STEM.expected.json`: the
`tensors` list in the form generate_fixtures.py records, each storage with
its `location`, as torch describes the object that
`torch.load(path, map_location="cpu", weights_only=True)` returns in a
fresh process (the oracle: no tagger registered there).
"""

import collections
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


def state_dict():
    """A model's state dict as transformers saves it: an OrderedDict of
    names to plain tensors, with tied weights (the output layer is the
    embedding), views of one fused storage, a transposed view, half
    precision weights and integer and bool buffers."""
    torch.manual_seed(1)
    embed = torch.randn(8, 4) / 10
    qkv = torch.randn(12, 4) / 10
    weights = collections.OrderedDict()
    weights["model.embed_tokens.weight"] = embed
    weights["model.layers.0.self_attn.q_proj.weight"] = qkv[0:4]
    weights["model.layers.0.self_attn.k_proj.weight"] = qkv[4:8]
    weights["model.layers.0.self_attn.v_proj.weight"] = qkv[8:12]
    weights["model.layers.0.mlp.up_proj.weight"] = (torch.randn(6, 4) / 10).to(torch.bfloat16)
    weights["model.layers.0.mlp.down_proj.weight"] = (torch.randn(6, 4) / 10).to(torch.float16).t()
    weights["model.layers.0.input_layernorm.weight"] = torch.ones(4)
    weights["model.layers.0.input_layernorm.bias"] = torch.full((4,), -0.5, dtype=torch.float64)
    weights["model.position_ids"] = torch.arange(16).unsqueeze(0)
    weights["model.causal_mask"] = torch.ones(4, 4, dtype=torch.bool).tril()
    weights["lm_head.weight"] = embed
    return weights


def write(outdir, stem, obj, location, zip_form):
    """Writes OBJ as saved on LOCATION and, beside it, what torch loads."""
    path = os.path.join(outdir, f"{stem}.pt")
    torch.save(obj, path, _use_new_zipfile_serialization=zip_form)
    oracle = subprocess.run(
        [sys.executable, "-c", ORACLE.format(here=HERE, path=path)],
        check=True, capture_output=True, text=True)
    tensors = json.loads(oracle.stdout)
    for record in tensors:
        record["storage"]["location"] = location
    form = "zip" if zip_form else "legacy"
    expected = {"format": f"torch.save {form}", "location": location,
                "tensors": tensors}
    with open(os.path.join(outdir, f"{stem}.expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


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
            write(outdir, stem, checkpoint(), location, zip_form)
    current["location"] = "cuda:0"
    write(outdir, "cuda0_state_dict.zip", state_dict(), "cuda:0", True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
