"""How ranks start: the launch options every command that runs on ranks takes, declared once.

Torch-free: the CLI validates them before a rank is spawned.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpcheck.command import option
from ddpcheck.errors import UsageError, check_between

BACKENDS = ("auto", "nccl", "gloo")
MAX_RANKS_PER_NODE = 256
MAX_NODES = 100_000
MAX_TIMEOUT_S = 86_400.0
LAUNCH = "Launch"  # the help section


@dataclass(kw_only=True)
class LaunchOptions:
    """How ranks start; shared by every command that launches."""

    gpus: int | None = option(None, help="GPU ranks on this node, one per GPU, over NCCL.", panel=LAUNCH)
    nproc: int | None = option(
        None,
        help="Ranks of any kind on this node (CPU ranks over gloo when GPUs are too few).",
        panel=LAUNCH,
    )
    backend: str = option("auto", help="auto, nccl or gloo.", choices=BACKENDS, panel=LAUNCH, metavar="NAME")
    nnodes: int = option(1, help="Nodes taking part (the same command runs on each).", panel=LAUNCH)
    node_rank: int = option(0, help="This node's rank, 0..nnodes-1.", panel=LAUNCH)
    rdzv_endpoint: str | None = option(
        None, help="HOST:PORT of the c10d rendezvous, as torchrun.", panel=LAUNCH, metavar="HOST:PORT"
    )
    timeout: float = option(
        60.0, help="Seconds any wait may last; a hang becomes a finding.", panel=LAUNCH, metavar="SECONDS"
    )
    inject: list[str] = option(
        default_factory=list,
        help="Inject a fault to prove the check catches it; repeatable, or comma-separated (crash@0,hang@1).",
        metavar="KIND@RANK[:STAGE]",
        cli_type=list[str] | None,
        panel=LAUNCH,
    )

    def validate(self) -> None:
        if self.gpus is not None and self.nproc is not None:
            raise UsageError("give --gpus or --nproc, not both")
        for name, value in (("--gpus", self.gpus), ("--nproc", self.nproc)):
            check_between(name, value, 1, MAX_RANKS_PER_NODE)
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        check_between("--nnodes", self.nnodes, 1, MAX_NODES)
        if not 0 <= self.node_rank < self.nnodes:
            raise UsageError(
                f"--node-rank must be in 0..{self.nnodes - 1} for --nnodes {self.nnodes}, "
                f"got {self.node_rank}"
            )
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
        if self.rdzv_endpoint is not None:
            parse_endpoint(self.rdzv_endpoint)
        if not 0 < self.timeout <= MAX_TIMEOUT_S:
            raise UsageError(f"--timeout must be in (0, {MAX_TIMEOUT_S:.0f}] seconds, got {self.timeout:g}")


def parse_endpoint(text: str) -> tuple[str, int]:
    """'HOST:PORT' or '[IPv6]:PORT' -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or any(c.isspace() for c in host):
        raise UsageError(f"malformed --rdzv-endpoint {text!r}: expected HOST:PORT")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise UsageError(f"--rdzv-endpoint port must be 1..65535, got {port}")
    return host, port
