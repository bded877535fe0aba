"""links' own --inject kind as its ranks strike it: `slowlink` (__init__.py declares it)."""

from __future__ import annotations

import time

from ddpcheck.rank.faults import Faults

# slowlink: rank R's exchanges take this many times as long (it waits factor - 1 times each one's
# own duration before taking part), so its links run at about a tenth of their speed.
SLOWLINK_FACTOR = 10


class LinkFaults(Faults):
    """A links rank's faults: the harness's, and a slow link."""

    def slowlink(self, seconds: float) -> None:
        """Before an exchange that takes `seconds` by itself, wait (SLOWLINK_FACTOR - 1) times as long."""
        if self.has("slowlink") and seconds > 0:
            time.sleep((SLOWLINK_FACTOR - 1) * seconds)
