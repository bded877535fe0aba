"""A one-GPU NCCL job that dies of an out-of-memory error after one collective (tests/gpu/run.sh)."""

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(0)
buffer = torch.ones(1 << 20, device="cuda")
dist.all_reduce(buffer)
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
too_much = torch.empty(total * 2 // 4, dtype=torch.float32, device="cuda")  # twice the card: raises
