#!/usr/bin/env python3
"""The stock-PyTorch side of the interop tests: an echo server, a client that
checks an echo server, and a worker pool fed by a producer.

    echo_peer.py serve --address ADDR --authkey HEX [--strategy NAME]
    echo_peer.py drive --address ADDR --authkey HEX [--strategy NAME] [--repeat N] [--hostile]
                       [--expect-copies]
    echo_peer.py pool  --address ADDR --authkey HEX [--strategy NAME] --workers K
    echo_peer.py stream --address ADDR --authkey HEX [--strategy NAME]

Run it with the pinned torch: `"$(scripts/python-env)" compat/python/echo_peer.py ...`.
ADDR is an AF_UNIX path, or `@name` for the Linux abstract socket "\\0name".
HEX is the multiprocessing authkey; it guards the connection and the
resource sharer that hands file descriptors over. NAME is torch's sharing
strategy for every process of the job: file_descriptor (the default) or
file_system; memmap shares by file_descriptor and, under drive, expects every
echo to come back as a shared file mapping (`UntypedStorage.from_file`);
serve --strategy memmap shares by file_system instead, since the files it
receives can be sent on no other way (see `torch_strategy`); bytes shares by
file_descriptor and, under drive, expects every echo to come back as a copy
carried inline (tensorshare's `torch.frombuffer` form, or torch's own
`torch.storage._load_from_bytes`), as does --expect-copies
with any strategy.

serve   What `tensorshare echo --strategy NAME` does, in stock
        torch: prints `listening ADDR` once ready, sends every message back
        on its connection (a thread per connection) until EOF, logs and
        closes a connection whose message torch cannot rebuild (where
        `tensorshare echo` answers nothing and reads the next, so that a
        test driving this one fails at once), refuses clients with the
        wrong authkey and keeps serving. SIGTERM or SIGINT
        stop it and remove the socket.

drive   A torch client of an echo server (`serve` or `tensorshare echo`): one
        message per case, each echoed and checked. Prints `ok CASE`,
        `FAIL CASE: reason` or `skip CASE: reason` (a dtype this torch cannot
        create or share) per case, `fds AFTER (before BEFORE)` during the
        repeat case, and `N cases passed, M failed` last; exits 1 if a case
        failed. A case that fails reopens the connection for the next one.
        --hostile adds messages the server must refuse, each on a new
        connection: the server must answer nothing, run nothing, echo the
        next message on that connection, and still echo on a fresh one. Never point --hostile at `serve`: stock
        torch executes those messages.

pool    A torch.multiprocessing spawn pool fed by a producer listening at
        ADDR: receives `(index, tensor)` items until `None`, hands them to K
        workers (torch re-shares each tensor), sends every result
        `(index, float(tensor.double().sum()), tensor * 2, worker_pid)` back,
        then `('done', number_of_distinct_worker_pids)`. The producer fetches
        the file descriptors of the results from this process's resource
        sharer, so it exits only once every one was fetched or the producer
        hung up (at most 10 s after `done`).

stream  A producer for crash trials: sends fresh 4 KiB tensors to an echo
        server one after another, holding the last 16 echoes, and prints
        `streaming` once the first echo is back. Runs until the server goes
        away or the process is killed.
"""

import argparse
import collections
import contextlib
import functools
import io
import itertools
import math
import multiprocessing
import os
import pickle
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing import resource_sharer
from multiprocessing.connection import Client, Connection, Listener
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing  # registers torch's reductions with ForkingPickler
from torch.multiprocessing import reductions

STRATEGIES = ["file_descriptor", "file_system", "memmap", "bytes"]
# torch has no memmap sharing strategy: `--strategy memmap` drives an echo
# server that answers with memmap files (`tensorshare echo --strategy
# memmap`) while this process shares by file_descriptor. Set by main().
ECHO_FILES = False
# The strategies torch itself shares with; the others are the echo server's.
TORCH_STRATEGIES = ["file_descriptor", "file_system"]
# torch has no bytes sharing strategy either: `--strategy bytes` drives an
# echo server that answers with every storage inline (`tensorshare echo
# --strategy bytes`, torch's plain-pickle form) while this process shares by
# file_descriptor, and expects every echo to be a copy. `--expect-copies`
# expects copies whatever the strategy. Set by main().
ECHO_COPIES = False
ANSWER_TIMEOUT = 30.0  # seconds to wait for an echo, or for a refused connection to close
PRODUCER_FETCH_TIMEOUT = 10.0  # seconds `pool` waits after `done` for fds to be fetched
FD_SLACK = 16  # open fds the repeat case may gain without failing
DEEP_NESTING = 200_000

# Every dtype this torch names, once each by its own name (`torch.float`
# is `float32`): whatever torch adds is echoed as soon as it has it. One
# that torch cannot create and share is reported as `skip` with the reason.
DTYPES = sorted(
    {str(value).removeprefix("torch.") for value in vars(torch).values()
     if isinstance(value, torch.dtype)}
)

PLAIN_VALUES = [
    0, -1, 255, 65536, -(2**31), 2**63 - 1, 2**64 + 1, -(2**70),
    1.5, -2.25e-300, 1e308, "", "tensör ✓ 张量 🚀", b"", b"\x00\xff raw", None, True, False,
]


class CaseFailure(Exception):
    """The echo differs from what was sent; the message says how."""


class CaseNotApplicable(Exception):
    """torch itself cannot make this case's message for this transport."""


class CaseSkipped(Exception):
    """This torch cannot create or share what the case needs."""


# ---------------------------------------------------------------- common


def unix_address(address: str) -> str:
    """ADDR as multiprocessing wants it: `@name` becomes the abstract "\\0name"."""
    return "\0" + address[1:] if address.startswith("@") else address


def join_torch_job(authkey: bytes, strategy: str) -> None:
    """Sets what every process of the job shares: the authkey and the strategy."""
    multiprocessing.current_process().authkey = authkey
    torch.multiprocessing.set_sharing_strategy(strategy)


def describe(exc: BaseException) -> str:
    """One line for a report: the message of our own exceptions, else type and first line."""
    if isinstance(exc, CaseFailure | CaseSkipped):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def log(message: str) -> None:
    print(f"echo_peer: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- serve


def serve(address: str, authkey: bytes) -> None:
    with Listener(unix_address(address), family="AF_UNIX", authkey=authkey) as listener:
        print(f"listening {address}", flush=True)
        accept_forever(listener, echo_connection)


def accept_forever(listener: Listener, echo: Callable[[Connection], None]) -> None:
    """Hands every client that proves the key to `echo`, on a thread of its
    own, until SIGTERM or SIGINT; logs and refuses the others."""
    for signum in (signal.SIGTERM, signal.SIGINT):  # SIGINT may come in ignored
        signal.signal(signum, signal.default_int_handler)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            try:
                conn = listener.accept()
            except (multiprocessing.AuthenticationError, EOFError, ConnectionError) as exc:
                log(f"refused a client: {describe(exc)}")
                continue
            threading.Thread(target=echo, args=(conn,), daemon=True).start()


def echo_connection(conn: Connection) -> None:
    """Sends every message back on `conn` until the peer closes it."""
    with conn:
        while True:
            try:
                message = conn.recv_bytes()
            except (EOFError, ConnectionResetError):
                return
            try:
                conn.send(ForkingPickler.loads(message))
            except Exception as exc:  # a message torch cannot rebuild or re-share
                # Closed, unlike `tensorshare echo`: the Rust side driving
                # this echo fails at once rather than waiting for an answer.
                log(f"closing a connection: {describe(exc)}")
                return


# ---------------------------------------------------------------- drive: checks


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise CaseFailure(reason)


def type_name(obj: Any) -> str:
    return type(obj).__qualname__


def storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under `t` as a 1-d uint8 tensor (no copy)."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())


def element_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of each element of `t`, shape `(*t.shape, element_size)`.

    Works for every dtype, float8 and float4 included, which have no `==`.
    """
    size = t.element_size()
    return storage_bytes(t).as_strided(
        (*t.shape, size), (*(s * size for s in t.stride()), 1), t.storage_offset() * size
    )


def layout(t: torch.Tensor) -> dict[str, Any]:
    return {
        "class": type_name(t),
        "dtype": t.dtype,
        "shape": tuple(t.shape),
        "stride": t.stride(),
        "storage_offset": t.storage_offset(),
        "requires_grad": t.requires_grad,
        "storage nbytes": t.untyped_storage().nbytes(),
    }


def check_tensor(sent: torch.Tensor, got: Any, where: str) -> None:
    expect(isinstance(got, torch.Tensor), f"{where}: {type_name(got)}, sent a tensor")
    want, have = layout(sent), layout(got)
    wrong = [f"{key} {have[key]}, sent {want[key]}" for key in want if have[key] != want[key]]
    expect(not wrong, f"{where}: " + "; ".join(wrong))
    expect(torch.equal(element_bytes(got), element_bytes(sent)), f"{where}: element bytes differ")
    expect(torch.equal(storage_bytes(got), storage_bytes(sent)), f"{where}: storage bytes differ")


def check_same(sent: Any, got: Any, where: str = "echo") -> None:
    """Fails unless `got` has the types, order, layouts and bytes of `sent`."""
    if isinstance(sent, torch.Tensor):
        check_tensor(sent, got, where)
        return
    expect(type(got) is type(sent), f"{where}: {type_name(got)}, sent {type_name(sent)}")
    if isinstance(sent, list | tuple):
        expect(len(got) == len(sent), f"{where}: {len(got)} items, sent {len(sent)}")
        for index, (item, echoed) in enumerate(zip(sent, got)):
            check_same(item, echoed, f"{where}[{index}]")
    elif isinstance(sent, dict):
        expect(list(got) == list(sent), f"{where}: keys {list(got)!r}, sent {list(sent)!r}")
        for key, item in sent.items():
            check_same(item, got[key], f"{where}[{key!r}]")
        # What the pickle set on it besides its items: a state dict's
        # `_metadata`, which load_state_dict passes on to each module.
        attributes = getattr(sent, "__dict__", {})
        got_attributes = getattr(got, "__dict__", {})
        expect(
            list(got_attributes) == list(attributes),
            f"{where}: attributes {list(got_attributes)!r}, sent {list(attributes)!r}",
        )
        for name, item in attributes.items():
            check_same(item, got_attributes[name], f"{where}.{name}")
    else:
        expect(got == sent, f"{where}: {got!r}, sent {sent!r}")


def check_same_memory(sent: torch.Tensor, got: torch.Tensor) -> None:
    if ECHO_COPIES:
        expect(
            storage_ptr(got) != storage_ptr(sent),
            f"echoed storage at {storage_ptr(got):#x} is the sent one: expected a copy",
        )
        return
    if ECHO_FILES:
        check_file_backed(got)
        return
    expect(
        storage_ptr(got) == storage_ptr(sent),
        f"echoed storage at {storage_ptr(got):#x}, sent one at {storage_ptr(sent):#x}: a copy",
    )


def check_file_backed(got: torch.Tensor) -> None:
    """Under --strategy memmap the echo is a copy in a file torch mapped itself."""
    filename = got.untyped_storage().filename
    expect(filename is not None, "the echoed storage is not a file mapping (from_file)")


# ---------------------------------------------------------------- drive: client


class EchoClient:
    """The connection cases share, reopened after a case that failed."""

    def __init__(self, address: str, authkey: bytes) -> None:
        self.address = unix_address(address)
        self.authkey = authkey
        self._conn: Connection | None = None

    def connect(self, authkey: bytes | None = None) -> Connection:
        return Client(self.address, family="AF_UNIX", authkey=authkey or self.authkey)

    def send(self, conn: Connection, obj: Any) -> None:
        conn.send_bytes(self.dumps(obj))

    def dumps(self, obj: Any) -> bytes:
        """`obj` as this client sends it: torch's shared-memory form."""
        return bytes(ForkingPickler.dumps(obj))

    def echo(self, obj: Any) -> Any:
        if self._conn is None:
            self._conn = self.connect()
        self.send(self._conn, obj)
        if not self._conn.poll(ANSWER_TIMEOUT):
            raise CaseFailure(f"no echo within {ANSWER_TIMEOUT:.0f} s")
        return self._conn.recv()

    def check_echo(self, sent: Any) -> Any:
        got = self.echo(sent)
        check_same(sent, got)
        return got

    def reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0

    def run(self, client: EchoClient, name: str, case: Callable[[], None]) -> None:
        try:
            case()
        except CaseSkipped as skip:
            print(f"skip {name}: {skip}", flush=True)
        except CaseNotApplicable as limit:
            print(f"n/a {name}: {limit}", flush=True)
        except Exception as exc:
            self.failed += 1
            client.reset()
            print(f"FAIL {name}: {describe(exc)}", flush=True)
        else:
            self.passed += 1
            print(f"ok {name}", flush=True)


# ---------------------------------------------------------------- drive: values


def random_bytes_tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A tensor of `dtype` whose bytes are random: fits dtypes torch has no arithmetic for."""
    size = torch.empty(0, dtype=dtype).element_size()
    raw = random.Random(seed).randbytes(math.prod(shape) * size)
    return torch.tensor(list(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def dtype_tensor(name: str, seed: int) -> torch.Tensor:
    """A tensor of `torch.<name>`, or CaseSkipped when this torch cannot
    create one."""
    dtype = getattr(torch, name)
    if dtype is torch.bool:
        return (torch.arange(15) % 3 == 1).reshape(3, 5)
    try:
        return random_bytes_tensor(dtype, (3, 5), seed)
    except Exception as exc:
        raise CaseSkipped(f"torch cannot create a {name} tensor: {describe(exc)}") from exc


def matrix() -> torch.Tensor:
    return (torch.arange(48, dtype=torch.float32) * 0.5 - 3.25).reshape(6, 8)


def view_messages() -> dict[str, torch.Tensor]:
    base = matrix()
    return {
        "view_transpose": base.t(),
        "view_stepped_slice": base[::2, 1::3],
        "view_storage_offset": base[3:],
        "view_expand_stride_0": torch.arange(4.0).reshape(4, 1).expand(4, 5),
        "view_0d": torch.tensor(-7.5, dtype=torch.float64),
        "view_empty_0": torch.empty(0),
        "view_empty_3x0": torch.empty(3, 0),
        "view_empty_of_nonempty_storage": base[2:2],
        "view_inside_bigger_storage": base[1:3, 2:5],
        "view_narrow_transpose": base.narrow(1, 2, 4).t(),
        "view_channels_last": torch.arange(120, dtype=torch.int32)
        .reshape(2, 3, 4, 5)
        .contiguous(memory_format=torch.channels_last),
    }


def parameter_messages() -> dict[str, torch.Tensor]:
    return {
        "parameter": torch.nn.Parameter(matrix()[:2]),
        "parameter_frozen": torch.nn.Parameter(matrix()[:3], requires_grad=False),
        "parameter_int64": torch.nn.Parameter(torch.arange(5), requires_grad=False),
        "requires_grad": torch.linspace(-1.0, 1.0, 7).requires_grad_(),
    }


def container_messages() -> dict[str, Any]:
    def t(n: int) -> torch.Tensor:
        return torch.arange(n, dtype=torch.float32) * 1.25 + n

    return {
        "container_list": [t(3), *PLAIN_VALUES, t(4)],
        "container_tuple": (t(2), 1, "two", (3.0, None), ()),
        "container_dict": {"weight": t(6).reshape(2, 3), "step": 7, 3: "int key", "empty": {}},
        "container_ordered_dict": collections.OrderedDict(
            [("z", t(5)), ("a", 1), ("m", [t(1), b"bytes"])]
        ),
        # A state dict and its `_metadata` (each module's version).
        "container_state_dict": torch.nn.Sequential(
            torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)
        ).state_dict(),
        "container_nested": {
            "level1": [({"level3": [t(2), {"level5": (t(3), 2**65, [[], ()])}]}, "x")],
            "plain": collections.OrderedDict([("values", PLAIN_VALUES), ("tensor", t(7))]),
        },
    }


# ---------------------------------------------------------------- drive: cases


def case_echo(client: EchoClient, message: Any) -> None:
    client.check_echo(message)


def case_dtype(client: EchoClient, name: str, seed: int) -> None:
    t = dtype_tensor(name, seed)
    try:
        client.dumps(t)
    except Exception as exc:
        # torch's own limit, not the echo's: over TCP torch pickles plainly,
        # and its plain pickle cannot write the sub-byte integers.
        raise CaseNotApplicable(f"torch cannot send {name} this way: {describe(exc)}") from exc
    client.check_echo(t)


def case_alias_same_tensor(client: EchoClient) -> None:
    t = matrix()
    got = client.check_echo([t, t])
    expect(got[0] is got[1], "one tensor sent twice came back as two tensors")


def case_alias_views(client: EchoClient) -> None:
    x = matrix()
    got = client.check_echo([x[0], x[1]])
    expect(storage_ptr(got[0]) == storage_ptr(got[1]), "two views of one storage came back on two")


def case_zero_copy(client: EchoClient) -> None:
    sent = torch.arange(64, dtype=torch.float32)
    got = client.check_echo(sent)
    check_same_memory(sent, got)
    got[5] = 4242.0
    if ECHO_COPIES:
        expect(sent[5].item() == 5.0, "a write into the echoed copy changed the sent tensor")
        return
    if ECHO_FILES:
        with open(got.untyped_storage().filename, "rb") as file:
            in_file = torch.frombuffer(bytearray(file.read()), dtype=torch.float32)
        expect(in_file[5].item() == 4242.0, "a write into the echoed tensor is not in its file")
        return
    expect(sent[5].item() == 4242.0, "a write into the echoed tensor is not seen in the sent one")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def case_repeat(client: EchoClient, times: int) -> None:
    sent = matrix()
    client.check_echo(sent)  # the first share opens the storage's fd and the resource sharer
    before = open_fds()
    for index in range(times):
        sent[0, 0] = index
        check_same_memory(sent, client.check_echo(sent))
    after = open_fds()
    print(f"fds {after} (before {before})", flush=True)
    expect(after - before <= FD_SLACK, f"{after - before} fds more after {times} echoes")


def check_fresh_echo(client: EchoClient) -> None:
    """Fails unless the server still echoes a tensor on a new connection."""
    client.reset()
    client.check_echo(torch.arange(10, dtype=torch.float64) * 1.5)


def case_wrong_authkey(client: EchoClient) -> None:
    wrong = bytes(b ^ 0xFF for b in client.authkey)
    try:
        client.connect(authkey=wrong).close()
    except multiprocessing.AuthenticationError:
        check_fresh_echo(client)
    else:
        raise CaseFailure("a client with the wrong authkey was let in")


def value_cases(client: EchoClient) -> Iterator[tuple[str, Callable[[], None]]]:
    """Every dtype, view, Parameter and container, each echoed and checked."""
    partial = functools.partial
    for seed, name in enumerate(DTYPES):
        yield f"dtype_{name}", partial(case_dtype, client, name, seed)
    messages = {**view_messages(), **parameter_messages(), **container_messages()}
    for name, message in messages.items():
        yield name, partial(case_echo, client, message)


def drive_cases(client: EchoClient, repeat: int) -> Iterator[tuple[str, Callable[[], None]]]:
    partial = functools.partial
    yield from value_cases(client)
    yield "alias_same_tensor", partial(case_alias_same_tensor, client)
    yield "alias_views", partial(case_alias_views, client)
    yield "zero_copy", partial(case_zero_copy, client)
    yield "repeat", partial(case_repeat, client, repeat)
    yield "wrong_authkey", partial(case_wrong_authkey, client)


# ---------------------------------------------------------------- drive: hostile messages


class Reduced:
    """Pickles as the call `func(*args)`: the building block of forged messages."""

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func = func
        self.args = args

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return self.func, self.args


def forking_dumps(obj: Any) -> bytes:
    return bytes(ForkingPickler.dumps(obj))


def tensor_pickle(
    storage: Reduced, shape: tuple[int, ...], stride: tuple[int, ...], offset: int = 0
) -> bytes:
    """A float32 tensor in torch's sharing form, over any storage reduction."""
    return forking_dumps(
        Reduced(
            reductions.rebuild_tensor,
            torch.Tensor,
            Reduced(reductions.rebuild_typed_storage, storage, torch.float32),
            (offset, torch.Size(shape), stride, False),
        )
    )


def forged_storage(address: str, key: int, nbytes: int) -> Reduced:
    """`rebuild_storage_fd` of a DupFd naming `(address, key)`; nothing is registered."""
    dupfd = resource_sharer.DupFd.__new__(resource_sharer.DupFd)
    dupfd._id = (address, key)
    return Reduced(reductions.rebuild_storage_fd, torch.UntypedStorage, dupfd, nbytes)


def resource_sharer_address() -> str:
    """The address of this process's resource sharer, started if need be.

    A DupFd's `_id` is what its pickle carries: `(address, key)`.
    """
    with open(os.devnull, "rb") as devnull:
        dupfd = resource_sharer.DupFd(devnull.fileno())
    os.close(dupfd.detach())
    return dupfd._id[0]


def forged_segment(name: bytes, nbytes: int) -> Reduced:
    """`rebuild_storage_filename` naming `name` with this process's real manager."""
    manager, _, _ = torch.zeros(1).untyped_storage()._share_filename_cpu_()
    return Reduced(reductions.rebuild_storage_filename, torch.UntypedStorage, manager, name, nbytes)


def oversized_segment_pickle() -> bytes:
    """A real 16-byte file_system segment announced as 4096 bytes."""
    _, name, _ = torch.zeros(4).untyped_storage()._share_filename_cpu_()
    return tensor_pickle(forged_segment(name, 4096), (1024,), (1,))


def truncated_tensor_pickle() -> bytes:
    whole = forking_dumps(torch.arange(6, dtype=torch.float32))
    return whole[: len(whole) // 2]


def view_outside_storage_pickle() -> bytes:
    """A 3x3 float32 view at offset 2 over a real 16-byte shared storage."""
    func, args = reductions.reduce_storage(torch.zeros(4).untyped_storage())
    return tensor_pickle(Reduced(func, *args), (3, 3), (3, 1), offset=2)


def hostile_messages(marker: str, missing_address: str) -> dict[str, Callable[[], bytes]]:
    """Pickles the server must refuse, built when their case runs."""
    touch = f"touch {marker}"
    return {
        "hostile_os_system": lambda: forking_dumps(Reduced(os.system, touch)),
        "hostile_builtins_eval": lambda: forking_dumps(
            Reduced(eval, f"__import__('os').system({touch!r})")
        ),
        "hostile_garbage": lambda: random.Random(1950).randbytes(4096),
        "hostile_truncated": truncated_tensor_pickle,
        "hostile_dupfd_no_listener": lambda: tensor_pickle(
            forged_storage(missing_address, 1, 16), (4,), (1,)
        ),
        "hostile_dupfd_wrong_key": lambda: tensor_pickle(
            forged_storage(resource_sharer_address(), 10**9, 16), (4,), (1,)
        ),
        "hostile_deep_nesting": lambda: (
            b"\x80\x04" + b"]" * DEEP_NESTING + b"a" * (DEEP_NESTING - 1) + b"."
        ),
        "hostile_view_outside_storage": view_outside_storage_pickle,
        "hostile_segment_path": lambda: tensor_pickle(
            forged_segment(b"/torch_1_2/../../../etc/passwd", 16), (4,), (1,)
        ),
        "hostile_segment_missing": lambda: tensor_pickle(
            forged_segment(f"/torch_{os.getpid()}_1_999999999".encode(), 16), (4,), (1,)
        ),
        "hostile_segment_oversized": oversized_segment_pickle,
    }


class NoGlobals(pickle.Unpickler):
    """Unpickles plain data only: an answer that names any global fails."""

    def find_class(self, module: str, name: str) -> Any:
        raise CaseFailure(f"the server answered the refused message (it names {module}.{name})")


def expect_unanswered(conn: Connection, payload: bytes) -> None:
    """Fails unless the server answers nothing to `payload` and echoes the
    next message on the same connection. Unpickles no global."""
    after = "the next message, after a refused one"
    try:
        conn.send_bytes(payload)
        conn.send_bytes(pickle.dumps(after))
        if not conn.poll(ANSWER_TIMEOUT):
            raise CaseFailure(f"no echo of the next message within {ANSWER_TIMEOUT:.0f} s")
        answer = NoGlobals(io.BytesIO(conn.recv_bytes())).load()
    except (EOFError, ConnectionResetError, BrokenPipeError) as exc:
        raise CaseFailure(f"the server closed the connection: {describe(exc)}") from exc
    expect(answer == after, f"the server answered {answer!r}, not the next message's echo")


def case_hostile(client: EchoClient, build: Callable[[], bytes], marker: str) -> None:
    with client.connect() as conn:
        expect_unanswered(conn, build())
    expect(not os.path.exists(marker), f"the server ran the payload: {marker} exists")
    check_fresh_echo(client)


@contextlib.contextmanager
def quiet_unknown_sharer_keys() -> Iterator[None]:
    """Drops the KeyError traceback this process's resource sharer prints when
    asked for a key it never registered (hostile_dupfd_wrong_key does that)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if not issubclass(kind, KeyError):
            previous(kind, value, tb)

    sys.excepthook = hook
    try:
        yield
    finally:
        sys.excepthook = previous


def hostile_cases(client: EchoClient, scratch: str) -> Iterator[tuple[str, Callable[[], None]]]:
    marker = os.path.join(scratch, "payload-ran")
    messages = hostile_messages(marker, os.path.join(scratch, "no-such-listener"))
    for name, build in messages.items():
        yield name, functools.partial(case_hostile, client, build, marker)


def drive(address: str, authkey: bytes, repeat: int, hostile: bool) -> int:
    client = EchoClient(address, authkey)
    tally = Tally()
    for name, case in drive_cases(client, repeat):
        tally.run(client, name, case)
    if hostile:
        scratch = tempfile.mkdtemp(prefix="tensorshare-hostile-")
        try:
            with quiet_unknown_sharer_keys():
                for name, case in hostile_cases(client, scratch):
                    tally.run(client, name, case)
        finally:
            shutil.rmtree(scratch)
    client.reset()
    print(f"{tally.passed} cases passed, {tally.failed} failed", flush=True)
    return 1 if tally.failed else 0


# ---------------------------------------------------------------- pool


def double_and_sum(item: tuple[int, torch.Tensor]) -> tuple[int, float, torch.Tensor, int]:
    """The worker's job; runs in a spawned pool process."""
    index, tensor = item
    return index, tensor.double().sum().item(), tensor * 2, os.getpid()


def received_items(conn: Connection) -> Iterator[tuple[int, torch.Tensor]]:
    """The producer's items until `None`. imap pulls them from its own thread
    while the main thread sends results on the same connection."""
    while (item := conn.recv()) is not None:
        yield item


def pool(address: str, authkey: bytes, strategy: str, workers: int) -> None:
    with Client(unix_address(address), family="AF_UNIX", authkey=authkey) as conn:
        # Spawned workers inherit the authkey set by join_torch_job, which they
        # need to fetch fds from this process's resource sharer and back.
        context = torch.multiprocessing.get_context("spawn")
        with context.Pool(
            workers,
            initializer=torch.multiprocessing.set_sharing_strategy,
            initargs=(strategy,),
        ) as worker_pool:
            pids: set[int] = set()
            for result in worker_pool.imap(double_and_sum, received_items(conn)):
                conn.send(result)
                pids.add(result[3])
            worker_pool.close()
            worker_pool.join()
        conn.send(("done", len(pids)))
        wait_for_fetches(conn, PRODUCER_FETCH_TIMEOUT)


def wait_for_fetches(conn: Connection, timeout: float) -> None:
    """Stays up until the producer has fetched every fd this process shared,
    hangs up, or `timeout` passes.

    What is left to fetch is the resource sharer's `_cache`: private, but the
    same in CPython 3.6 to 3.13.
    """
    unfetched = resource_sharer._resource_sharer._cache
    deadline = time.monotonic() + timeout
    while unfetched and time.monotonic() < deadline:
        if conn.poll(0.05):
            return


# ---------------------------------------------------------------- stream


def stream(address: str, authkey: bytes) -> None:
    held: collections.deque[Any] = collections.deque(maxlen=16)
    with contextlib.suppress(EOFError, OSError):
        with Client(unix_address(address), family="AF_UNIX", authkey=authkey) as conn:
            for index in itertools.count():
                conn.send(torch.full((4096,), index % 256, dtype=torch.uint8))
                held.append(conn.recv())
                if index == 0:
                    print("streaming", flush=True)


# ---------------------------------------------------------------- command line


def authkey_arg(text: str) -> bytes:
    try:
        key = bytes.fromhex(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not hex: {exc}") from exc
    if not key:
        raise argparse.ArgumentTypeError("the authkey must not be empty")
    return key


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Stock-PyTorch peer of the tensorshare interop tests."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="echo every message back (stock torch)")
    drive_parser = commands.add_parser("drive", help="check an echo server case by case")
    pool_parser = commands.add_parser("pool", help="a spawn worker pool fed by a producer")
    stream_parser = commands.add_parser("stream", help="stream tensors to an echo server")
    for sub in (serve_parser, drive_parser, pool_parser, stream_parser):
        sub.add_argument("--address", required=True, help="AF_UNIX path, or @name (abstract)")
        sub.add_argument("--authkey", required=True, type=authkey_arg, help="hex")
        sub.add_argument("--strategy", choices=STRATEGIES, default=STRATEGIES[0])
    drive_parser.add_argument("--repeat", type=int, default=2000, help="echoes of one storage")
    drive_parser.add_argument(
        "--expect-copies",
        action="store_true",
        help="expect echoes to be copies, not the sent memory (implied by --strategy bytes)",
    )
    drive_parser.add_argument(
        "--hostile", action="store_true", help="add messages to refuse (never against serve)"
    )
    pool_parser.add_argument("--workers", type=int, required=True)
    return parser.parse_args(argv)


def torch_strategy(command: str, strategy: str) -> str:
    """The strategy this process shares by when the job's is `strategy`.

    A storage torch rebuilt with `UntypedStorage.from_file` has no fd to hand
    over: its mapping was opened without keeping one, so `_share_fd_cpu_`
    gives -1 and `DupFd` fails with EBADF. Only file_system sends it on,
    moving it into a segment of its own first; so a stock-torch echo of
    memmap tensors shares by file_system.
    """
    if strategy in TORCH_STRATEGIES:
        return strategy
    if command == "serve" and strategy == "memmap":
        return "file_system"
    return "file_descriptor"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global ECHO_FILES, ECHO_COPIES
    ECHO_FILES = args.strategy == "memmap"
    ECHO_COPIES = args.strategy == "bytes" or getattr(args, "expect_copies", False)
    join_torch_job(args.authkey, torch_strategy(args.command, args.strategy))
    # torch warns each time it rebuilds a complex32 tensor.
    warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")
    if args.command == "serve":
        serve(args.address, args.authkey)
    elif args.command == "drive":
        return drive(args.address, args.authkey, args.repeat, args.hostile)
    elif args.command == "stream":
        stream(args.address, args.authkey)
    else:
        pool(args.address, args.authkey, args.strategy, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
