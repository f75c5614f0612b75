"""Writes the seed inputs of the wire-format fuzz targets to fuzz/seeds/.

The bytes come from stock CPython where it can make them (framing written by
multiprocessing.connection, requests pickled by ForkingPickler) and from the
C layout otherwise (libshm's AllocInfo). The seeds are checked in, so
scripts/fuzz needs no Python; run this again when a target's input layout
changes:

    python compat/python/generate_fuzz_seeds.py

Standard library only. The targets that read structured (`arbitrary`)
inputs, `handshake` and `torch_pickle_structured`, have no seeds here: their
inputs are not wire bytes.
"""

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


def main() -> None:
    targets = {
        "connection_framing": framing_seeds(),
        "sharer_request": request_seeds(),
        "alloc_info": alloc_info_seeds(),
        "segment_name": name_seeds(),
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
