"""The collective sweep, and one small definition per collective (nccl-tests' common.cu, its op files)."""
