"""Pure: many Python stack samples of every rank of a job that progresses -> the rank its peers wait for.

`attach` reads a job from outside, with no flight recorder to time its collectives: what it has is
each rank's main-thread stack, sampled again and again over its interval. A rank whose peers are
waiting in a collective in most of their samples, while it is mostly elsewhere (its data loading,
its compute), is the one they wait for. docs/attach.md has the rule's figures.

- A sample is WAITING when its innermost frame is torch.distributed's or the autograd engine's (the
  frames failure/stacks.py takes for "in a collective"): a rank blocked in all_reduce, barrier, or
  in backward(), where DDP waits for its gradients' all_reduce. Innermost only: a DDP model's
  forward runs inside DistributedDataParallel.forward, yet its innermost frame is the model's.
- A rank is named when its peers' median share of waiting samples is at least PEERS_WAIT, its own
  at least GAP under that median, and it has MIN_SAMPLES samples or more (so have its peers).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddpcheck.failure.stacks import Stack
from ddpcheck.failure.stragglers import why

# Its peers wait in at least this share of their samples: the job spends its time waiting (for it).
PEERS_WAIT = 0.5
# ...and it waits in at least this much less of its own: it is where its peers are not.
GAP = 0.4
# A gap this large (but under GAP, or on few samples) is a suspect: attach takes as many samples again
# and judges on them all, so that one unlucky second names nobody and a real straggler is confirmed.
SUSPECT_GAP = 0.2
# Fewer samples of a rank than this say too little of its shares (attach takes 20 rounds at least).
MIN_SAMPLES = 12


@dataclass(frozen=True)
class Share:
    rank: int
    samples: int  # its stacks read
    waiting: int  # ...of them in a collective


@dataclass(frozen=True)
class Straggler:
    rank: int
    share: float  # its samples waiting in a collective
    peers_share: float  # its peers' median
    samples: int
    where: why.Where | None  # its commonest place outside a collective


def waiting(stack: Stack) -> bool:
    """The rank's innermost frame is torch.distributed's or the autograd engine's: it waits for peers."""
    return bool(stack) and stack[0].in_collective


def shares(history: Mapping[int, Sequence[Stack]]) -> dict[int, Share]:
    return {rank: Share(rank, len(s), sum(waiting(x) for x in s)) for rank, s in history.items()}


def judge(history: Mapping[int, Sequence[Stack]], gap: float = GAP) -> list[Straggler]:
    """The ranks their peers wait for, slowest (least waiting) first; [] for a healthy job."""
    seen = {r: s for r, s in shares(history).items() if s.samples >= MIN_SAMPLES}
    if len(seen) < 2:
        return []
    share = {r: s.waiting / s.samples for r, s in seen.items()}
    named = []
    for rank in seen:
        peers = statistics.median(v for r, v in share.items() if r != rank)
        if peers >= PEERS_WAIT and share[rank] <= peers - gap + 1e-9:
            where = why.where_of([s for s in history[rank] if not waiting(s)])
            named.append(Straggler(rank, share[rank], peers, seen[rank].samples, where))
    return sorted(named, key=lambda s: s.share)


def suspected(history: Mapping[int, Sequence[Stack]]) -> bool:
    """A rank its peers may wait for: worth as many samples again before judging."""
    return bool(judge(history, SUSPECT_GAP))


def place(straggler: Straggler) -> str:
    """'load_batch (framework_job.py:52), data loading, in 17 of 20 samples'."""
    where = straggler.where
    return f"{where.text}, in {where.there} of {straggler.samples} samples" if where else ""


def summary(history: Mapping[int, Sequence[Stack]]) -> str:
    """'rank 0 11/20, rank 1 2/20': each rank's waiting samples, the evidence beside any verdict."""
    return ", ".join(
        f"rank {s.rank} {s.waiting}/{s.samples}"
        for s in sorted(shares(history).values(), key=lambda s: s.rank)
    )
