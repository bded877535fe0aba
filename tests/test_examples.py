"""Every shell example in README.md and docs/ runs as written, or is listed here with its reason.

The examples: the lines of ```bash blocks (a `#!` script is one example), the `$ ` lines of
transcripts, one-line command blocks, the `run:` steps of a CI workflow (```yaml) and the
README's command table. Each block runs in a temp directory (HOME and TMPDIR in it too), its
commands in order in one shell, and each command must exit as its page says: a transcript's
verdict (PASS 0, FAIL 1, ERROR 3, `ddpcheck: error:` 2), EXPECTED_CODES where the text says
it, 0 otherwise. An example that cannot run here is in SKIPPED with a reason that the test
checks against the command, so a new example is run, or listed, never silently unchecked.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import worker_processes
from tests.support.fr_dumps import nccl_dump

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GOLDEN = ROOT / "tests" / "golden" / "reports"

FENCE = re.compile(r"^\s*(```|~~~)\s*(\S*)")
PROMPT = re.compile(r"^\s*\$ (.*)$")
# A verdict line, or under --quiet a failing check's line when the transcript stops before the verdict.
VERDICT = re.compile(r"^\s*(PASS|WARN|FAIL|ERROR)\s+ddpcheck ")
QUIET_CHECK = re.compile(r"^\s*(FAIL|ERROR) \S")
CODES = {"PASS": 0, "WARN": 0, "FAIL": 1, "ERROR": 3}
COMMAND_WORD = re.compile(r"^(python|ddpcheck|torchrun|srun|sbatch|mpirun)\s")
TRAILING_COMMENT = re.compile(r"\s+#\s.*$")


@dataclass(frozen=True)
class Example:
    block: str  # "docs/ci.md:22": the page and the line of the block's fence (or "README.md:table")
    line: int
    command: str  # as written; a script's whole text
    expected: int | None  # what a transcript shows; None: the page shows no verdict

    @property
    def key(self) -> str:
        """How SKIPPED and EXPECTED_CODES name it: the command without its trailing comment; a
        script by its first line after the `#!`."""
        if self.command.startswith("#!"):
            return self.command.splitlines()[1]
        return TRAILING_COMMENT.sub("", self.command).strip()


def _shell_lines(numbered: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(line, command): blank lines and comments dropped, `\\` continuations joined."""
    commands: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in numbered:
        if pending is None and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending = (number, line.strip()) if pending is None else (pending[0], pending[1] + "\n" + line)
        if not line.rstrip().endswith("\\"):
            commands.append(pending)
            pending = None
    return commands


def _transcript(block: str, numbered: list[tuple[int, str]]) -> list[Example]:
    """The `$ ` lines, each expecting what its output shows."""
    found: list[Example] = []
    for index, (number, line) in enumerate(numbered):
        match = PROMPT.match(line)
        if not match:
            continue
        output = []
        for _, after in numbered[index + 1 :]:
            if PROMPT.match(after):
                break
            output.append(after)
        found.append(Example(block, number, match.group(1).strip(), _shown_code(output)))
    return found


def _shown_code(output: list[str]) -> int | None:
    for line in reversed(output):
        if line.startswith("ddpcheck: error: "):
            return 2
        if match := VERDICT.match(line):
            return CODES[match.group(1)]
    quiet = [CODES[m.group(1)] for line in output if (m := QUIET_CHECK.match(line))]
    return max(quiet) if quiet else None


def _workflow_runs(numbered: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The `run:` steps of a GitHub Actions workflow, as shell lines."""
    lines: list[tuple[int, str]] = []
    index = 0
    while index < len(numbered):
        number, line = numbered[index]
        index += 1
        match = re.match(r"^(\s*)(?:- )?run:\s*(.*)$", line)
        if not match:
            continue
        if match.group(2).strip() != "|":
            lines.append((number, match.group(2)))
            continue
        indent = len(match.group(1))
        while index < len(numbered):
            body_number, body = numbered[index]
            if body.strip() and len(body) - len(body.lstrip()) <= indent:
                break
            lines.append((body_number, body))
            index += 1
    return _shell_lines(lines)


def _fenced(page: Path) -> list[tuple[int, str, list[tuple[int, str]]]]:
    """(fence line, language, numbered lines) of every fenced block."""
    blocks, current = [], None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        match = FENCE.match(line)
        if match and current is None:
            current = (number, match.group(2), [])
        elif match:
            blocks.append(current)
            current = None
        elif current is not None:
            current[2].append((number, line))
    return blocks


def examples_in(page: Path) -> list[Example]:
    name = str(page.relative_to(ROOT))
    found: list[Example] = []
    for fence, language, numbered in _fenced(page):
        block = f"{name}:{fence}"
        if language in ("bash", "sh", "shell"):
            if numbered and numbered[0][1].startswith("#!"):
                found.append(Example(block, numbered[0][0], "\n".join(line for _, line in numbered), 0))
                continue
            found += [Example(block, n, command, None) for n, command in _shell_lines(numbered)]
        elif language == "yaml":
            found += [Example(block, n, command, None) for n, command in _workflow_runs(numbered)]
        elif language in ("", "console"):
            prompts = _transcript(block, numbered)
            text = [line for _, line in numbered if line.strip()]
            if prompts:
                found += prompts
            elif text and "[" not in "".join(text) and all(COMMAND_WORD.match(line) for line in text):
                found += [Example(block, n, command, None) for n, command in _shell_lines(numbered)]
    return found


def readme_table() -> list[Example]:
    """The example column of the README's command table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = text.index("## Commands")
    found = []
    for number, line in enumerate(text[start:], start + 1):
        if line.startswith("## ") and number > start + 1:
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 2 and cells[1].startswith("`ddpcheck"):
            found.append(Example("README.md:table", number, cells[1].strip("`"), None))
    return found


def all_examples() -> list[Example]:
    return readme_table() + [example for page in PAGES for example in examples_in(page)]


# ---------------------------------------------------------------- what cannot run here, and why
@dataclass(frozen=True)
class Reason:
    why: str
    shows: str  # a pattern the command must hold for the reason to be true of it


GPU = Reason("needs CUDA GPUs: tests/gpu/run.sh runs on a GPU machine", r"--gpus|--backend nccl")
GPU_NODE = Reason(
    "one rank per GPU of an 8-GPU node (tests/test_launchers.py runs ddpcheck under torchrun)",
    r"--nproc-per-node 8",
)
SLURM = Reason(
    "needs a Slurm allocation (tests/test_launchers.py and test_fleet.py start a real Slurm)",
    r"\bsrun\b|\bsbatch\b|scontrol|SLURM_",
)
MPI = Reason("Open MPI: tests/test_launchers.py runs ddpcheck under a real mpirun", r"\bmpirun\b")
HOSTS = Reason("needs a second host", r"node\d\$ |-H node|10\.0\.0\.1")
INSTALL = Reason("installs packages: the environment the tests run in is installed already", r"pip install")
SUITE = Reason(
    "the test suite itself, or mutation testing of it: minutes to hours (CI, .ci/run, runs the suite)",
    r"pytest|mutmut",
)
BENCHMARK = Reason("a benchmark of minutes (tests/perf/): its figures are in the docs", r"tests/perf/")
USER_JOB = Reason("your own training job, not in this project", r"train\.py|train\.sbatch|job\.sh| \.\.\. ")
RUNNING_JOB = Reason(
    "reads a job running now, by its pid (tests/test_attach.py starts real jobs to attach to)", r"attach"
)
KEPT_DIR = Reason(
    "reads a directory a watched job left (tests/test_postmortem_watch_runs.py makes one)", r" D\b"
)
LEFT_BY_SKIPPED = Reason("reads what a skipped command before it made", r"\$JOB_DIR|slow\.txt|bad\.txt")


def _listed(reason: Reason, *commands: str) -> dict[str, Reason]:
    return dict.fromkeys(commands, reason)


SKIPPED: dict[str, Reason] = {
    **_listed(
        RUNNING_JOB,
        "ddpcheck attach 12345",
        "ddpcheck attach PID",
        "ddpcheck attach --all",
        "ddpcheck attach PID --kill",
        "srun --overlap --jobid J --ntasks-per-node 1 ddpcheck attach --all --dir /shared/attach",
        "ddpcheck attach 41822 -q",
    ),
    **_listed(KEPT_DIR, "ddpcheck postmortem D --quiet"),
    **_listed(
        GPU,
        "ddpcheck allreduce --gpus 8",
        "ddpcheck profile --gpus 8",
        "ddpcheck links --gpus 8 --json links.json",
        "ddpcheck devices --gpus 8",
        "ddpcheck allreduce --gpus 8 --json baselines/h100-sxm.json",
        "ddpcheck profile   --gpus 8 --json baselines/h100-sxm-profile.json",
        "ddpcheck allreduce --gpus 8 --baseline baselines/h100-sxm.json --junit sweep.xml",
        "ddpcheck allreduce --gpus 8 --hostlist bad.txt",
        "ddpcheck devices --gpus 8 --prom /var/lib/node_exporter/textfile/ddpcheck.prom",
        "ddpcheck devices --gpus 8 --drain",
        "ddpcheck allreduce --gpus 8 --budget 9 --drain",
        "ddpcheck links --gpus 8 --budget 20",
        "ddpcheck allreduce --gpus 8 --html allreduce.html",
        # fleet.md's Slurm scripts, named by their first line: each checks 8 GPUs
        "# /etc/slurm/healthcheck.sh  (slurm.conf: HealthCheckProgram=/etc/slurm/healthcheck.sh",
        "# /etc/slurm/prolog.d/ddpcheck.sh: under MessageTimeout (10 s): as much of the sweep as fits"
        " in 9 s,",
        "# /etc/slurm/epilog.d/ddpcheck.sh: after each job, a fuller check (set PrologEpilogTimeout,"
        " e.g. 120:",
    ),
    **_listed(
        GPU_NODE,
        "torchrun --nproc-per-node 8 --shutdown-timeout 5 -m ddpcheck allreduce --timeout 30",
        "torchrun --nproc-per-node 8 -m ddpcheck.preflight --budget 10"
        " && torchrun --nproc-per-node 8 train.py",
    ),
    **_listed(
        SLURM,
        "srun -n 16 --kill-on-bad-exit=1 ddpcheck allreduce --timeout 30",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'srun ddpcheck allreduce --gpus 8 --nnodes "$SLURM_NNODES" --rdzv-endpoint "$head:29400"',
        "srun --ntasks-per-node=1 ddpcheck env --quiet",
        "srun -N 64 --ntasks-per-node 8 --gpus-per-node 8 ddpcheck links --hostlist slow.txt --timeout 120",
        "sbatch --exclude=$(cat slow.txt) train.sbatch",
        'srun --ntasks-per-node=1 ddpcheck links --gpus 8 --nnodes "$SLURM_NNODES"'
        ' --rdzv-endpoint "$head:29400"',
        # multinode.md's sbatch scripts, named by their first line
        "# sbatch, one task per node running the multi-node launch (--node-rank = SLURM_NODEID).",
        "# sbatch, one task per GPU: every task is one rank, nothing is spawned.",
        "srun -K -n 16 ddpcheck watch -- python train.py",
        "srun --kill-on-bad-exit=1 python -m ddpcheck.preflight --min-busbw 100 --json preflight.json \\\n"
        "  && srun python train.py",
    ),
    **_listed(
        MPI,
        "mpirun -np 4 ddpcheck allreduce",
        "mpirun -np 16 -H node1:8,node2:8 -x MASTER_ADDR=node1 -x MASTER_PORT=29500 ddpcheck allreduce",
        "ddpcheck watch --json watch.json -- mpirun -np 4 python train.py",
    ),
    **_listed(
        HOSTS,
        "node0$ ddpcheck allreduce --gpus 8 --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29400",
        "node1$ ddpcheck allreduce --gpus 8 --nnodes 2 --node-rank 1 --rdzv-endpoint 10.0.0.1:29400",
        "node0$ ddpcheck links --gpus 8 --nnodes 16 --node-rank 0 --rdzv-endpoint 10.0.0.1:29400"
        " --json links.json",
        "torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 \\\n"
        "    -m ddpcheck allreduce",
    ),
    **_listed(
        INSTALL,
        "pip install torch==2.13.0 -e . && ddpcheck allreduce",
        "pip install torch==2.13.0 -e '.[test]' && python -m pytest",
        "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
        "python -m pip install -e .",
        "pip install 'ddpcheck[html]'",
        "pip install torch==2.13.0 -e '.[test]'",
        "pip install -e '.[test]'",
    ),
    **_listed(
        SUITE,
        "python -m pytest",
        'python -m pytest -m "not integration"',
        "python -m pytest -m integration",
        "mutmut run",
        "mutmut results",
    ),
    **_listed(
        BENCHMARK,
        "python tests/perf/soak.py --runs 5 --launchers own --kinds healthy,ctrl-c,ctrl-c-twice"
        " --healthy-rounds 1",
        "python tests/perf/soak.py --runs 100 --healthy-rounds 8 --show-failures --seed 21",
        "python tests/perf/soak.py --runs 100 --healthy-rounds 8 --show-failures --seed 13",
        "python tests/perf/soak.py --runs 100",
        "python tests/perf/bench_budget.py --reps 1 --budgets 30,45 --only links,devices",
        "python tests/perf/bench_budget.py --reps 2 --budgets 15,45",
        "for n in 1 8 64 128 256 512 1024; do python tests/perf/bench_scale.py --nodes $n"
        " --gpus-per-node 8 --only links | tail -1; done",
        "python tests/perf/bench_allreduce.py --nproc 4 --reps 5",
        "python tests/perf/bench_watch_reliability.py --runs 5",
        "python tests/perf/bench_watch_reliability.py --runs 20 --cases healthy",
        "python tests/perf/bench_stragglers.py --phases naming --launchers python,torchrun --runs 20",
        "python tests/perf/bench_stragglers.py --phases naming --launchers python,torchrun --runs 10",
        "python tests/perf/bench_stragglers.py --phases naming --launchers srun,mpirun --runs 20",
        "python tests/perf/bench_stragglers.py --phases naming --launchers srun,mpirun --runs 10",
        "python tests/perf/bench_stragglers.py --phases pause,cost --cost-reps 10 --cost-seconds 15",
    ),
    **_listed(
        USER_JOB,
        "ddpcheck watch -- torchrun --nproc-per-node 8 train.py",
        "torchrun --log-dir $JOB_DIR/logs -r 3 ... train.py",
    ),
    **_listed(LEFT_BY_SKIPPED, "ddpcheck postmortem $JOB_DIR"),
}

# Where the page says so in its text rather than in a transcript's verdict.
EXPECTED_CODES: dict[str, int] = {
    # The README's table: a dead job's findings (docs/postmortem.md: "3 a rank hung ... or was lost").
    "ddpcheck postmortem job-dir": 3,
    # docs/links.md: "FAIL `link bandwidth`: rank 1 ... slow", said under the heat map.
    "COLUMNS=80 ddpcheck links --nproc 4 --inject slowlink@1": 1,
}

# Commands of the developer's kind, run in the clone as the page says (HOME and TMPDIR still the test's).
IN_THE_CLONE = {
    "python -m pytest -n 0 tests/test_watch.py -k sigterm",
    "ruff check ddpcheck tests && ruff format --check ddpcheck tests",
}

# A block whose example reads a file another block of its page makes: made first, by this command.
MADE_BEFORE = {
    "ddpcheck allreduce --nproc 2 --baseline ci/allreduce-cpu.json --quiet": (
        "mkdir -p ci && ddpcheck allreduce --nproc 2 --json ci/allreduce-cpu.json --quiet >/dev/null"
    ),
}

TRAIN_PY = """\
# Your training script, as `ddpcheck watch -- python train.py` runs it: five steps of a small model.
import torch

model = torch.nn.Linear(32, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    loss = torch.nn.functional.mse_loss(model(torch.randn(16, 32)), torch.randn(16, 8))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
"""


def _job_dir(directory: Path) -> None:
    """A dead 3-rank job's flight-recorder dumps: rank 1 one collective behind, rank 2 left none."""
    directory.mkdir()
    for rank, last in ((0, 4), (1, 3)):
        (directory / f"fr_rank_{rank}").write_bytes(pickle.dumps(nccl_dump(rank, world=3, last=last)))


def assumed_files(where: Path) -> None:
    """The files the docs take as given: a saved report (show), two of them (compare), a dead
    job's directory (postmortem), your training script (watch), the clone's completions/ (ci.md)."""
    shutil.copy(GOLDEN / "train.json", where / "report.json")
    shutil.copy(GOLDEN / "profile.json", where / "monday.json")
    shutil.copy(GOLDEN / "profile.json", where / "today.json")
    _job_dir(where / "job-dir")
    (where / "train.py").write_text(TRAIN_PY)
    (where / "completions").symlink_to(ROOT / "completions")


EXAMPLES = all_examples()


def _normalised(command: str) -> str:
    """The same run whatever the terminal's width: run once."""
    return re.sub(r"^COLUMNS=\d+ ", "", command)


def planned() -> dict[str, list[Example]]:
    """The examples to run, by block, in page order; a command run in an earlier block is not run again."""
    blocks: dict[str, list[Example]] = {}
    seen: set[str] = set()
    for example in EXAMPLES:
        if example.key in SKIPPED or _normalised(example.key) in seen:
            continue
        seen.add(_normalised(example.key))
        blocks.setdefault(example.block, []).append(example)
    return blocks


PLANNED = planned()


# ---------------------------------------------------------------- pure: the lists stay true
def test_the_extraction_finds_every_kind_of_example() -> None:
    keys = {example.key for example in EXAMPLES}
    # one of each kind: the README table, a bash line, a transcript, a workflow step, a script, a one-liner
    assert "ddpcheck env --junit env.xml" in keys
    assert "ddpcheck train --nproc 2 --steps 5 --junit reports/train.xml" in keys
    assert "jq -c .injected planted.json" in keys
    assert "mkdir -p reports" in keys
    assert "# sbatch, one task per GPU: every task is one rank, nothing is spawned." in keys
    assert "python tests/perf/soak.py --runs 100" in keys
    # a usage synopsis and a report's output are no examples
    assert not [key for key in keys if "[LAUNCH]" in key or key.startswith(("PASS", "rank "))]


def test_a_transcript_expects_what_it_shows() -> None:
    block = [
        (1, "$ ddpcheck allreduce --nproc 2"),
        (2, "FAIL  ddpcheck allreduce (2 ranks, gloo, cpu): 3 pass, 2 fail"),
        (3, "$ jq .injected planted.json"),
        (4, '["corrupt@1"]'),
        (5, "$ ddpcheck allreduce --baseline planted.json"),
        (6, "ddpcheck: error: --baseline planted.json: ..."),
        (7, "$ ddpcheck train --inject nan@1 --quiet"),
        (8, "FAIL loss descent: the loss turned non-finite"),
    ]
    assert [(e.command, e.expected) for e in _transcript("x", block)] == [
        ("ddpcheck allreduce --nproc 2", 1),
        ("jq .injected planted.json", None),
        ("ddpcheck allreduce --baseline planted.json", 2),
        ("ddpcheck train --inject nan@1 --quiet", 1),
    ]


def test_every_skipped_example_is_in_the_docs_and_its_reason_holds() -> None:
    keys = {example.key: example for example in EXAMPLES}
    stale = [key for key in SKIPPED if key not in keys]
    assert not stale, f"no longer in the docs, drop them from SKIPPED: {stale}"
    untrue = [
        f"{key!r}: {reason.why}"
        for key, reason in SKIPPED.items()
        if not re.search(reason.shows, keys[key].command)
    ]
    assert not untrue, f"a reason that does not hold for its command: {untrue}"
    for listed in (EXPECTED_CODES, IN_THE_CLONE, MADE_BEFORE):
        assert not [key for key in listed if key not in keys or key in SKIPPED], listed


def test_every_example_is_run_or_skipped_for_a_reason() -> None:
    run = {_normalised(e.key) for block in PLANNED.values() for e in block}
    unchecked = [
        f"{e.block} (line {e.line}): {e.key}"
        for e in EXAMPLES
        if e.key not in SKIPPED and _normalised(e.key) not in run
    ]
    assert not unchecked
    # The CI recipe of the issue runs, with its directory made first.
    assert "ddpcheck train --nproc 2 --steps 5 --junit reports/train.xml" in run


# ---------------------------------------------------------------- integration: run them
def _script(examples: list[Example], status: Path) -> str:
    """The block's commands in order in one shell; each one's exit code appended to `status`,
    and $? given back to the next command (a page's `echo $?` reads the command before it)."""
    lines = ["__rc=0"]
    for example in examples:
        if example.key in MADE_BEFORE:
            lines.append(MADE_BEFORE[example.key])
        if example.key in IN_THE_CLONE:
            lines.append(f"cd {ROOT}")
        lines.append(f"printf '\\n$ %s\\n' {_quoted(example.command)}")
        lines.append("(exit $__rc)")
        lines.append(example.command)
        lines.append(f'__rc=$?; echo "$__rc" >> {status}')
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.integration
@pytest.mark.parametrize("block", PLANNED)
def test_examples_run_as_written(block: str, tmp_path: Path) -> None:
    examples = PLANNED[block]
    work, home, scratch = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for directory in (work, home, scratch):
        directory.mkdir()
    assumed_files(work)
    status = tmp_path / "status"
    bin_dir = os.path.dirname(sys.executable)  # ddpcheck, python, ruff: not through a shim that reads HOME
    env = {
        **os.environ,
        "HOME": str(home),
        "TMPDIR": str(scratch),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.Popen(
        ["bash", "-c", _script(examples, status)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    codes = [int(line) for line in status.read_text().split()] if status.exists() else []
    wrong = [
        f"{e.block} (line {e.line}): `{e.command}` exited {got}, the page says {want}"
        for e, got in zip(examples, codes, strict=False)
        if got != (want := e.expected if e.expected is not None else EXPECTED_CODES.get(e.key, 0))
    ]
    assert len(codes) == len(examples) and not wrong, "\n".join(wrong) + "\n" + output[-6000:]
    assert not worker_processes(scratch), "a rank outlived its example"
