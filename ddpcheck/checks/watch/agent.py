"""What runs inside every process of the watched job: the evidence a rank leaves about itself.

Loaded by `inrank/sitecustomize.py` (watch prepends that folder to the job's PYTHONPATH), so
nothing of the user's code is edited. Standard library only, and nothing done per step: at start
it opens three files of its own in the watch directory, and from then on it only waits.

- an uncaught exception: its type, message, traceback and time (sys.excepthook, chained);
- a fatal signal (SIGSEGV, SIGABRT, ...): faulthandler's Python traceback, to a file of its own;
- SIGTERM (a launcher tearing the job down): faulthandler's traceback of where the process was,
  and then the default action, so the process ends as fast as it would without watch;
- a daemon thread that waits for the watcher's dump request and writes this rank's
  flight-recorder dump, NCCL's recorder and the other backends' as one (gloo does not dump by
  itself), to `TORCH_FR_DUMP_TEMP_FILE` + rank; and answers each numbered sample request (the
  straggler sampling, again and again) with a dump of its own, `samples/<rank>-<n>.sample`.

Every file is keyed by pid (a rank's data-loader workers carry its rank too); the watcher maps
pids to ranks. The watcher reads the same names from here (the per-process records' from
failure/process_records.py, which this loads by path with failure/rank_env.py): one contract, both sides.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from types import ModuleType, TracebackType

WATCH_DIR_VARIABLE = "DDPCHECK_WATCH_DIR"
DUMP_REQUEST = "dump-request"  # the watcher creates it: every rank writes its flight-recorder dump
SAMPLE_REQUEST = "sample-request"  # holds the number of the watcher's latest sample request
SAMPLES = "samples"  # the folder of the answers: <rank>-<n>.sample (no trailing digits: not a dump)
SAMPLE_SUFFIX = ".sample"
DUMP_PREFIX = "nccl_trace_rank_"  # torch's own default name: <prefix><rank>
DEBUG_PIPE_PREFIX = "nccl_pipe_rank_"  # NCCL's debug-info pipes: <prefix><rank>.pipe
POLL_S = 0.5  # how often the dump thread looks for a request (two stat()s; nothing else)


def _load(key: str, path: str) -> ModuleType:
    """A module of ddpcheck's loaded by its path, once: the job's Python may not have ddpcheck installed."""
    module = sys.modules.get(key)
    if module is None:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[key] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _failure_module(name: str) -> ModuleType:
    """failure/<name>.py."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    return _load(f"ddpcheck_watch_{name}", os.path.join(here, "failure", f"{name}.py"))


_rank_env = _failure_module("rank_env")
_records = _failure_module("process_records")


def start() -> None:
    watch_dir = os.environ.get(WATCH_DIR_VARIABLE)
    if not watch_dir or not os.path.isdir(os.path.join(watch_dir, _records.PROCESSES)):
        return
    if _rank_env.is_python_helper(list(getattr(sys, "orig_argv", None) or sys.argv)):
        return  # its start record would claim the rank in its environment for a postmortem
    pid = os.getpid()
    _record_start(_records.process_file(watch_dir, pid, "start"))
    # Kept open for the life of the process: faulthandler writes to their descriptors.
    fatal = open(_records.process_file(watch_dir, pid, "fatal"), "w")  # noqa: SIM115
    term = open(_records.process_file(watch_dir, pid, "term"), "w")  # noqa: SIM115
    faulthandler.enable(file=fatal)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        faulthandler.register(signal.SIGTERM, file=term, chain=True)
    _chain_excepthook(_records.process_file(watch_dir, pid, "exception"))
    atexit.register(_mark_exit, _records.process_file(watch_dir, pid, "exit"))
    threading.Thread(
        target=_wait_for_dump_request, args=(watch_dir,), name="ddpcheck-watch", daemon=True
    ).start()
    _start_fingerprints(watch_dir)


def _start_fingerprints(watch_dir: str) -> None:
    """--fingerprint-every N: fingerprints.py, loaded by its path, waits for the job's torch (0: nothing)."""
    every = os.environ.get("DDPCHECK_FINGERPRINT_EVERY", "")  # fingerprints.EVERY_VARIABLE
    if every.isdigit() and int(every) > 0:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fingerprints.py")
        _load("ddpcheck_watch_fingerprints", path).start(watch_dir, int(every))


def _record_start(path: str) -> None:
    """Who this process is in the job, for a reader that has only the directory (postmortem):
    its rank (None for a launcher such as torchrun), local rank, host, parent and command."""
    with contextlib.suppress(Exception):
        record = {
            "rank": _rank_env.rank_of(os.environ),
            "local_rank": _rank_env.first_number(os.environ, ("LOCAL_RANK",)),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "argv": list(getattr(sys, "orig_argv", None) or sys.argv),  # the whole command: python -m ...
            "time": time.time(),
        }
        with open(path, "w") as out:
            json.dump(record, out)


def _chain_excepthook(path: str) -> None:
    previous = sys.excepthook

    def record(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        with contextlib.suppress(Exception):
            frames = traceback.extract_tb(tb)
            text = {
                "type": kind.__name__,
                "message": str(value),
                "traceback": "".join(traceback.format_exception(kind, value, tb)),
                "frames": [{"function": f.name, "file": f.filename, "line": f.lineno} for f in frames],
                "time": time.time(),
            }
            with open(path, "w") as out:
                json.dump(text, out)
        previous(kind, value, tb)

    sys.excepthook = record


def _mark_exit(path: str) -> None:
    """The interpreter is ending normally (the end of the script, or sys.exit): not a crash by itself."""
    with contextlib.suppress(OSError), open(path, "w") as out:
        json.dump({"time": time.time()}, out)


def sample_file(watch_dir: str, rank: int, number: int) -> str:
    """Where a rank answers sample request `number`; the watcher reads it by the same name."""
    return os.path.join(watch_dir, SAMPLES, f"{rank}-{number}{SAMPLE_SUFFIX}")


_learned: list[int] = []  # this process's rank from torch.distributed, once its group is made


def _rank() -> int | None:
    """This process's rank: torch.distributed's once known, else its launcher's variable."""
    return _learned[0] if _learned else _rank_env.rank_of(os.environ)


def _learn_rank(watch_dir: str) -> None:
    """Once torch.distributed is initialized: its rank, kept and recorded (a framework such as
    Lightning starts its ranks with no rank variable; the watcher reads this record)."""
    try:  # not imported yet, or half made while the main thread imports it (no is_initialized yet)
        dist = sys.modules["torch.distributed"]
        if not dist.is_initialized():
            return
        rank, world_size = int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        return
    _learned.append(rank)
    path = _records.process_file(watch_dir, os.getpid(), "rank")
    with contextlib.suppress(OSError):
        _records.write_whole(
            path, json.dumps({"rank": rank, "world_size": world_size, "time": time.time()}).encode()
        )


def _wait_for_dump_request(watch_dir: str) -> None:
    """Until the process ends: its rank learned, the hang's dump request once, every new sample
    request each time."""
    request = os.path.join(watch_dir, DUMP_REQUEST)
    sampling = os.path.join(watch_dir, SAMPLE_REQUEST)
    dumped = False
    answered = 0  # the last sample request answered
    seen = 0  # the request file's mtime when last read: a stat() a poll, read only when it changed
    while True:
        if not _learned:
            _learn_rank(watch_dir)
        if not dumped and os.path.exists(request):
            dumped = True
            dump_flight_recorder()
        try:
            changed = os.stat(sampling).st_mtime_ns
        except OSError:
            changed = seen
        if changed != seen:
            seen = changed
            number = _number_in(sampling)
            if number > answered:
                answered = number
                with contextlib.suppress(Exception):  # one answer's fault must not end the agent
                    _answer_sample(watch_dir, number)
        time.sleep(POLL_S)


def _number_in(path: str) -> int:
    try:
        with open(path) as found:
            text = found.read().strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() else 0


def _answer_sample(watch_dir: str, number: int) -> None:
    """Sample request `number`: where the main thread is (first: the dump moves nobody), then this rank's
    recorders, without stacks (the cheap dump), each in its own file."""
    rank = _rank()
    if rank is not None:
        answer = sample_file(watch_dir, rank, number)
        _write_where(answer + WHERE_SUFFIX)
        _write_dump(answer, stacks=(False,))


WHERE_SUFFIX = ".where"  # beside a sample's answer: the main thread's stack, innermost frame first
WHERE_DEPTH = 32  # frames kept: the user's innermost is rarely deeper under torch's


def _write_where(path: str) -> None:
    """The main thread's Python stack now, as [file, function, line] innermost first, with the time;
    nothing from a process in no process group (a launcher that carries its last child's RANK)."""
    is_initialized = getattr(sys.modules.get("torch.distributed"), "is_initialized", None)
    if is_initialized is None or not is_initialized():
        return
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    frames = []
    while frame is not None and len(frames) < WHERE_DEPTH:
        frames.append([frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno])
        frame = frame.f_back
    _records.write_whole(path, json.dumps({"t": time.time(), "frames": frames}).encode())


def dump_flight_recorder() -> None:
    """This rank's flight-recorder dump, where torch's own dump on timeout would go: every recorder
    its groups use (NCCL's and the others'), as one."""
    rank = _rank()
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if rank is not None and prefix:
        # Without NCCL's stacks first: should symbolising them block, a dump is already on disk.
        _write_dump(f"{prefix}{rank}", stacks=(False, True))


def _write_dump(path: str, stacks: tuple[bool, ...]) -> None:
    """Every recorder's dump written whole to `path` (a partial file renamed), once per `stacks` value."""
    # While the rank's main thread is importing torch.distributed the module is there, half made:
    # no is_initialized yet (an AttributeError, suppressed as any other fault).
    with contextlib.suppress(Exception):
        if not sys.modules["torch.distributed"].is_initialized():
            return
        from torch._C import _distributed_c10d as native

        recorders = _failure_module("recorders")
        for with_stacks in stacks:
            data = recorders.dump_every_recorder(native, nccl_stacks=with_stacks)
            if data is None:
                return
            _records.write_whole(path, data)
