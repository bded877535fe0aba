"""Stragglers: the rank that slows a running job, judged from samples of its ranks' flight recorders.

Pure: samples in (what each rank's flight recorder held when `ddpcheck watch` asked, taken again
and again: samples.py), a Judgement out (judge.py, over timeline.py's arrivals), why a named rank is
slow from what the watcher saw of each rank (why.py: its stacks, its /proc, its GPU), its words apart
(words.py); no process, no sampling loop, no torch. docs/stragglers.md explains the rule; in short:

- Every process group is judged alone (a pipeline's stages reach their own groups' collectives at
  different times by design); a group of one rank is skipped.
- For each collective #k that every member holds, with #k-1 before it also held by every member,
  each rank's ARRIVAL at #k is placed on one timeline per collective, and its WORK before #k is
  its arrival minus its release from #k-1. The timeline, by estimator:
  - `gpu` (NCCL with TORCH_NCCL_ENABLE_TIMING=1, every member's entries carry `duration_ms`):
    a collective's kernels end together on every member, so a rank's arrival is that common end
    minus its own duration, a difference on its own GPU's clock: no clock is compared with another.
    The release is the end of #k-1, one period (the members' median interval between their
    enqueues of #k-1 and #k, each on its own clock) before the end of #k.
  - `enqueue` (gloo, NCCL without timing): each rank's `time_created_ns`, on one clock: ranks of
    one host share it; ranks of different hosts are compared only with their clocks' offsets
    (watch's team measures them: checks/watch/clocks.py); without them each host's ranks are
    compared among themselves.
    The release is the last arrival at #k-1 (a blocking collective ends when its last member
    arrives; its transfer, not recorded, counts as work).
  The interval between a rank's consecutive enqueues is NOT used: on every rank it is, on
  average, the same (each waits in #k-1 until the last arrives), whoever is slow.
- A rank is named by the wait it causes: its peers' wait share (how long their median waited for
  it, where it arrived after them, summed over all the group's collectives of the window, over the
  window's wall time) at least WAIT_SHARE more than their wait for the median of its peers. So a
  rank late only at the first of a step's collectives, or only now and then, is named. Per
  collective, "late" (its work at least MARGIN x its peers' median, and later by MIN_LAG_S) and
  its lag are the evidence shown beside it, not the gate.
- Nobody named, a group whose collectives came SLOWED_BY further apart since a change than before
  it slowed as a whole (every rank alike): said with when and by how much, not as "nobody".
"""
