"""The entry point, `ddpcheck` and `python -m ddpcheck`: a Ctrl-C ends it cleanly from its first moment.

The handler goes in before anything heavy is imported (Typer, the commands, later torch):
importing them takes seconds on a busy host, and a Ctrl-C then must not end in a traceback.
"""

from ddpcheck.launcher import interrupt


def main() -> None:
    interrupt.install()
    from ddpcheck.cli import main as run

    run()


if __name__ == "__main__":
    main()
