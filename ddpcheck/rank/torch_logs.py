"""torch's C++ log level: quiet in ddpcheck's own process, the user's own in the ranks' log files."""

from __future__ import annotations

import os
import sys

USER_CPP_LOG_LEVEL = "DDPCHECK_USER_TORCH_CPP_LOG_LEVEL"


def quiet_torch_cpp_logs() -> None:
    """Keep torch's C++ warnings (store retries, socket errors) off the launcher's terminal.

    Must run before torch is imported, which reads the level once; ddpcheck reports those
    failures itself, and the ranks get the user's level back for their log files.
    """
    if "torch" in sys.modules:
        return
    os.environ[USER_CPP_LOG_LEVEL] = os.environ.get("TORCH_CPP_LOG_LEVEL", "WARNING")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
