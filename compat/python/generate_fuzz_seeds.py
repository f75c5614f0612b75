"""Writes the seed inputs of the wire-format fuzz targets to fuzz/seeds/.

The bytes come from stock CPython where it can make them (framing written by
multiprocessing.connection, requests pickled by ForkingPickler) and from the
C layout otherwise (libshm's AllocInfo; the .safetensors files, laid out as
the safetensors writer lays them out: the header padded with spaces to a
multiple of 8, tensors by dtype alignment then name). The seeds are checked in, so
scripts/fuzz needs no Python; run this again when a target's input layout
changes:

    python compat/python/generate_fuzz_seeds.py

Standard library only. The targets that read structured (`arbitrary`)
inputs, `handshake` and `torch_pickle_structured`, have no seeds here: their
inputs are not wire bytes.
"""

import json
import os
import pathlib
import shutil
import socket
import struct
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

SEEDS = pathlib.Path(__file__).resolve().parents[2] / "fuzz" / "seeds"


def framed(*payloads: bytes) -> bytes:
    """What Connection.send_bytes writes for each payload, back to back."""
    writer, reader = socket.socketpair()
    connection = Connection(writer.detach())
    for payload in payloads:
        connection.send_bytes(payload)
    connection.close()
    out = b""
    while chunk := reader.recv(1 << 16):
        out += chunk
    reader.close()
    return out


def long_framed(payload: bytes) -> bytes:
    """The header CPython writes above 0x7fffffff bytes ('!i' -1, then '!Q'
    length), around a small payload: its reader takes it at any length."""
    return struct.pack("!iQ", -1, len(payload)) + payload


def framing_seeds() -> dict[str, bytes]:
    # The target reads 4 bytes of reader settings first: the most bytes per
    # read (0: no limit), how often a read is interrupted (0: never), and
    # the size limit (big-endian u16; 0xffff: none).
    settings = {
        "whole": bytes([0, 0, 0x01, 0x00]),
        "trickle": bytes([1, 3, 0x01, 0x00]),
        "unlimited": bytes([7, 5, 0xFF, 0xFF]),
    }
    streams = {
        "empty_message": framed(b""),
        "one_message": framed(b"payload"),
        "two_messages": framed(b"#CHALLENGE#" + bytes(20), b"#WELCOME#"),
        "long_form": long_framed(b"long form"),
        "long_then_short": long_framed(b"a") + framed(b"b"),
        "truncated": framed(b"truncated payload")[:-3],
    }
    return {
        f"{stream}.{setting}": prefix + data
        for stream, data in streams.items()
        for setting, prefix in settings.items()
    }


def request_seeds() -> dict[str, bytes]:
    def dumps(obj) -> bytes:
        return bytes(ForkingPickler.dumps(obj))

    return {
        # What DupFd.detach() sends: (key, os.getpid()).
        "fetch_small": dumps((1, 12345)),
        "fetch_large": dumps((2**40, 4_000_000)),
        "fetch_negative": dumps((-1, -1)),
        # tensorshare's notices to a tensorshare sharer.
        "release": dumps(("tensorshare.release", [3, 4, 5])),
        "unmapped": dumps(("tensorshare.unmapped", [7])),
        "not_a_request": dumps((1, 2, 3)),
    }


def alloc_info(pid: int, free: bool, name: bytes) -> bytes:
    """libshm's struct AllocInfo { pid_t pid; char free; char filename[60]; },
    zeroed first as libshm does, 68 bytes with padding."""
    return struct.pack("=ic60s3x", pid, b"\x01" if free else b"\x00", name)


def alloc_info_seeds() -> dict[str, bytes]:
    longest = b"/torch_1_" + b"2" * 50
    return {
        "register": alloc_info(21409, False, b"/torch_21409_1626284410_1"),
        "free": alloc_info(21409, True, b"/torch_21409_1626284410_1"),
        "torch1_name": alloc_info(15807, False, b"/torch_15807_1185784508"),
        "longest_name": alloc_info(1, False, longest),
        "path": alloc_info(1, False, b"/dev/shm/torch_1_2_3"),
    }


def name_seeds() -> dict[str, bytes]:
    return {
        "torch2": b"/torch_21409_1626284410_1",
        "torch1": b"/torch_15807_1185784508",
        "longest": b"/torch_1_" + b"2" * 50,
        "manager_handle": b"/tmp/torch-shm-dir-ItV2Gr/manager.sock",
        "path": b"/torch_1_2/../../etc/passwd",
    }


# safetensors dtype -> element bits, in the writer's order (widest first).
SAFETENSORS_BITS = {
    "U64": 64, "I64": 64, "F64": 64, "C64": 64, "F32": 32, "U32": 32, "I32": 32,
    "BF16": 16, "F16": 16, "U16": 16, "I16": 16,
    "F8_E5M2FNUZ": 8, "F8_E4M3FNUZ": 8, "F8_E8M0": 8, "F8_E4M3": 8, "F8_E5M2": 8,
    "I8": 8, "U8": 8, "BOOL": 8, "F4": 4,
}


def safetensors_file(tensors, metadata=None) -> bytes:
    """A .safetensors file of (name, dtype, shape) tensors, each filled with
    counting bytes."""
    order = list(SAFETENSORS_BITS)
    tensors = sorted(tensors, key=lambda t: (order.index(t[1]), t[0]))
    header, data, offset = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        count = 1
        for dim in shape:
            count *= dim
        size = count * SAFETENSORS_BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        data += bytes(i % 251 for i in range(size))
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds() -> dict[str, bytes]:
    every_dtype = [(f"t.{dtype.lower()}", dtype, [2, 4]) for dtype in SAFETENSORS_BITS]
    state_dict = [
        ("model.embed_tokens.weight", "F32", [8, 4]),
        ("lm_head.weight", "F32", [8, 4]),
        ("model.layers.0.mlp.up_proj.weight", "BF16", [6, 4]),
        ("model.norm.weight", "F16", [4]),
        ("model.position_ids", "I64", [1, 16]),
        ("model.causal_mask", "BOOL", [4, 4]),
    ]
    good = safetensors_file(state_dict, {"format": "pt"})
    overlapping = (b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                   b'"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}')
    return {
        "state_dict": good,
        "every_dtype": safetensors_file(every_dtype),
        "scalar_and_empty": safetensors_file([("s", "F32", []), ("e", "F16", [0, 3])]),
        "empty": safetensors_file([]),
        "metadata_only": safetensors_file([], {"format": "pt", "note": "x"}),
        "truncated": good[: len(good) - 5],
        "overlapping": struct.pack("<Q", len(overlapping)) + overlapping + bytes(4),
    }


def main() -> None:
    targets = {
        "connection_framing": framing_seeds(),
        "sharer_request": request_seeds(),
        "alloc_info": alloc_info_seeds(),
        "segment_name": name_seeds(),
        "safetensors_read": safetensors_seeds(),
    }
    for target, seeds in targets.items():
        directory = SEEDS / target
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for name, data in seeds.items():
            (directory / name).write_bytes(data)
        print(f"{os.path.relpath(directory)}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
