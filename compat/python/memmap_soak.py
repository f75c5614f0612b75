#!/usr/bin/env python3
"""A stock-torch client that streams fresh tensors through a memmap echo
server (`tensorshare echo --strategy memmap`) and samples what the server
holds as it goes.

    memmap_soak.py --address ADDR [--authkey HEX] --server-pid PID --dir DIR
                   [--count N] [--nbytes B] [--every K] [--idle SECS]

Sends N float32 tensors of B bytes, each new (torch shares it by
file_descriptor), checks that each comes back as a file in DIR with the
values sent, and drops it. Every K messages, once the client has hung up,
and again after SECS seconds of idleness (the server's unfetched lifetime
and a little), it prints one line about the server:

    sample MESSAGES fds=F mappings=M rss_kib=R files=D
    left MESSAGES fds=F mappings=M rss_kib=R files=D
    idle MESSAGES fds=F mappings=M rss_kib=R files=D

F is its open fds, M its shared mappings (memfds, /dev/shm files and files
in DIR), R its VmRSS, D the files in DIR. Exits 1 if an echo is wrong or the
server drops the connection.
"""

import argparse
import multiprocessing
import os
import sys
import time
from multiprocessing.connection import Client

import torch
import torch.multiprocessing  # registers torch's reductions with ForkingPickler


def address_arg(text: str) -> str:
    return "\0" + text[1:] if text.startswith("@") else text


def server_state(pid: int, directory: str) -> str:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    prefix = directory.rstrip("/") + "/"
    with open(f"/proc/{pid}/maps") as maps:
        mappings = sum(
            1
            for line in maps
            if "/memfd:" in line or "/dev/shm/" in line or prefix in line
        )
    rss = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    files = len(os.listdir(directory))
    return f"fds={fds} mappings={mappings} rss_kib={rss} files={files}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, type=address_arg)
    parser.add_argument(
        "--authkey", type=bytes.fromhex,
        default=os.environ.get("TENSORSHARE_AUTHKEY"),
        help="hex; default: $TENSORSHARE_AUTHKEY")
    parser.add_argument("--server-pid", required=True, type=int)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--nbytes", type=int, default=64 * 1024)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--idle", type=float, default=0.0)
    args = parser.parse_args()

    if args.authkey is None:
        parser.error("give --authkey or set TENSORSHARE_AUTHKEY")
    multiprocessing.current_process().authkey = args.authkey
    directory = os.path.realpath(args.dir)
    connection = Client(args.address, authkey=args.authkey)
    elements = args.nbytes // 4
    for sent in range(1, args.count + 1):
        tensor = torch.full((elements,), float(sent))
        connection.send(tensor)
        try:
            back = connection.recv()
        except EOFError:
            print(f"dropped after {sent - 1} messages", flush=True)
            return 1
        filename = back.untyped_storage().filename
        if filename is None or os.path.dirname(filename) != directory:
            print(f"echo {sent} is not a file in {directory}: {filename!r}", flush=True)
            return 1
        if back.shape != tensor.shape or not bool((back == float(sent)).all()):
            print(f"echo {sent} holds other values", flush=True)
            return 1
        del tensor, back
        if sent % args.every == 0:
            print(f"sample {sent} {server_state(args.server_pid, directory)}", flush=True)
    connection.close()
    # The server notices the hang-up and ends the peer's thread.
    time.sleep(0.5)
    print(f"left {args.count} {server_state(args.server_pid, directory)}", flush=True)
    if args.idle > 0:
        time.sleep(args.idle)
        print(f"idle {args.count} {server_state(args.server_pid, directory)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
