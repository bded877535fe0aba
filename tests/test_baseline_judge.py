"""Boundary tests of the baseline comparison (`report/baseline.py`): which figure regressed, and by how much.

Each test pins one rule: the status on either side of the tolerance (bandwidth: higher is better;
latency and step time: lower is better), which figure, rank or host is named, and the detail wording.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddpcheck import __version__
from ddpcheck.errors import UsageError
from ddpcheck.report import baseline, compare_run
from ddpcheck.report.compare import BaselineOptions, CompareOptions
from ddpcheck.report.figures import Figure, FigureKind
from ddpcheck.report.model import Check, Status, Table

BUSBW = FigureKind("busbw", "busbw per size", ("world_size", "dtype"))
LINK = FigureKind("link", "per-link figures", ("layout",))
HOST_LINK = FigureKind("host link", "host-pair figures", ("backend",), stands_in_for="link")
STEP = FigureKind("step", "step times", ("world_size", "backend"))


def fig(
    label: str,
    value: float,
    kind: FigureKind = BUSBW,
    higher: bool = True,
    ranks: tuple[int, ...] = (),
    hosts: tuple[str, ...] = (),
    bound: bool = True,
) -> Figure:
    """A figure keyed by its kind and label, so the same label matches itself in the other report."""
    unit = "GB/s" if higher else "ms"
    return Figure(kind, (kind.name, label), label, unit, value, higher, ranks, hosts, bound)


def run(
    figures: list[Figure],
    device: str = "cpu",
    size: int = 2,
    command: str = "allreduce",
    hosts: tuple[str, ...] = ("h0", "h0"),
    **options: Any,
) -> dict[str, Any]:
    """A saved report whose figures are `figures` (read by the `figs` fixture's figures_of)."""
    return {
        "ddpcheck": __version__,
        "command": command,
        "world": {"size": size, "backend": "gloo", "device": device},
        "ranks": [{"rank": r, "host": h, "node": h} for r, h in enumerate(hosts)],
        "tables": {},
        "options": {"dtype": "float32", **options},
        "figs": figures,
    }


@pytest.fixture
def figs(monkeypatch: pytest.MonkeyPatch) -> None:
    """compare() and check_setup() read a report's figures from its 'figs' (the command's own are tested
    with the commands)."""
    monkeypatch.setattr(baseline, "figures_of", lambda report: report.get("figs", []))


def status_of(then: Figure, now: Figure, tolerance: float) -> str:
    rows = baseline.compare(run([then]), run([now]), tolerance).table.rows
    assert len(rows) == 1
    return str(rows[0]["status"])


# ------------------------------------------------------------------ the tolerance, both ways
@pytest.mark.parametrize(
    ("now", "status"),
    [
        (4.0, "PASS"),
        (3.0, "PASS"),  # 0.75x: exactly at 1 - tolerance
        (2.999, "FAIL"),
        (16 / 3, "PASS"),  # 1.33x: times (1 - tolerance) is exactly 1, not beyond it
        (5.34, "better"),
    ],
)
def test_bandwidth_fails_below_one_minus_tolerance_and_is_better_beyond_its_mirror(
    figs: None, now: float, status: str
) -> None:
    """Higher is better: speed = now / then, FAIL below 1 - tol, better above 1 / (1 - tol)."""
    assert status_of(fig("bw", 4.0), fig("bw", now), 0.25) == status


@pytest.mark.parametrize(
    ("now", "status"),
    [
        (2.0, "PASS"),  # twice the time: 0.5x, exactly at 1 - tolerance
        (2.001, "FAIL"),
        (0.5, "PASS"),  # half the time: 2x, times 0.5 is exactly 1
        (0.499, "better"),
    ],
)
def test_time_fails_when_it_grew_by_more_than_the_mirror_of_tolerance(
    figs: None, now: float, status: str
) -> None:
    """Lower is better: speed = then / now, judged on the same bounds as a bandwidth."""
    assert status_of(fig("t", 1.0, higher=False), fig("t", now, higher=False), 0.5) == status


def test_a_row_holds_the_figure_its_ratio_and_its_speed(figs: None) -> None:
    """ratio is now / then whichever way is better; speed is how fast relative to then; both to 3 places."""
    result = baseline.compare(
        run([fig("bw", 3.0), fig("t", 3.0, STEP, higher=False)]),
        run([fig("bw", 2.0), fig("t", 7.0, STEP, higher=False)]),
        0.9,
        "monday.json",
    )
    columns = {"figure": "figure", "unit": "unit", "then": "then", "now": "now", "ratio": "ratio"}
    assert result.table == Table(
        "baseline",
        "Compared with monday.json (tolerance 90%; ratio = now / then)",
        {**columns, "status": "status"},
        [
            {"figure": "bw", "kind": "busbw", "unit": "GB/s", "then": 3.0, "now": 2.0, "ratio": 0.667,
             "speed": 0.667, "status": "PASS"},
            {"figure": "t", "kind": "step", "unit": "ms", "then": 3.0, "now": 7.0, "ratio": 2.333,
             "speed": 0.429, "status": "PASS"},
        ],
    )  # fmt: skip
    # The same setup: no note of what differs, and nothing left out.
    assert result.check.detail == (
        "2 figures compared, none worse than monday.json by more than 90%: the median figure at 0.55x its "
        "speed (slower than, within tolerance of it; from 0.43x to 0.67x)"
    )


# ------------------------------------------------------------------ the verdict's wording
def test_a_pass_gives_the_median_and_the_range(figs: None) -> None:
    then = run([fig("a", 1.0), fig("b", 1.0), fig("c", 1.0)])
    now = run([fig("a", 0.9), fig("b", 1.2), fig("c", 0.95)])
    assert baseline.compare(then, now, 0.2).check == Check(
        "baseline",
        Status.PASS,
        "3 figures compared, none worse than the baseline by more than 20%: the median figure at 0.95x its "
        "speed (slower than, within tolerance of it; from 0.90x to 1.20x)",
    )


@pytest.mark.parametrize(
    ("now", "direction"),
    [(1.0, "as fast as"), (1.01, "faster than"), (0.99, "slower than, within tolerance of")],
)
def test_the_median_says_faster_slower_or_as_fast(figs: None, now: float, direction: str) -> None:
    found = baseline.compare(run([fig("a", 1.0)]), run([fig("a", now)]), 0.2).check
    assert "1 figure compared, none worse" in found.detail
    assert f"its speed ({direction} it; from" in found.detail


def test_a_fail_names_the_figures_that_blame_someone_first_then_the_worst(figs: None) -> None:
    """Ranks sorted, hosts in the order of the figures named; the count of all compared figures."""
    then = run([fig("a", 1.0), fig("b", 1.0), fig("c", 1.0), fig("d", 1.0), fig("e", 1.0)])
    now = run(
        [
            fig("a", 0.1),
            fig("b", 0.7, ranks=(3, 1), hosts=("h1",)),
            fig("c", 0.5, ranks=(1,), hosts=("h0", "h1")),
            fig("d", 0.95),
            fig("e", 0.3, hosts=("h2",)),
        ]
    )
    found = baseline.compare(then, now, 0.2, "b.json").check
    assert found == Check(
        "baseline",
        Status.FAIL,
        "4 of 5 figures worse than b.json by more than 20%: e 0.30x, c 0.50x, b 0.70x, a 0.10x",
        [1, 3],
        ["h2", "h0", "h1"],
    )


def test_more_than_six_figures_named_are_counted(figs: None) -> None:
    then = run([fig(f"f{i}", 1.0) for i in range(8)])
    found = baseline.compare(then, run([fig(f"f{i}", 0.1 + i / 100) for i in range(8)]), 0.2).check
    assert found.detail == (
        "8 of 8 figures worse than the baseline by more than 20%: f0 0.10x, f1 0.11x, f2 0.12x, f3 0.13x, "
        "f4 0.14x, f5 0.15x and 2 more"
    )
    six = baseline.compare(
        run([fig(f"f{i}", 1.0) for i in range(6)]), run([fig(f"f{i}", 0.5) for i in range(6)]), 0.2
    )
    assert six.check.detail.endswith("f4 0.50x, f5 0.50x")


def test_figures_better_than_the_baseline_are_named_in_a_note(figs: None) -> None:
    then = run([fig("a", 1.0), fig("b", 1.0), fig("c", 1.0)])
    found = baseline.compare(then, run([fig("a", 2.0), fig("b", 1.0), fig("c", 3.0)]), 0.2).check
    assert found.status == Status.PASS
    assert found.detail.endswith(
        "(faster than it; from 1.00x to 3.00x); 2 figures better than the baseline: a 2.00x, c 3.00x"
    )
    worse = baseline.compare(then, run([fig("a", 2.0), fig("b", 0.1), fig("c", 1.0)]), 0.2).check
    assert worse.detail == (
        "1 of 3 figures worse than the baseline by more than 20%: b 0.10x; "
        "1 figure better than the baseline: a 2.00x"
    )


# ------------------------------------------------------------------ what is compared
def test_a_size_left_out_as_latency_bound_is_counted_in_a_note(figs: None) -> None:
    """A size the baseline found latency-bound is left out; on CPU ranks, one the rerun found so too."""
    then = run([fig("small", 1.0, bound=False), fig("mid", 1.0), fig("big", 1.0)])
    now_cpu = run([fig("small", 0.01, bound=False), fig("mid", 0.01, bound=False), fig("big", 1.0)])
    found = baseline.compare(then, now_cpu, 0.2).check
    assert found.status == Status.PASS
    assert found.detail.endswith(
        "(as fast as it; from 1.00x to 1.00x); 2 latency-bound sizes left out (below half the peak busbw in "
        "either run)"
    )
    then_gpu = run([fig("small", 1.0, bound=False), fig("mid", 1.0), fig("big", 1.0)], device="cuda")
    now_gpu = run(
        [fig("small", 0.01, bound=False), fig("mid", 0.01, bound=False), fig("big", 1.0)], device="cuda"
    )
    on_gpu = baseline.compare(then_gpu, now_gpu, 0.2).check
    assert on_gpu.detail == (
        "1 of 2 figures worse than the baseline by more than 20%: mid 0.01x; 1 latency-bound size left out "
        "(below half the peak busbw)"
    )


def test_rows_follow_the_baselines_order_and_figures_of_one_side_only_are_left_out(figs: None) -> None:
    then = run([fig("b", 1.0), fig("a", 1.0), fig("gone", 1.0)])
    now = run([fig("new", 1.0), fig("a", 1.0), fig("b", 1.0)])
    assert [r["figure"] for r in baseline.compare(then, now, 0.2).table.rows] == ["b", "a"]


def test_a_kind_depending_on_what_differs_is_left_out_with_why(figs: None) -> None:
    """World size differs: busbw (needs it) is left out; links (need the layout only) still compare."""
    then = run([fig("bw", 1.0), fig("l", 1.0, LINK), fig("t", 1.0, STEP, higher=False)])
    now = run([fig("bw", 0.1), fig("l", 0.1, LINK), fig("t", 9.0, STEP, higher=False)], size=4, dtype="bf16")
    found = baseline.compare(then, now, 0.2)
    assert [r["figure"] for r in found.table.rows] == ["l"]
    assert baseline.differences(baseline.setup_of(then), baseline.setup_of(now)) == {
        "world_size": (2, 4),
        "dtype": ("float32", "bf16"),
    }
    assert found.check.detail == (
        "1 of 1 figure worse than the baseline by more than 20%: l 0.10x; not compared: busbw per size "
        "(world size 2 -> 4, dtype float32 -> bf16); not compared: step times (world size 2 -> 4)"
    )


def test_kinds_left_out_for_the_same_reason_share_a_note(figs: None) -> None:
    same = FigureKind("other", "other figures", ("world_size", "dtype"))
    then = run([fig("bw", 1.0), fig("o", 1.0, same), fig("l", 1.0, LINK)])
    now = run([fig("bw", 1.0), fig("o", 1.0, same), fig("l", 1.0, LINK)], size=4)
    found = baseline.compare(then, now, 0.2).check
    assert found.detail.endswith("; not compared: busbw per size, other figures (world size 2 -> 4)")


def test_setups_that_differ_in_what_no_kind_needs_are_compared_and_said(figs: None) -> None:
    then, now = run([fig("l", 1.0, LINK)]), run([fig("l", 1.0, LINK)], dtype="bf16")
    assert baseline.compare(then, now, 0.2).check.detail.endswith(
        "; setups differ (dtype float32 -> bf16); compared what does not depend on it"
    )
    assert baseline.differences(baseline.setup_of(then), baseline.setup_of(now)) == {
        "dtype": ("float32", "bf16")
    }


def test_a_coarser_kind_stands_in_only_when_the_finer_cannot_be_compared(figs: None) -> None:
    """Host-pair links are compared only when rank-pair links are blocked (another layout)."""
    then = run([fig("l", 1.0, LINK), fig("hl", 1.0, HOST_LINK)])
    both = baseline.compare(then, run([fig("l", 1.0, LINK), fig("hl", 0.1, HOST_LINK)]), 0.2)
    assert [r["figure"] for r in both.table.rows] == ["l"] and both.check.status == Status.PASS
    moved = run([fig("l", 1.0, LINK), fig("hl", 0.1, HOST_LINK)], hosts=("h0", "h1"))
    other_layout = baseline.compare(then, moved, 0.2)
    assert [r["figure"] for r in other_layout.table.rows] == ["hl"]
    assert other_layout.check.detail.endswith("; not compared: per-link figures (ranks per node 2 -> 1+1)")
    # Without any finer figure in the reports, the coarser kind is compared as is.
    alone = baseline.compare(run([fig("hl", 1.0, HOST_LINK)]), run([fig("hl", 1.0, HOST_LINK)]), 0.2)
    assert [r["figure"] for r in alone.table.rows] == ["hl"]


def test_nothing_to_compare_is_a_usage_error_saying_why(figs: None) -> None:
    with pytest.raises(UsageError) as caught:
        baseline.compare(run([fig("bw", 1.0)]), run([fig("bw", 1.0)], size=4), 0.2, "old.json")
    assert str(caught.value) == "nothing to compare with old.json: world size 2 -> 4"
    with pytest.raises(UsageError) as caught:
        baseline.compare(run([fig("a", 1.0)]), run([fig("b", 1.0)]), 0.2)
    assert str(caught.value) == "nothing to compare with the baseline: no figure of one is in the other"
    with pytest.raises(UsageError) as caught:  # only latency-bound sizes in common
        baseline.compare(run([fig("a", 1.0, bound=False)]), run([fig("a", 1.0)]), 0.2)
    assert str(caught.value) == "nothing to compare with the baseline: no figure of one is in the other"


def test_another_family_is_refused_naming_both_commands(figs: None) -> None:
    with pytest.raises(UsageError) as caught:
        baseline.compare(run([fig("a", 1.0)]), run([fig("a", 1.0)], command="links"), 0.2, "x.json")
    assert (
        str(caught.value)
        == "x.json is a report of `allreduce` and this is `links`: they have no figures in common"
    )
    # Two commands of one family compare.
    assert baseline.compare(run([fig("a", 1.0)]), run([fig("a", 1.0)], command="collectives"), 0.2).table.rows


# ------------------------------------------------------------------ setups
def test_setup_of_reads_the_layout_models_and_options() -> None:
    report = {
        "command": "devices",
        "world": {"size": 3, "backend": "nccl", "device": "cuda"},
        "ranks": [
            {"host": "a", "node": 0, "device_name": "H100"},
            {"host": "a", "node": 0, "device_name": "A100"},
            {"host": "b", "node": 1, "device_name": "H100"},
            {"host": "c", "node": 2},
        ],
        "options": {"dtype": "bf16", "size": 4096, "hidden": 8, "batch": 4, "bucket_cap_mb": 25.0},
    }
    assert baseline.setup_of(report) == {
        "family": "devices",
        "world_size": 3,
        "layout": "2+1+1",
        "backend": "nccl",
        "device": "cuda",
        "device_name": "A100, H100",
        # Only the options its command declares part of the setup (Command.setup): not links' size.
        "dtype": None,
        "link_bytes": None,
        "hidden": None,
        "batch": None,
        "ranks_per_host": "1+2",
        "bucket_cap_mb": None,
        "matrix_size": 4096,
    }
    profile = baseline.setup_of({**report, "command": "profile"})
    assert (profile["hidden"], profile["batch"], profile["bucket_cap_mb"], profile["matrix_size"]) == (
        8,
        4,
        25.0,
        None,
    )


def test_the_layout_counts_ranks_per_host_and_node_rank() -> None:
    """Two nodes sharing a host name (containers) are two nodes; so are two hosts both called node 1."""
    ranks = [
        {"host": "a", "node": 0},
        {"host": "a", "node": 1},
        {"host": "b", "node": 1},
        {"host": "b", "node": 1},
    ]
    setup = baseline.setup_of({"command": "links", "ranks": ranks})
    assert setup["layout"] == "1+1+2" and setup["ranks_per_host"] == "2"


def test_a_report_without_world_is_compared_on_the_rules_for_gpus(figs: None) -> None:
    """No device said: a size the rerun found latency-bound is still judged (only CPU ranks leave it out)."""
    now = run([fig("a", 0.1, bound=False)])
    del now["world"]
    assert baseline.compare(run([fig("a", 1.0)]), now, 0.2).check.status == Status.FAIL


def test_setup_of_an_empty_report_knows_nothing() -> None:
    assert baseline.setup_of({"options": None, "ranks": None}) == {
        "family": None,
        **dict.fromkeys(baseline.SETUP_NAMES),
    }
    links = baseline.setup_of({"command": "links", "options": {"size_bytes": 1024, "size": 9}})
    assert links["link_bytes"] == 1024 and links["matrix_size"] is None and links["family"] == "links"


def test_differences_are_of_keys_both_sides_know_in_a_fixed_order() -> None:
    old = {"dtype": "a", "world_size": 2, "backend": None, "hidden": 1, "family": "x"}
    new = {"dtype": "b", "world_size": 4, "backend": "nccl", "hidden": 1, "family": "y"}
    diff = baseline.differences(old, new)
    assert diff == {"world_size": (2, 4), "dtype": ("a", "b")} and list(diff) == ["world_size", "dtype"]
    assert baseline.describe_differences(diff) == "world size 2 -> 4, dtype a -> b"
    assert baseline.differences(new, {}) == {}


def test_planned_setup_is_a_report_setup_before_the_launch() -> None:
    planned = baseline.planned_setup("links", 4, "nccl", "cuda", {"size_bytes": 64})
    assert planned == {
        **dict.fromkeys(baseline.SETUP_NAMES),
        "family": "links",
        "world_size": 4,
        "backend": "nccl",
        "device": "cuda",
        "link_bytes": 64,
    }


def test_check_setup_refuses_only_when_every_kind_is_blocked(figs: None) -> None:
    old = run([fig("bw", 1.0), fig("l", 1.0, LINK)])
    planned = baseline.planned_setup("allreduce", 4, "gloo", "cpu", {"dtype": "float32"})
    baseline.check_setup(old, "allreduce", planned, "b.json")  # links still compare
    only_busbw = run([fig("bw", 1.0)])
    with pytest.raises(UsageError) as caught:
        baseline.check_setup(only_busbw, "collectives", planned, "b.json")
    assert str(caught.value) == "--baseline b.json: nothing comparable: world size 2 -> 4"
    baseline.check_setup(run([]), "allreduce", planned, "b.json")  # no figures: judged after the run
    with pytest.raises(UsageError) as caught:
        baseline.check_setup(only_busbw, "links", planned, "b.json")
    assert (
        str(caught.value)
        == "--baseline b.json: a report of `allreduce`; `links` has no figures in common with it"
    )


def test_figures_of_asks_the_reports_command() -> None:
    """The registry's command reads the figures; a command without figures or none at all gives none."""
    saved = run([])
    saved["tables"] = {"bandwidth": [{"size_bytes": 1024, "busbw_gbps": 2.0, "wrong": 0}]}
    found = baseline.figures_of(saved)
    assert [(f.label, f.value) for f in found] == [("all_reduce busbw at 1K", 2.0)]
    assert baseline.figures_of({**saved, "command": "nonsense"}) == []
    assert baseline.figures_of({"tables": saved["tables"]}) == []


# ------------------------------------------------------------------ loading
def saved_run(busbw: float = 2.0, **changes: Any) -> dict[str, Any]:
    """A saved allreduce report with one bandwidth figure (1K), as JSON holds it."""
    report = run([], **{k: v for k, v in changes.items() if k in ("device", "size")})
    del report["figs"]
    report["tables"] = {"bandwidth": [{"size_bytes": 1024, "busbw_gbps": busbw, "wrong": 0}]}
    report.update({k: v for k, v in changes.items() if k not in ("device", "size")})
    return report


def write(path: Path, data: Any) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def refusal(path: str, flag: str | None = None) -> str:
    with pytest.raises(UsageError) as caught:
        baseline.load_report(path) if flag is None else baseline.load_report(path, flag)
    return str(caught.value)


def test_load_report_says_what_is_wrong_with_a_file(tmp_path: Path) -> None:
    not_report = "not a ddpcheck report (save one with --json)"
    cases: dict[str, tuple[Any, str]] = {
        "text.json": (
            "{\n\n  oops",
            "not JSON (Expecting property name enclosed in double quotes at line 3)",
        ),
        "list.json": ([saved_run()], not_report),
        "keys.json": ({k: v for k, v in saved_run().items() if k != "world"}, not_report),
        "tables.json": ({**saved_run(), "tables": []}, not_report),
        "world.json": ({**saved_run(), "world": None}, not_report),
        "old.json": (
            {**saved_run(), "ddpcheck": "0.0.9"},
            f"written by ddpcheck 0.0.9, incompatible with this ddpcheck {__version__}: save a new one",
        ),
        "env.json": ({**saved_run(), "command": "env"}, "a `env` report holds no figures to compare"),
        "compare.json": (
            {**saved_run(), "command": "compare"},
            "a `compare` report, not a run: give the run's own report",
        ),
    }
    for name, (data, said) in cases.items():
        path = write(tmp_path / name, data)
        assert refusal(path) == f"--baseline {path}: {said}"
    missing = str(tmp_path / "missing.json")
    assert refusal(missing, "OLD") == f"OLD {missing}: no such file"
    assert refusal(str(tmp_path), "NEW") == f"NEW {tmp_path}: is a directory"
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{")
    assert refusal(str(tmp_path / "binary.json")).startswith(
        f"--baseline {tmp_path / 'binary.json'}: cannot read it ("
    )
    good = saved_run()
    assert baseline.load_report(write(tmp_path / "good.json", good)) == good
    bare = {"ddpcheck": "0.1.3", "command": "links", "tables": {}, "world": {}}  # just the keys it needs
    assert baseline.load_report(write(tmp_path / "bare.json", bare)) == bare


@pytest.mark.parametrize(
    ("version", "compatible"),
    [(__version__, True), ("0.1.7", True), ("0.1", True), ("0.1.dev3", True), ("0.2.0", False),
     ("1.1.0", False), ("0", False), ("", False), ("x.1", False), ("0.1rc1", False)],
)  # fmt: skip
def test_compatible_version_while_0x_is_the_same_minor(version: str, compatible: bool) -> None:
    assert __version__.startswith("0.1.")
    assert baseline.compatible_version(version) is compatible


def test_compatible_version_from_1_0_is_the_same_major(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseline, "__version__", "1.4.dev0")  # only major and minor are read
    assert baseline.compatible_version("1.0.2") and baseline.compatible_version("1.9")
    assert not baseline.compatible_version("2.4.0") and not baseline.compatible_version("0.4.0")


def test_load_baseline_refuses_a_run_with_planted_faults(tmp_path: Path) -> None:
    assert baseline.load_baseline(BaselineOptions(path=None)) is None
    clean = write(tmp_path / "clean.json", saved_run(injected=[]))
    assert baseline.load_baseline(BaselineOptions(path=clean))["command"] == "allreduce"
    planted = write(tmp_path / "planted.json", saved_run(injected=["slow:1", "hang:0"]))
    with pytest.raises(UsageError) as caught:
        baseline.load_baseline(BaselineOptions(path=planted))
    assert str(caught.value) == (
        f"--baseline {planted}: that run had faults planted with --inject (slow:1, hang:0), so its figures "
        "are no baseline: save one from a run without --inject"
    )


def test_injected_of_reads_a_list_a_single_value_or_nothing() -> None:
    assert baseline.injected_of({"injected": ["a", 3]}) == ["a", "3"]
    assert baseline.injected_of({"injected": "slow:1"}) == ["slow:1"]
    assert baseline.injected_of({"injected": None}) == [] and baseline.injected_of({}) == []


def test_default_tolerance_is_the_devices_or_the_cpus() -> None:
    assert baseline.DEFAULT_TOLERANCE == {"cpu": 0.95, "cuda": 0.2}
    assert baseline.default_tolerance({"world": {"device": "cuda"}}) == 0.2
    assert baseline.default_tolerance({"world": {"device": "cpu"}}) == 0.95
    assert baseline.default_tolerance({"world": {"device": "xpu"}}) == 0.95
    assert baseline.default_tolerance({}) == 0.95


# ------------------------------------------------------------------ `ddpcheck compare`
def test_compare_run_judges_new_against_old_with_the_default_tolerance(tmp_path: Path) -> None:
    old = write(tmp_path / "old.json", saved_run(2.0, device="cuda"))
    new = write(tmp_path / "new.json", saved_run(1.5, device="cuda"))  # 0.75x: FAIL at 0.2
    report = compare_run.run(CompareOptions(old=old, new=new))
    assert [c.name for c in report.checks] == ["baseline", "verdicts", "environment"]
    assert report.checks[0] == Check(
        "baseline",
        Status.FAIL,
        f"1 of 1 figure worse than {old} by more than 20%: all_reduce busbw at 1K 0.75x",
    )
    assert [t.name for t in report.tables] == ["baseline", "verdicts", "environment"]
    assert report.command == "compare" and report.world == saved_run(device="cuda")["world"]
    assert report.options == {"old": old, "new": new, "tolerance": 0.2}
    assert report.notes == [] and report.injected == []
    assert 0 <= report.elapsed_s < 60
    looser = compare_run.run(CompareOptions(old=old, new=new, tolerance=0.3))
    assert looser.checks[0].status == Status.PASS and looser.options["tolerance"] == 0.3


def test_compare_run_notes_which_side_had_planted_faults(tmp_path: Path) -> None:
    old = write(tmp_path / "old.json", saved_run(injected=["slow:1"]))
    new = write(tmp_path / "new.json", saved_run(injected=["hang:0", "slow:1"]))
    report = compare_run.run(CompareOptions(old=old, new=new))
    assert report.notes == [
        f"OLD ({old}) had faults planted with --inject: slow:1; its figures measure the fault, not the "
        "hardware",
        f"NEW ({new}) had faults planted with --inject: hang:0, slow:1; its figures measure the fault, not "
        "the hardware",
    ]
    assert report.injected == ["slow:1", "hang:0"]
    only_new = compare_run.run(CompareOptions(old=write(tmp_path / "clean.json", saved_run()), new=new))
    assert only_new.notes == [
        f"NEW ({new}) had faults planted with --inject: hang:0, slow:1; its figures measure the fault, not "
        "the hardware"
    ]


# ------------------------------------------------------------------ what else changed
def test_fingerprint_of_takes_world_versions_then_the_saved_fingerprint() -> None:
    report = {
        "ddpcheck": "0.1.0",
        "world": {"torch": "2.5", "cuda": "12.4", "nccl": None,
                  "fingerprint": {"torch": "2.6", "driver": "550", "gpu": None, "other": 1}},
    }  # fmt: skip
    assert baseline.fingerprint_of(report) == {
        "torch": "2.6", "cuda": "12.4", "nccl": None, "driver": "550", "ddpcheck": "0.1.0"
    }  # fmt: skip
    assert baseline.fingerprint_of({"world": {"fingerprint": "garbled"}}) == {
        "torch": None, "cuda": None, "nccl": None, "ddpcheck": None
    }  # fmt: skip
    assert baseline.fingerprint_of({}) == {"torch": None, "cuda": None, "nccl": None, "ddpcheck": None}


def test_environment_unchanged_passes_and_a_change_is_named_from_and_to() -> None:
    then = {"ddpcheck": "0.1.0", "world": {"torch": "2.5", "fingerprint": {"python": "3.11"}}}
    check, table = baseline.environment_changes(then, then)
    assert check == Check("environment", Status.PASS, "same torch, CUDA, NCCL and driver versions")
    assert table == Table(
        "environment",
        "Environment: then and now",
        {"what": "", "then": "then", "now": "now"},
        [
            {"what": "torch", "then": "2.5", "now": "2.5", "changed": False},
            {"what": "python", "then": "3.11", "now": "3.11", "changed": False},
            {"what": "ddpcheck", "then": "0.1.0", "now": "0.1.0", "changed": False},
        ],
    )
    now = {"ddpcheck": "0.1.1", "world": {"torch": None, "cuda": "12.4", "fingerprint": {"python": "3.11"}}}
    check, _ = baseline.environment_changes(then, now)
    assert check == Check(
        "environment", Status.WARN, "changed: torch 2.5 -> none, cuda none -> 12.4, ddpcheck 0.1.0 -> 0.1.1"
    )


def checks(**statuses: str) -> dict[str, Any]:
    return {"checks": [{"name": n, "status": s, "ranks": [1], "hosts": [n]} for n, s in statuses.items()]}


def test_verdict_changes_name_what_broke_and_what_was_fixed() -> None:
    then = checks(a="PASS", b="WARN", c="FAIL", d="ERROR", e="PASS", f="SKIP")
    now = checks(a="FAIL", b="ERROR", c="PASS", d="WARN", e="WARN", g="PASS")
    check, table = baseline.verdict_changes(then, now)
    assert check == Check(
        "verdicts",
        Status.WARN,
        "passed then, fails now: a, b; failed then, passes now: c, d",
        [1],
        ["a", "b"],
    )
    assert table == Table(
        "verdicts",
        "Checks: then and now",
        {"check": "check", "then": "then", "now": "now"},
        [
            {"check": "a", "then": "PASS", "now": "FAIL", "changed": True},
            {"check": "b", "then": "WARN", "now": "ERROR", "changed": True},
            {"check": "c", "then": "FAIL", "now": "PASS", "changed": True},
            {"check": "d", "then": "ERROR", "now": "WARN", "changed": True},
            {"check": "e", "then": "PASS", "now": "WARN", "changed": True},
            {"check": "f", "then": "SKIP", "now": None, "changed": True},
            {"check": "g", "then": None, "now": "PASS", "changed": True},
        ],
    )


def test_verdict_changes_only_fixed_pass_and_none_count_the_other_changes() -> None:
    check, _ = baseline.verdict_changes(checks(a="FAIL"), checks(a="PASS"))
    assert check == Check("verdicts", Status.PASS, "failed then, passes now: a")
    same = baseline.verdict_changes(
        checks(a="PASS", b="SKIP"), {"checks": [*checks(a="WARN")["checks"], "x"]}
    )[0]
    assert same == Check("verdicts", Status.PASS, "no check went from pass to fail or back (2 other changes)")
    one = baseline.verdict_changes(checks(a="PASS"), checks(a="WARN"))[0]
    assert one.detail == "no check went from pass to fail or back (1 other change)"
    assert (
        baseline.verdict_changes({}, {})[0].detail
        == "no check went from pass to fail or back (0 other changes)"
    )


def test_verdict_changes_name_ranks_and_hosts_of_what_broke_only() -> None:
    then = checks(a="PASS", b="PASS", c="PASS")
    now = {
        "checks": [
            {"name": "a", "status": "FAIL", "ranks": [5, 2], "hosts": ["y", "x"]},
            {"name": "b", "status": "FAIL", "ranks": [2, 0], "hosts": ["x", "z"]},
            {"name": "c", "status": "WARN", "ranks": [9], "hosts": ["w"]},
        ]
    }
    check, _ = baseline.verdict_changes(then, now)
    assert check.ranks == [0, 2, 5] and check.hosts == ["y", "x", "z"]
    bare = baseline.verdict_changes(checks(a="PASS"), {"checks": [{"name": "a", "status": "FAIL"}]})[0]
    assert bare.ranks == [] and bare.hosts == []


def test_each_file_is_named_by_its_own_flag_when_refused(tmp_path: Path) -> None:
    """--baseline, OLD and NEW: the message names the argument that holds the bad file."""
    good = write(tmp_path / "good.json", saved_run())
    bad = write(tmp_path / "bad.json", "[]")
    said = "not a ddpcheck report (save one with --json)"
    for options, flag in [
        (CompareOptions(old=bad, new=good), "OLD"),
        (CompareOptions(old=good, new=bad), "NEW"),
    ]:
        with pytest.raises(UsageError) as caught:
            compare_run.run(options)
        assert str(caught.value) == f"{flag} {bad}: {said}"
    with pytest.raises(UsageError) as caught:
        baseline.load_baseline(BaselineOptions(path=bad))
    assert str(caught.value) == f"--baseline {bad}: {said}"
