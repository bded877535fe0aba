"""Rules that must hold for every input, tried on many generated ones (hypothesis).

Pure and bounded: a few dozen examples each, no deadline (the machine is shared), so the
whole file takes seconds. Each property is one the judges promise in their docstrings.
"""

from __future__ import annotations

import html
import io
import string
from pathlib import Path

import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rich.console import Console

from ddpcheck.checks.env import check as env_check
from ddpcheck.checks.env.redact import (
    REDACTED,
    SECRET_PREFIXES,
    SECRET_SUFFIXES,
    SECRET_WORDS,
    is_secret_name,
)
from ddpcheck.checks.env.variables import DIST_ENV_PREFIXES, distributed_env
from ddpcheck.checks.sweep.bisection import bisect
from ddpcheck.checks.sweep.pattern import EXACT_LIMIT, Pattern
from ddpcheck.report import show
from ddpcheck.report import terminal as render
from ddpcheck.report.formats.json import write as write_json
from ddpcheck.report.formats.junit import write as write_junit
from ddpcheck.report.html import render_html
from ddpcheck.report.model import Check, Report, Status, Table
from tests.support.link_values import find_slow

BOUNDED = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Each example of the secrets test renders a whole report four ways (HTML with charts among them).
FEW = settings(BOUNDED, max_examples=6)


# ------------------------------------------------------------------ bisection
def corrupt(*bad: int):
    """Ranks that contribute wrong data: a group holding one comes out wrong, even alone."""
    return lambda groups: [bool(set(g) & set(bad)) for g in groups]


def bad_nic(rank: int):
    """Traffic through one rank is corrupted: wrong only beside another rank."""
    return lambda groups: [rank in g and len(g) > 1 for g in groups]


def bad_link(a: int, b: int):
    return lambda groups: [a in g and b in g for g in groups]


@st.composite
def world_and_ranks(draw: st.DrawFn, how_many: int, smallest: int = 2) -> tuple[int, list[int]]:
    n = draw(st.integers(smallest, 64))
    ranks = draw(st.lists(st.integers(0, n - 1), min_size=how_many, max_size=how_many, unique=True))
    return n, sorted(ranks)


@BOUNDED
@given(st.one_of(world_and_ranks(1), world_and_ranks(2)))
def test_bisection_names_exactly_the_corrupt_ranks(case: tuple[int, list[int]]) -> None:
    n, bad = case
    assert bisect(n, corrupt(*bad)) == bad


@BOUNDED
@given(world_and_ranks(1))
def test_bisection_names_a_bad_nic_or_says_it_cannot(case: tuple[int, list[int]]) -> None:
    """With two ranks there is no third to stand beside either: nothing can be localised."""
    n, (bad,) = case
    assert bisect(n, bad_nic(bad)) == (None if n == 2 else [bad])


@BOUNDED
@given(world_and_ranks(2))
def test_bisection_blames_an_end_of_a_bad_link_or_says_it_cannot(case: tuple[int, list[int]]) -> None:
    """Never ranks off the link alone. Not always exactly both ends: with 3 ranks and link 0-2 bad,
    rank 2 is right alone and wrong beside rank 0, exactly as a bad NIC on rank 2 would be, and is
    named alone; with 7, ends in two halves name the whole half-world the fault needs together."""
    n, (a, b) = case
    found = bisect(n, bad_link(a, b))
    assert found is None or set(found) & {a, b}


# ------------------------------------------------------------------ links
# Healthy links as measured on this machine's CPU ranks (docs/links.md): up to a 5x spread within
# one run, the slowest healthy link at 0.27 of its run's median; the CPU threshold is 0.2. Here
# healthy links lie in [0.3, 1.5], and a slowed rank's links below 0.06 (under a tenth of the
# healthy median, under 0.2 x the lowest reference that spread can give).
CPU_THRESHOLD = 0.2
HEALTHY = st.floats(0.3, 1.5)
SLOWED = st.floats(0.001, 0.059)


@st.composite
def healthy_mesh(draw: st.DrawFn, smallest: int = 2) -> dict[tuple[int, int], float]:
    n = draw(st.integers(smallest, 12))
    return {(s, d): draw(HEALTHY) for s in range(n) for d in range(n) if s != d}


@BOUNDED
@given(healthy_mesh())
def test_links_name_nobody_on_a_healthy_spread(values: dict[tuple[int, int], float]) -> None:
    found = find_slow(values, CPU_THRESHOLD)
    assert (found.ranks, found.links) == ([], [])


@BOUNDED
@given(healthy_mesh(smallest=3), st.data())
def test_links_name_exactly_the_slowed_rank(
    values: dict[tuple[int, int], float], data: st.DataObject
) -> None:
    n = max(s for s, _ in values) + 1
    slow = data.draw(st.integers(0, n - 1), label="slowed rank")
    for pair in values:
        if slow in pair:
            values[pair] = data.draw(SLOWED)
    found = find_slow(values, CPU_THRESHOLD)
    assert [(s.rank, s.direction) for s in found.ranks] == [(slow, "both")]
    assert found.links == []  # its peers are not blamed, nor any healthy link


# ------------------------------------------------------------------ exact patterns
@BOUNDED
@given(st.sampled_from(sorted(EXACT_LIMIT)), st.integers(1, 600))
def test_pattern_sums_are_exact_for_every_dtype_and_world(dtype: str, world: int) -> None:
    pattern = Pattern.for_world(world, dtype)
    torch_dtype = getattr(torch, dtype)
    total = torch.zeros(pattern.period, dtype=torch_dtype)
    for index in range(world):
        total += torch.tensor(pattern.contribution(index), dtype=torch_dtype)  # exact at every partial sum
    assert total.tolist() == [x if dtype == "int32" else float(x) for x in pattern.expected()]
    assert max(pattern.expected()) <= EXACT_LIMIT[dtype]


# ------------------------------------------------------------------ the JSON report
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
NAME = st.text(string.ascii_lowercase + "_", min_size=1, max_size=10)


@st.composite
def reports(draw: st.DrawFn) -> Report:
    checks = draw(
        st.lists(
            st.builds(
                Check,
                name=TEXT,
                status=st.sampled_from(Status),
                detail=TEXT,
                ranks=st.lists(st.integers(0, 8191), max_size=4),
                hosts=st.lists(TEXT, max_size=3),
                links=st.lists(st.lists(st.integers(0, 8191), min_size=2, max_size=2), max_size=3),
            ),
            max_size=5,
        )
    )
    tables = []
    for name in draw(st.lists(NAME, max_size=3, unique=True)):
        keys = draw(st.lists(NAME, min_size=1, max_size=4, unique=True))
        rows = draw(st.lists(st.fixed_dictionaries({k: SCALAR for k in keys}), max_size=4))
        columns = {k: draw(TEXT) for k in keys}
        tables.append(
            Table(name, draw(TEXT), columns, rows, group_by=draw(st.none() | st.sampled_from(keys)))
        )
    return Report(
        command=draw(st.sampled_from(["allreduce", "links", "train", "env"])),
        checks=checks,
        tables=tables,
        world=draw(st.dictionaries(NAME, SCALAR, max_size=3)),
        ranks=draw(st.lists(st.dictionaries(NAME, SCALAR, max_size=3), max_size=3)),
        options=draw(st.dictionaries(NAME, SCALAR, max_size=3)),
        notes=draw(st.lists(TEXT, max_size=3)),
        elapsed_s=round(draw(st.floats(0, 1e6)), 3),
        log_dir=draw(st.none() | TEXT),
        injected=draw(st.lists(TEXT, max_size=2)),
    )


@settings(BOUNDED, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(report=reports())
def test_a_report_round_trips_through_json_and_show(report: Report, tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_json(report, str(path))
    again = show.run(show.ShowOptions(report_path=str(path)))
    assert again.to_dict() == report.to_dict()  # titles, columns and grouping too (table_meta)
    assert again.verdict == report.verdict


# ------------------------------------------------------------------ secrets in every output
SECRET_VALUE = st.text(string.ascii_letters + string.digits, min_size=10, max_size=24).map(
    lambda s: "S3cr" + s
)
SECRET_NAME = st.one_of(
    st.sampled_from(sorted(SECRET_WORDS)),
    st.builds(
        lambda head, word: head + word,
        st.sampled_from(["", "DB", "API", "MY"]),
        st.sampled_from(SECRET_SUFFIXES),
    ),
    st.builds(
        lambda word, tail: word + tail,
        st.sampled_from(SECRET_PREFIXES),
        st.sampled_from(["", "ID", "FILE", "S"]),
    ),
)
HARMLESS = {"NCCL_IB_HCA": "mlx5_0:1", "NCCL_DEBUG": "INFO", "MASTER_PORT": "29500", "SLURM_JOB_ID": "42"}
FACTS_BUT_ENV = {
    "torch": {
        "version": "2.13.0+cpu", "git_version": "abc", "debug": False, "cuda_build": None, "hip_build": None,
        "driver_cuda": None, "cudnn": None, "nccl": None, "backends": {"gloo": True}, "gpus": [],
    },
    "python": {"version": "3.11.7", "executable": "/usr/bin/python"},
    "driver": None,
    "topology": [],
    "host": {
        "hostname": "h0", "platform": "Linux", "cpu_usable": 2, "cpu_logical": 2, "cpu_physical": 1,
        "load": [0.5, 0.5, 0.5], "memory_available": 2**30, "memory_total": 2**31,
        "shm": {"path": "/dev/shm", "free": 2**30, "total": 2**30}, "memlock": None, "nofile": None,
    },
    "interfaces": {},
    "infiniband": [],
    "problems": [],
}  # fmt: skip


@settings(FEW, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    secrets=st.lists(
        st.tuples(st.sampled_from(DIST_ENV_PREFIXES), st.sampled_from(["", "X_"]), SECRET_NAME, SECRET_VALUE),
        min_size=1,
        max_size=4,
    ),
    url_password=SECRET_VALUE,
)
def test_a_secret_value_appears_in_no_output(
    secrets: list[tuple[str, str, str, str]], url_password: str, tmp_path: Path
) -> None:
    """The environment as the probe collects it, through the env tables, into every form a report takes."""
    environ = dict(HARMLESS)
    for prefix, middle, name, value in secrets:
        assume(is_secret_name(prefix + middle + name))
        environ[prefix + middle + name] = value
    environ["TORCHELASTIC_RDZV_ENDPOINT"] = f"etcd://alice:{url_password}@127.0.0.1:2379"
    facts = {**FACTS_BUT_ENV, "env": distributed_env(environ)}
    report = Report("env", tables=env_check.env_tables(facts))
    report.checks.append(Check("environment", Status.PASS, f"{len(facts['env'])} variables"))
    terminal = io.StringIO()
    render.render_report(report, Console(file=terminal, width=250, no_color=True), quiet=False)
    write_json(report, str(tmp_path / "r.json"))
    write_junit(report, str(tmp_path / "r.xml"))
    outputs = {
        "terminal": terminal.getvalue(),
        "json": (tmp_path / "r.json").read_text(),
        "junit": (tmp_path / "r.xml").read_text(),
        "html": render_html(report),
    }
    for form, text in outputs.items():
        for *_, value in secrets:
            assert value not in text, form
        assert url_password not in text, form
        if form != "junit":  # JUnit carries the checks, not the tables
            shown = html.escape(REDACTED) if form == "html" else REDACTED
            assert shown in text and "mlx5_0:1" in text, form
