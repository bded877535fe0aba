"""A one-GPU NCCL job that hangs as a stuck rank does: a few collectives, then one enqueued behind a
kernel that never ends (torch.cuda._sleep), and a host wait for it. Its flight-recorder entry stays
`scheduled`. Run under torchrun --nproc-per-node 1 (tests/gpu/run.sh)."""

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(0)
buffer = torch.ones(1 << 20, device="cuda")
for _ in range(3):
    dist.all_reduce(buffer)
torch.cuda.synchronize()
print("three all_reduces done; now a kernel that spins", flush=True)
torch.cuda._sleep(1 << 40)  # cycles: far longer than any test waits
dist.all_reduce(buffer)  # enqueued behind it: never started
torch.cuda.synchronize()  # the host waits here for ever
