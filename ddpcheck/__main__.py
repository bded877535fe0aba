"""The entry point, `ddpcheck` and `python -m ddpcheck`: a Ctrl-C ends it cleanly from its first moment.

The handler goes in before anything heavy is imported (Typer, the commands, later torch):
importing them takes seconds on a busy host, and a Ctrl-C then must not end in a traceback.
Even ddpcheck's own first modules take a moment to load there (docs/failures.md): a signal
that comes meanwhile is noted first, by a handler that needs no import, and acted on once
`interrupt` answers Ctrl-C.
"""

import _signal  # built into the interpreter: nothing to load before a Ctrl-C is noted
import posix  # built in too: the environment, before os is loaded

# The process that started this one, read first: a launcher that dies while ddpcheck's modules load
# is then seen gone (interrupt.install); read later, its orphan's new parent would pass for it.
_parent_at_start = posix.getppid()

_noted_before: list[int] = []
if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:  # an ignored one stays ignored
    _signal.signal(_signal.SIGINT, lambda signum, frame: _noted_before.append(signum))

from ddpcheck.failure.rank_env import RANK_VARIABLES  # noqa: E402 (standard library only, and small)

# A launcher's rank: its SIGTERM (another rank failed) is noted too, and answered once rank/early.py
# is loaded. By default it would end the rank without a word while ddpcheck's first modules load.
_terms_noted: list[int] = []
_launched = any(name.encode() in posix.environ for name in RANK_VARIABLES)
if _launched and _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
    _signal.signal(_signal.SIGTERM, lambda signum, frame: _terms_noted.append(signum))

import os  # noqa: E402
import sys  # noqa: E402

from ddpcheck.rank import arrival, interrupt  # noqa: E402 (after the handler above, on purpose)


def main() -> None:
    interrupt.install(noted_before=_noted_before, parent=_parent_at_start)
    # A rank of torchrun, srun or mpirun says it is here before Typer and torch load (rank/arrival.py),
    # and from then on answers its launcher's SIGTERM by naming the peer that failed.
    if arrival.start(os.environ, sys.argv[1:]) is not None:
        from ddpcheck.rank import early

        early.answer_sigterm(noted=bool(_terms_noted))
    elif _terms_noted or _signal.getsignal(_signal.SIGTERM) not in (_signal.SIG_DFL, _signal.SIG_IGN):
        _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)  # not a rank here: SIGTERM ends it as before
        if _terms_noted:
            os.kill(os.getpid(), _signal.SIGTERM)
    from ddpcheck.cli import main as run

    run()


if __name__ == "__main__":
    main()
