"""The failure side: what explains a run or a job that could not complete.

Flight-recorder dumps, Python stacks, the errors a lost peer leaves, a launcher's failure
summary, when a rank counts as frozen (and the stage names it is judged by), and the report of
one of ddpcheck's own runs that crashed or hung. Used by the launcher's monitor, the ranks
(inline), `watch` and `postmortem` alike; it imports only the report side below it.
"""
