#!/usr/bin/env python3
"""The stock-PyTorch sender of the fd-limit tests: connects to a receiver
listening at ADDR and sends COUNT tensors of 4096 uint8 each, one message
per tensor, shared by torch's file_descriptor strategy. Tensor i holds i as
a little-endian int64 in its first 8 bytes and (j + i) % 256 in byte j past
them. Exits once the receiver hangs up.

    flood_peer.py ADDR COUNT        (the authkey in TENSORSHARE_AUTHKEY, hex)

Run it with the pinned torch: `"$(scripts/python-env)" compat/python/flood_peer.py ...`.
"""

import multiprocessing
import os
import sys
from multiprocessing.connection import Client

import torch
import torch.multiprocessing  # noqa: F401  (registers torch's reducers)

NBYTES = 4096


def tensor(index: int) -> torch.Tensor:
    t = (torch.arange(NBYTES, dtype=torch.int64) + index).remainder(256).to(torch.uint8)
    t[:8] = torch.tensor([index], dtype=torch.int64).view(torch.uint8)
    return t


def main() -> None:
    address, count = sys.argv[1], int(sys.argv[2])
    authkey = bytes.fromhex(os.environ["TENSORSHARE_AUTHKEY"])
    multiprocessing.current_process().authkey = authkey
    torch.multiprocessing.set_sharing_strategy("file_descriptor")
    with Client(address, authkey=authkey) as connection:
        for index in range(count):
            connection.send(tensor(index))
        # The receiver fetches each fd from this process's resource sharer:
        # stay until it has them all and hangs up.
        try:
            connection.recv_bytes()
        except EOFError:
            pass


if __name__ == "__main__":
    main()
