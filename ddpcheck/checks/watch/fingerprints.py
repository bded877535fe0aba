"""Inside every rank of a watched job: its replicas' fingerprints, and the first NaN or Inf it made.

Started by agent.py when `--fingerprint-every N` is on (DDPCHECK_FINGERPRINT_EVERY); standard library
only until the job itself has imported torch's optimizers (a thread looks twice a second, then ends).
From then on torch's global optimizer hook is the step boundary: after every optimizer.step() each
rank holds the state its replicas hold, so ranks compare the same step without a timer.

- every N steps, each DistributedDataParallel module's parameters and buffers: per tensor the
  wrapping int64 sum of its bytes viewed as integers (exact: one flipped bit always changes it) and
  a float64 sum (by how much), written whole to `fingerprints/<rank>-<step>.json`; and each HSDP
  module's (FSDP2's `fully_shard` on a mesh with a replicated dimension; FSDP1's HYBRID_SHARD)
  local parameter shards, no buffers, compared only within the ranks that hold the same shard
  (the replicate dimension's group, in the record as `group`). A fully sharded module has no
  replica: it is said once (`fingerprints/<rank>.unreplicated`);
- every step (DDP's modules only: FSDP reduces gradients inside its own hooks), each parameter's
  local gradient before DDP reduces it (a tensor hook; a NaN or Inf makes its sum NaN, added on
  the device without a sync, read at the step boundary: on a GPU the copy of a step before, so
  nothing waits): the first non-finite gradient is this rank's
  `fingerprints/<rank>.nonfinite`, with its step and parameter; its peers receive it only in the
  all_reduce, a step later in their own gradients.

The watcher reads the files (checks/watch/replicas.py) and failure/replicas.py judges them.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
import time
import weakref
from typing import Any

EVERY_VARIABLE = "DDPCHECK_FINGERPRINT_EVERY"  # set by the watcher: N steps between fingerprints
SKIP_VARIABLE = "DDPCHECK_FINGERPRINT_SKIP"  # the user's: comma-separated name prefixes left out
FOLDER = "fingerprints"
SUFFIX = ".json"
NONFINITE_SUFFIX = ".nonfinite"
UNREPLICATED_SUFFIX = ".unreplicated"  # the modules found that have no replica to compare with
FSDP_PACKAGE = "torch.distributed.fsdp"  # looked for only when the job imported it
LOOK_S = 0.5  # how often the start thread looks for torch's optimizers among the loaded modules
OPTIMIZER_MODULE = "torch.optim.optimizer"
# Elements of each gradient read every step for a NaN or Inf, evenly apart (an odd stride: every
# column of a matrix's rows in turn). A NaN that reaches the parameters is in every fingerprint's sums.
GRADIENT_SAMPLE = 4096
FOLD_AFTER = 16  # backward passes (micro-steps) whose sums are kept before they are folded in


def write_whole(path: str, record: dict[str, Any]) -> None:
    """A record written to a partial file, then renamed: a reader sees it whole or not at all."""
    partial = f"{path}.partial"
    with open(partial, "w") as out:
        json.dump(record, out)
    os.replace(partial, path)


def start(watch_dir: str, every: int) -> None:
    """Wait (a daemon thread, no cost per step) for the job to import torch's optimizers, then hook them."""
    os.makedirs(os.path.join(watch_dir, FOLDER), exist_ok=True)
    skip = tuple(p.strip() for p in os.environ.get(SKIP_VARIABLE, "").split(",") if p.strip())
    fingerprinter = Fingerprinter(watch_dir, every, skip)
    threading.Thread(
        target=_install_when_loaded, args=(fingerprinter,), name="ddpcheck-fingerprints", daemon=True
    ).start()


def _install_when_loaded(fingerprinter: Fingerprinter) -> None:
    while True:
        module = sys.modules.get(OPTIMIZER_MODULE)
        # A module still being imported (by the job's main thread) is there half made: wait for it whole.
        spec = getattr(module, "__spec__", None)
        if module is not None and not getattr(spec, "_initializing", False):
            hook = getattr(module, "register_optimizer_step_post_hook", None)
            if hook is not None:
                hook(fingerprinter.after_step)
                return
        time.sleep(LOOK_S)


class Fingerprinter:
    """One rank's hooks: the step count, the DDP and HSDP modules found, the gradients' non-finite flags."""

    def __init__(self, watch_dir: str, every: int, skip: tuple[str, ...]) -> None:
        self.dir = watch_dir
        self.rank = -1  # torch.distributed's, once a DDP module was found
        self.every = every
        self.skip = skip
        self.steps: dict[int, int] = {}  # per optimizer (id), its step() calls
        self.modules: list[tuple[weakref.ref, list[int]]] = []  # each DDP module, its replica group
        # Each HSDP root module's parameters of one replica group: (module, name prefix, group, names).
        self.sharded: list[tuple[weakref.ref, str, list[int], frozenset[str]]] = []
        self.looked = False
        self.params: list[tuple[str, Any]] = []  # the gradients watched: (name, parameter)
        self.gradient_hooks: list[Any] = []  # their hooks' handles (removable)
        self.sums: list[tuple[int, Any]] = []  # (parameter, its gradient's sampled sum) since the last step
        self.folded_indices: tuple[int, ...] = ()
        self.index_tensor: Any = None  # folded_indices on the flags' device
        self.flags: Any = None  # one float per parameter on its device: NaN once a gradient was not finite
        # On a GPU, the flags' copy under way: (its step, the host's copy, its CUDA event), read later.
        self.copied: tuple[int, Any, Any] | None = None
        self.host: Any = None  # the flags' pinned copy on the host (a GPU's)
        self.pending: dict[str, Any] | None = None  # a fingerprint waiting for its buffers (the next forward)
        self.nonfinite_said = False
        self.last_written = 0
        self.handled = 0
        self.failed = False

    # ------------------------------------------------------------ the step boundary
    def after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.failed:
            return
        try:
            step = self.steps.get(id(optimizer), 0) + 1
            self.steps[id(optimizer)] = step
            if step <= self.handled:
                return  # a second optimizer of the same step: the first one's count is the step
            self.handled = step
            if not self.looked:
                self._find_modules()
            self._read_flags(step)
            if step % self.every == 0:
                self._fingerprint(step, with_buffers=True)
        except Exception as exc:  # the job goes on without fingerprints, said once in its record
            self.failed = True
            self._unhook()
            with contextlib.suppress(OSError):
                write_whole(
                    os.path.join(self.dir, FOLDER, f"{self.rank}.failed"),
                    {"rank": self.rank, "error": f"{type(exc).__name__}: {exc}"},
                )

    def at_exit(self) -> None:
        """The last step's fingerprint, when the job ended between two (every rank ends at the same step);
        a fingerprint still waiting for its buffers goes without them (no forward came after it)."""
        step = max(self.steps.values(), default=0)
        with contextlib.suppress(Exception):
            if self.pending is not None:
                self._finish(self.pending)
            elif step and step != self.last_written and not self.failed:
                self._fingerprint(step, with_buffers=False)

    # ------------------------------------------------------------ what is compared
    def _find_modules(self) -> None:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self.looked = True
        kinds = (DistributedDataParallel, *_fsdp_classes())
        # By type(o), not isinstance: isinstance reads each object's __class__, and some objects warn
        # when read (torch.distributed.reduce_op: a FutureWarning in the job's stderr, from here).
        objects = [o for o in gc.get_objects() if issubclass(type(o), kinds)]
        found = [o for o in objects if isinstance(o, DistributedDataParallel)]
        if not objects or not dist.is_initialized():
            self.failed = True  # no replica here: nothing more to do at any step
            return
        self.rank = dist.get_rank()
        # The groups now: at exit the job may have destroyed them already.
        self.modules = [(weakref.ref(m), _group_ranks(m)) for m in found]
        self._find_sharded([o for o in objects if not isinstance(o, DistributedDataParallel)])
        if not self.modules and not self.sharded:
            self.failed = True  # only fully sharded modules: said once, nothing to compare
            return
        for index, prefix, module, _ in self._live():
            if module.broadcast_buffers and any(True for _ in module.module.buffers()):
                module.module.register_forward_pre_hook(self._buffers_synced(index, prefix))
        import atexit

        atexit.register(self.at_exit)
        self._watch_gradients()

    def _find_sharded(self, objects: list[Any]) -> None:
        """FSDP2's and FSDP1's root modules (a wrapped layer is its root's): their parameters by replica
        group (the ranks holding the same shard); a module with none is said once, in a file."""
        if not objects:
            return
        fully_shard, fsdp1 = _fsdp_classes()
        roots = _outermost([o for o in objects if isinstance(o, fully_shard)])
        fsdp1_roots = _outermost([o for o in objects if isinstance(o, fsdp1)])
        notes: list[str] = []
        prefix = len(roots) + len(fsdp1_roots) + len(self.modules) > 1
        for index, root in enumerate([*roots, *fsdp1_roots]):
            at = f"fsdp{index}." * prefix
            groups: dict[tuple[int, ...], list[str]] = {}
            for name, param in root.named_parameters():
                group = _replicas_of(param) if index < len(roots) else _fsdp1_replicas(root)
                if group is not None and not (at + _shown(name, param)).startswith(self.skip):
                    groups.setdefault(group, []).append(name)
            replicated = {g: names for g, names in groups.items() if len(g) > 1}
            sharded = index >= len(roots) or any(hasattr(p, "device_mesh") for p in root.parameters())
            if not sharded:  # FSDP2 swaps in its unsharded parameters until it reshards them
                notes.append(
                    f"FSDP module {_unsharded_name(root)} held its parameters unsharded at the first "
                    "optimizer step (reshard_after_backward=False): not compared"
                )
            elif not replicated:
                notes.append(
                    f"FSDP module {_unsharded_name(root)} is {_how_sharded(root)}: no replicas to compare"
                )
            for group, names in replicated.items():
                self.sharded.append((weakref.ref(root), at, list(group), frozenset(names)))
        if notes:
            path = os.path.join(self.dir, FOLDER, f"{self.rank}{UNREPLICATED_SUFFIX}")
            write_whole(path, {"rank": self.rank, "notes": notes})

    def _live(self) -> list[tuple[int, str, Any, list[int]]]:
        """(index, name prefix, module, replica group) of every DDP module still alive."""
        live = [(i, ref(), ranks) for i, (ref, ranks) in enumerate(self.modules)]
        prefix = len(self.modules) > 1
        return [(i, f"module{i}." if prefix else "", m, ranks) for i, m, ranks in live if m is not None]

    def _fingerprint(self, step: int, with_buffers: bool) -> None:
        """The parameters now (after the optimizer's step); the buffers that DDP broadcasts differ on
        every rank until the next forward broadcasts them: they are added at its start (_buffers_synced)."""
        import torch

        if self.pending is not None:  # no forward came since the last one: it goes without its buffers
            self._finish(self.pending)
        record: dict[str, Any] = {"rank": self.rank, "step": step, "time": time.time(), "modules": {}}
        waiting = set()
        with torch.no_grad():
            for index, prefix, module, ranks in self._live():
                record["modules"][index] = self._tensors(module.module.named_parameters(), prefix)
                record["modules"][index].update(module=type(module.module).__name__, group=ranks)
                if with_buffers and module.broadcast_buffers and any(True for _ in module.module.buffers()):
                    waiting.add(index)
            # HSDP: each rank's own shard (FSDP synchronises no buffers: each rank's are its own).
            for index, (ref, prefix, ranks, names) in enumerate(self.sharded, start=len(self.modules)):
                root = ref()
                if root is None:
                    continue
                shards = ((_shown(n, p), _local(p)) for n, p in root.named_parameters() if n in names)
                record["modules"][index] = self._tensors(shards, prefix)
                record["modules"][index].update(module=_unsharded_name(root), group=ranks, kind="HSDP")
        if not record["modules"]:
            return
        record["waiting"] = waiting
        self.last_written = step
        if waiting:
            self.pending = record
        else:
            self._finish(record)

    def _tensors(self, named: Any, prefix: str) -> dict[str, list[Any]]:
        tensors = [(prefix + n, t) for n, t in named if not (prefix + n).startswith(self.skip)]
        exact, sums = _fingerprints([t for _, t in tensors])
        return {"names": [n for n, _ in tensors], "exact": exact, "sums": sums}

    def _buffers_synced(self, index: int, prefix: str):
        def hook(inner: Any, args: Any) -> None:
            import torch

            record = self.pending
            if record is None or index not in record["waiting"]:
                return
            with contextlib.suppress(Exception), torch.no_grad():
                buffers = self._tensors(inner.named_buffers(), prefix)
                for key in ("names", "exact", "sums"):
                    record["modules"][index][key] += buffers[key]
            record["waiting"].discard(index)
            if not record["waiting"]:
                self._finish(record)

        return hook

    def _finish(self, record: dict[str, Any]) -> None:
        self.pending = None
        record.pop("waiting", None)
        record["modules"] = [record["modules"][i] for i in sorted(record["modules"])]
        write_whole(os.path.join(self.dir, FOLDER, f"{self.rank}-{record['step']}{SUFFIX}"), record)

    # ------------------------------------------------------------ the first NaN or Inf
    def _watch_gradients(self) -> None:
        import torch

        self.params = [
            (prefix + name, p)
            for _, prefix, module, _ in self._live()
            for name, p in module.module.named_parameters()
            if p.requires_grad and not (prefix + name).startswith(self.skip)
        ]
        if not self.params:
            return
        _SUM_DTYPE.update({torch.float16: torch.float32, torch.bfloat16: torch.float32})
        self.flags = torch.zeros(len(self.params), dtype=torch.float32, device=self.params[0][1].device)
        for index, (_, param) in enumerate(self.params):
            if param.device != self.flags.device:
                continue  # a model across devices: its first device's parameters are watched
            self.gradient_hooks.append(param.register_hook(self._gradient_hook(index)))

    def _gradient_hook(self, index: int):
        def seen(grad: Any) -> None:
            # A sample: a NaN in the loss or an activation fills whole rows of every gradient behind
            # it. Only its sum is kept here (one op; the hook runs for every tensor every backward):
            # the step boundary folds them into the flags at once (_fold).
            if grad.numel() > GRADIENT_SAMPLE:
                grad = grad.reshape(-1)[:: grad.numel() // GRADIENT_SAMPLE | 1]
            self.sums.append((index, grad.sum(dtype=_SUM_DTYPE.get(grad.dtype))))
            if len(self.sums) >= FOLD_AFTER * len(self.params):  # many backwards, no step: fold now
                self._fold()

        return seen

    def _fold(self) -> None:
        """The gradients' sums since the last step into their parameters' flags, in two ops: NaN * 0
        and Inf * 0 are NaN, a finite sum * 0 is 0 (no sync, nothing kept)."""
        import torch

        if not self.sums:
            return
        indices, sums = zip(*self.sums, strict=True)
        self.sums = []
        if indices != self.folded_indices:  # the same every step but for a frozen parameter
            self.folded_indices = indices
            self.index_tensor = torch.tensor(indices, device=self.flags.device)
        self.flags.index_add_(0, self.index_tensor, torch.stack(sums).mul_(0))

    def _read_flags(self, step: int) -> None:
        """This step's flags (on a CPU), or the step before's copy once it arrived (on a GPU)."""
        import torch

        if self.flags is None or self.nonfinite_said:
            return
        self._fold()
        if self.flags.device.type == "cpu":
            self._judge_flags(step, self.flags.clone())
        else:
            if self.copied is not None and self.copied[2].query():
                self._judge_flags(self.copied[0], self.copied[1])
                self.copied = None
            if self.copied is None:
                if self.host is None:  # pinned once: the copy is read only after it arrived
                    self.host = torch.empty(self.flags.shape, dtype=self.flags.dtype, pin_memory=True)
                self.host.copy_(self.flags, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self.copied = (step, self.host, event)
            else:
                return  # the last copy has not arrived: keep adding into the same flags
        self.flags.zero_()

    def _unhook(self) -> None:
        for hook in self.gradient_hooks:
            hook.remove()
        self.gradient_hooks, self.sums = [], []

    def _judge_flags(self, step: int, flags: Any) -> None:
        bad = [i for i, value in enumerate(flags.tolist()) if value != 0.0]
        if not bad:
            return
        self.nonfinite_said = True
        self._unhook()  # said once: the gradients need no more looks
        write_whole(
            os.path.join(self.dir, FOLDER, f"{self.rank}{NONFINITE_SUFFIX}"),
            {
                "rank": self.rank,
                "step": step,
                "time": time.time(),
                "where": "gradient",
                "parameters": [self.params[i][0] for i in bad[:8]],
                "count": len(bad),
            },
        )


def _fsdp_classes() -> tuple[type, ...]:
    """(FSDP2's FSDPModule, FSDP1's FullyShardedDataParallel) where the job imported them, else ()."""
    package = sys.modules.get(FSDP_PACKAGE)
    fully_shard = getattr(package, "FSDPModule", None)
    fsdp1 = getattr(package, "FullyShardedDataParallel", None)
    return (fully_shard, fsdp1) if fully_shard is not None and fsdp1 is not None else ()


def _outermost(modules: list[Any]) -> list[Any]:
    """The modules not inside another of them (a wrapped layer is its root's), in the order found."""
    inner = {id(m) for outer in modules for m in outer.modules() if m is not outer}
    return [m for m in modules if id(m) not in inner]


def _unsharded_name(module: Any) -> str:
    """The user's class of an FSDP2 module (fully_shard makes its class FSDP<Class>, a subclass of
    both), or of the module inside an FSDP1 wrapper."""
    fully_shard, fsdp1 = _fsdp_classes()
    inner = module.module if isinstance(module, fsdp1) else module
    return next(cls.__name__ for cls in type(inner).__mro__ if not issubclass(cls, fully_shard))


def _how_sharded(module: Any) -> str:
    """Words for a module with no replica: its mesh (FSDP2) or its sharding strategy (FSDP1)."""
    mesh = next((tuple(p.device_mesh.shape) for p in module.parameters() if hasattr(p, "device_mesh")), None)
    if mesh is not None:
        return f"fully sharded (mesh {mesh})"
    strategy = getattr(getattr(module, "sharding_strategy", None), "name", "")
    return f"fully sharded (FSDP1, {strategy})" if strategy else "fully sharded"


def _local(param: Any) -> Any:
    """This rank's own data of a parameter: a DTensor's local shard; FSDP1's flat parameter as it is
    (after the optimizer's step it holds this rank's shard)."""
    return param.to_local() if hasattr(param, "to_local") else param


def _shown(name: str, param: Any) -> str:
    """A parameter's name as the user wrote it: FSDP1's wrappers left out, and a flat parameter with
    the parameters it holds (the first three)."""
    name = name.replace("_fsdp_wrapped_module.", "").replace("_checkpoint_wrapped_module.", "")
    held = getattr(param, "_fqns", None)
    if held:
        name += f" ({', '.join(held[:3])}{', ...' if len(held) > 3 else ''})"
    return name


def _fsdp1_replicas(module: Any) -> tuple[int, ...] | None:
    """The ranks holding the same shard as this one under FSDP1: HYBRID_SHARD's replicas are its
    inter-node group; NO_SHARD's, every rank of its group; the other strategies have none."""
    import torch.distributed as dist

    strategy = getattr(getattr(module, "sharding_strategy", None), "name", "")
    group = {
        "HYBRID_SHARD": getattr(module, "_inter_node_pg", None),
        "_HYBRID_SHARD_ZERO2": getattr(module, "_inter_node_pg", None),
        "NO_SHARD": getattr(module, "process_group", None),
    }.get(strategy)
    return tuple(sorted(dist.get_process_group_ranks(group))) if group is not None else None


def _replicas_of(param: Any) -> tuple[int, ...] | None:
    """The ranks holding the same shard of a DTensor parameter as this rank (itself included): its
    mesh's ranks along the dimensions it is replicated on, this rank's coordinate on the others.
    None: not a DTensor (FSDP's ignored parameters: nothing says who holds the same), or not on this rank."""
    mesh, placements = getattr(param, "device_mesh", None), getattr(param, "placements", None)
    coordinate = mesh.get_coordinate() if mesh is not None and placements is not None else None
    if coordinate is None:
        return None
    where = tuple(
        slice(None) if placement.is_replicate() else at
        for placement, at in zip(placements, coordinate, strict=True)
    )
    return tuple(sorted(int(r) for r in mesh.mesh[where].reshape(-1).tolist()))


def _group_ranks(module: Any) -> list[int]:
    import torch.distributed as dist

    group = getattr(module, "process_group", None)
    return list(dist.get_process_group_ranks(group)) if group is not None else []


def _exact(flat: Any) -> Any:
    """The wrapping int64 sum of a contiguous tensor's bytes, eight at a time (the tail's bytes added
    one by one): a flipped bit changes one term by a power of two below 2**64, so the sum too."""
    import torch

    data = flat.view(torch.uint8)
    whole = data.numel() // 8 * 8
    try:
        total = data[:whole].view(torch.int64).sum()
    except RuntimeError:  # a view at an offset that is no multiple of 8 bytes: element by element
        as_integers = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
        return flat.view(as_integers).sum(dtype=torch.int64)
    return total + data[whole:].sum(dtype=torch.int64) if whole < data.numel() else total


def _fingerprints(tensors: list[Any]) -> tuple[list[int], list[float]]:
    """Per tensor: its exact fingerprint (_exact) and its sum (how much it differs)."""
    import torch

    exact, sums = [], []
    for tensor in tensors:
        flat = tensor.detach().contiguous().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        exact.append(_exact(flat))
        # In its own precision (float32's sum is a pass; float64's a slow cast), half's in float32.
        total = (
            flat.sum(dtype=_SUM_DTYPE.get(flat.dtype))
            if flat.is_floating_point()
            else flat.sum(dtype=torch.int64)
        )
        sums.append(total.to(torch.float64))
    if len({t.device for t in exact}) > 1:  # a module across devices: one copy each
        return [int(t) for t in exact], [float(t) for t in sums]
    # One copy to the host for the whole module (one wait on a GPU, every N steps).
    return torch.stack(exact).tolist(), torch.stack(sums).tolist()


# Half precision's gradients are summed in float32: a finite gradient's sum must not overflow to Inf.
_SUM_DTYPE: dict[Any, Any] = {}
