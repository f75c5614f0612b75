#!/usr/bin/env python3
"""The PyTorch side of `tensorshare-bench --workload files`: makes the
checkpoints, and does with stock torch what `tensorshare inspect` and
`tensorshare convert` do with them.

`tensorshare-bench` writes this file into a private directory, runs `make`
once per checkpoint, and runs every other subcommand under its hidden
`measure`, which times the whole process (this import of torch
included, as a user waits for it) and takes its peak RSS. Errors go to
stderr; the measured subcommands print nothing.

    make OUT --tensors N --elements M [--legacy] [--location LOC]
        torch.save of a state dict of N float32 tensors of M elements
        each (`layers.I.weight`), as a zip or, with --legacy, as the
        legacy stream; with --location (e.g. cuda:0) the file names that
        location for every storage, as a GPU machine saves it, written on
        a CPU-only one by a tagger (as generate_gpu_fixtures.py does).
    load FILE [--mmap]
        torch.load(FILE, map_location="cpu", weights_only=True), with
        mmap=True when asked (torch maps zip files only).
    to-safetensors FILE OUT
        safetensors.torch.save_file of what torch.load returns.
    to-pt FILE OUT
        torch.save of what torch.load returns.
"""

import argparse
import collections
import sys

import torch


def state_dict(tensors, elements):
    """N distinct float32 tensors, each filled with its index: cheap to
    make, and every byte of the file is a tensor's."""
    weights = collections.OrderedDict()
    for index in range(tensors):
        weights[f"layers.{index}.weight"] = torch.full(
            (elements,), float(index), dtype=torch.float32)
    return weights


def make(args):
    if args.location:
        def tagger(storage):
            if storage.device.type == "cpu":
                return args.location
            return None

        def never_restores(storage, location):
            return None

        # Priority 0 runs before torch's own CPU tagger (10).
        torch.serialization.register_package(0, tagger, never_restores)
    torch.save(state_dict(args.tensors, args.elements), args.out,
               _use_new_zipfile_serialization=not args.legacy)


def load(path, mmap=False):
    return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def to_safetensors(args):
    import safetensors.torch
    safetensors.torch.save_file(load(args.file), args.out)


def to_pt(args):
    torch.save(load(args.file), args.out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("make")
    made.add_argument("out")
    made.add_argument("--tensors", type=int, required=True)
    made.add_argument("--elements", type=int, required=True)
    made.add_argument("--legacy", action="store_true")
    made.add_argument("--location")
    loaded = commands.add_parser("load")
    loaded.add_argument("file")
    loaded.add_argument("--mmap", action="store_true")
    for name in ("to-safetensors", "to-pt"):
        converted = commands.add_parser(name)
        converted.add_argument("file")
        converted.add_argument("out")
    args = parser.parse_args(argv[1:])
    if args.command == "make":
        make(args)
    elif args.command == "load":
        load(args.file, mmap=args.mmap)
    elif args.command == "to-safetensors":
        to_safetensors(args)
    else:
        to_pt(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
