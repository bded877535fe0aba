"""The failure side: what explains a run or a job that could not complete.

Flight-recorder dumps, Python stacks, the errors a lost peer leaves, a launcher's failure
summary, and the report of one of ddpcheck's own runs that crashed or hung. Used by the
launcher's monitor, the ranks (inline), `watch` and `postmortem` alike.
"""
