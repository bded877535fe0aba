"""One module or folder per command: what it measures on every rank and how rank 0 judges it."""
