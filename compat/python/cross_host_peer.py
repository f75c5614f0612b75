#!/usr/bin/env python3
"""The stock-PyTorch side of the tests across hosts beyond what
`tcp_peer.py` (an echo listener and a driver of `tensorshare echo`) does:
large messages, a sender cut off mid-message, and shared-memory handles
sent across hosts on purpose.

    cross_host_peer.py large        --address HOST:PORT --authkey HEX
    cross_host_peer.py send-large   --address HOST:PORT --authkey HEX [--nbytes N] [--connect]
    cross_host_peer.py serve-shared --address HOST:PORT --authkey HEX --strategy STRATEGY
    cross_host_peer.py stall        --address HOST:PORT --authkey HEX

Run it with the pinned torch. Each is a listener on HOST:PORT (IPv4 or a
name; port 0 binds a free one), for one client at a time, with the
authkey HEX; send-large --connect is a client of HOST:PORT instead. A
listener's first line on stdout is `listening HOST:PORT`; all it says
later goes to stderr, since its starter may stop reading stdout after that
line. Tensors travel as `pickle.dumps(tensor)` writes them (the storage's
bytes inline), the only form that crosses hosts, except under
serve-shared.

large         Receives one uint8 tensor holding the pattern of
              `large_tensor`, checks it, adds 1 to every byte in place,
              sends it back, and waits for the client to hang up; says
              `received NBYTES in SECS s`, `checked`, `sent in SECS s`.
send-large    Sends one tensor of N bytes (default 256 MiB, pickled before
              listening) as soon as its client is in (or it is connected),
              saying `sending` and `sent`: the sender of a message the link
              is cut under.
serve-shared  Echoes every message as torch's `conn.send` would over TCP:
              pickled by `ForkingPickler`, a handle to shared memory under
              torch's STRATEGY (file_descriptor or file_system), which a
              receiver on another host cannot open and must refuse.
stall         Lets its one client in and reads nothing until killed: a
              receiver whose host is gone once the link is down.
"""

import argparse
import multiprocessing
import pickle
import signal
import sys
import time
from multiprocessing.connection import Client, Listener
from multiprocessing.reduction import ForkingPickler

import torch

# The checks of the Unix-socket peer and the address parsing of the TCP
# one, beside this file.
from echo_peer import TORCH_STRATEGIES, expect
from tcp_peer import tcp_address

# The chunk of the large message's pattern: its first 8 bytes are the
# chunk's index (int64, little endian), after them byte i is i % 256.
LARGE_CHUNK = 1 << 20


def log(message: str) -> None:
    print(f"cross_host_peer: {message}", file=sys.stderr, flush=True)


def listen(address: tuple[str, int], authkey: bytes) -> Listener:
    listener = Listener(address, family="AF_INET", authkey=authkey)
    host, port = listener.address
    print(f"listening {host}:{port}", flush=True)
    return listener


# ---------------------------------------------------------------- serve-shared


def serve_shared(address: tuple[str, int], authkey: bytes, strategy: str) -> None:
    multiprocessing.current_process().authkey = authkey
    torch.multiprocessing.set_sharing_strategy(strategy)
    with listen(address, authkey) as listener:
        while True:
            with listener.accept() as conn:
                try:
                    while True:
                        value = pickle.loads(conn.recv_bytes())
                        conn.send_bytes(bytes(ForkingPickler.dumps(value)))
                except (EOFError, ConnectionError):
                    pass


# ---------------------------------------------------------------- large


def check_large(t: torch.Tensor, bump: int) -> None:
    """Fails unless `t` holds the large pattern with `bump` added to every byte."""
    expect(t.dtype == torch.uint8 and t.dim() == 1, f"{t.dtype} {tuple(t.shape)}")
    expect(t.numel() % LARGE_CHUNK == 0, f"{t.numel()} bytes: not whole chunks")
    chunks = t.view(-1, LARGE_CHUNK)
    template = (torch.arange(LARGE_CHUNK, dtype=torch.int64) % 256 + bump).to(torch.uint8)
    # A few hundred chunks at a time: the comparison's booleans are as
    # large as what they compare.
    for start in range(0, chunks.shape[0], 256):
        block = chunks[start : start + 256]
        index = (torch.arange(start, start + block.shape[0], dtype=torch.int64)
                 .view(torch.uint8).view(-1, 8) + bump).to(torch.uint8)
        expect(torch.equal(block[:, :8], index), f"chunk index wrong near {start}")
        expect(
            bool((block[:, 8:] == template[8:]).all()), f"chunk bytes wrong near {start}"
        )


def large_tensor(nbytes: int) -> torch.Tensor:
    """The large pattern (see LARGE_CHUNK) in `nbytes` bytes, whole chunks."""
    t = torch.arange(256, dtype=torch.uint8).repeat(nbytes // 256)
    t.view(-1, LARGE_CHUNK).view(torch.int64)[:, 0] = torch.arange(nbytes // LARGE_CHUNK)
    return t


def large(address: tuple[str, int], authkey: bytes) -> None:
    with listen(address, authkey) as listener, listener.accept() as conn:
        start = time.monotonic()
        message = conn.recv_bytes()
        received = time.monotonic() - start
        t = pickle.loads(message)
        del message
        log(f"received {t.numel()} bytes in {received:.2f} s")
        check_large(t, 0)
        log("checked")
        t.add_(1)
        # One copy of the tensor at a time: its pickle replaces it.
        message = pickle.dumps(t)
        del t
        start = time.monotonic()
        conn.send_bytes(message)
        log(f"sent in {time.monotonic() - start:.2f} s")
        del message
        # Until the receiver has it all and hangs up.
        try:
            conn.recv_bytes()
        except EOFError:
            pass


# ---------------------------------------------------------------- send-large, stall


def send_large(address: tuple[str, int], authkey: bytes, nbytes: int, connect: bool) -> None:
    message = pickle.dumps(torch.ones(nbytes, dtype=torch.uint8))
    if connect:
        conn = Client(address, family="AF_INET", authkey=authkey)
    else:
        with listen(address, authkey) as listener:
            conn = listener.accept()
    with conn:
        log("sending")
        conn.send_bytes(message)
        log("sent")
        time.sleep(3600)


def stall(address: tuple[str, int], authkey: bytes) -> None:
    with listen(address, authkey) as listener, listener.accept():
        log("reading nothing")
        time.sleep(3600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["large", "send-large", "serve-shared", "stall"])
    parser.add_argument("--address", type=tcp_address, required=True, help="HOST:PORT")
    parser.add_argument("--authkey", type=bytes.fromhex, required=True, help="hex")
    parser.add_argument("--strategy", choices=TORCH_STRATEGIES, default="file_descriptor")
    parser.add_argument("--nbytes", type=int, default=256 << 20)
    parser.add_argument("--connect", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.command == "large":
        large(args.address, args.authkey)
    elif args.command == "send-large":
        send_large(args.address, args.authkey, args.nbytes, args.connect)
    elif args.command == "serve-shared":
        serve_shared(args.address, args.authkey, args.strategy)
    else:
        stall(args.address, args.authkey)
    return 0


if __name__ == "__main__":
    sys.exit(main())
