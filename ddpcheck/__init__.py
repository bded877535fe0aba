"""ddpcheck: can these ranks train with DistributedDataParallel, and if not, who is at fault."""

__version__ = "0.1.0"
