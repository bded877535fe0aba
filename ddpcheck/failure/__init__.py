"""The failure side: what explains a run or a job that could not complete."""
