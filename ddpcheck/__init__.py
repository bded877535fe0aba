"""ddpcheck: can these ranks train with DistributedDataParallel, and if not, who is at fault."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`ddpcheck.preflight(...)` (docs/preflight.md), loaded on first use: `import ddpcheck` stays cheap."""
    if name in ("preflight", "PreflightFailed", "PreflightUsageError"):
        import importlib

        module = importlib.import_module("ddpcheck.preflight")  # callable: preflight() itself
        return module if name == "preflight" else getattr(module, name)
    raise AttributeError(f"module 'ddpcheck' has no attribute {name!r}")
