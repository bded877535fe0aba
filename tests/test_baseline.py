"""--baseline, `ddpcheck compare`, the expectations table: judges on synthetic reports, then real runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ddpcheck import __version__
from ddpcheck.checks.sweep import expected as expectations
from ddpcheck.checks.sweep.figures import bandwidth_figures
from ddpcheck.errors import UsageError
from ddpcheck.report import baseline, compare
from ddpcheck.report.model import Status
from tests.conftest import assert_nothing_left, assert_usage_error, worker_processes
from tests.support.netns import free_port, ip, on_host, veth_pair

M = 1024**2
SIZES = (64 * 1024, M, 2 * M, 4 * M)


# ------------------------------------------------------------------ synthetic reports
def identities(n: int, hosts: tuple[str, ...] = ("h0",), device_name: str = "cpu") -> list[dict[str, Any]]:
    per_host = n // len(hosts)
    return [
        {"rank": r, "local_rank": r % per_host, "node": r // per_host, "host": hosts[r // per_host],
         "device_name": device_name}
        for r in range(n)
    ]  # fmt: skip


def report(
    command: str, tables: dict[str, list[dict[str, Any]]], n: int = 2, hosts: tuple[str, ...] = ("h0",),
    device: str = "cpu", backend: str = "gloo", device_name: str = "cpu", **options: Any,
) -> dict[str, Any]:  # fmt: skip
    return {
        "ddpcheck": __version__,
        "command": command,
        "verdict": "pass",
        "world": {"size": n, "backend": backend, "device": device, "nodes": len(hosts), "hosts": list(hosts),
                  "torch": "2.13.0+cpu", "cuda": None, "nccl": None},
        "ranks": identities(n, hosts, device_name),
        "checks": [{"name": "bandwidth", "status": "PASS", "detail": "", "ranks": [], "hosts": []}],
        "tables": tables,
        "options": options,
    }  # fmt: skip


def bandwidth(busbw: dict[int, float], op: str | None = None, **kw: Any) -> dict[str, Any]:
    rows = [
        {"size_bytes": s, "count": s // 4, "dtype": "float32", "time_us": 1.0, "algbw_gbps": b,
         "busbw_gbps": b, "wrong": 0, **({"op": op} if op else {})}
        for s, b in busbw.items()
    ]  # fmt: skip
    return report("allreduce", {"bandwidth": rows}, **{"dtype": "float32", **kw})


def healthy(**kw: Any) -> dict[str, Any]:
    return bandwidth({64 * 1024: 0.05, M: 0.6, 2 * M: 0.8, 4 * M: 1.0}, **kw)


def links(gbps: dict[tuple[int, int], float], n: int, hosts: tuple[str, ...]) -> dict[str, Any]:
    per_host = n // len(hosts)
    rows = [
        {"src": s, "dst": d, "src_host": hosts[s // per_host], "dst_host": hosts[d // per_host], "gbps": g,
         "latency_us": 50.0, "ratio": 1.0}
        for (s, d), g in gbps.items()
    ]  # fmt: skip
    return report("links", {"links": rows}, n=n, hosts=hosts, size_bytes=M)


def profile_report(
    scale: dict[str, float] | None = None, rank1: float = 1.0, n: int = 2, hosts: tuple[str, ...] = ("h0",)
) -> dict[str, Any]:
    scale = scale or {}
    phases = {"forward": 0.2, "backward": 2.0, "backward_compute": 0.3, "update": 0.35, "step": 2.6,
              "compute": 0.85, "exposed_comm": 0.05}  # fmt: skip
    summary = [
        {"phase": p, "label": p, "median_ms": ms * scale.get(p, 1.0), "slowest_rank": 1, "slowest_host": "h0"}
        for p, ms in phases.items()
    ]
    figures = [
        {"forward_tflops": 0.02, "backward_tflops": 0.03, "step_tflops": 0.015 / scale.get("compute", 1)}
    ]
    per_rank = [{"rank": r, "host": "h0", "compute_ms": 0.85 * (rank1 if r == 1 else 1.0)} for r in range(n)]
    tables = {"summary": summary, "figures": figures, "per_rank": per_rank}
    return report("profile", tables, n=n, hosts=hosts, hidden=256, batch=32, bucket_cap_mb=25.0)


def statuses(comparison: baseline.Comparison) -> dict[str, str]:
    return {row["figure"]: row["status"] for row in comparison.table.rows}


# ------------------------------------------------------------------ the comparison, pure
def test_the_same_run_passes_and_lists_every_bandwidth_bound_figure() -> None:
    result = baseline.compare(healthy(), healthy(), 0.2)
    assert result.check.status == Status.PASS
    assert statuses(result) == {f"all_reduce busbw at {s}": "PASS" for s in ("1M", "2M", "4M")}
    assert all(row["ratio"] == 1.0 for row in result.table.rows)
    assert "1 latency-bound size left out" in result.check.detail  # 64K: 5% of the peak


def test_a_regressed_size_fails_and_is_named() -> None:
    slow = healthy()
    slow["tables"]["bandwidth"][3]["busbw_gbps"] = 0.5  # 4M at half its speed
    result = baseline.compare(healthy(), slow, 0.2)
    assert result.check.status == Status.FAIL
    assert "1 of 3 figures worse than the baseline by more than 20%" in result.check.detail
    assert "all_reduce busbw at 4M 0.50x" in result.check.detail
    assert statuses(result)["all_reduce busbw at 4M"] == "FAIL"
    assert baseline.compare(healthy(), slow, 0.6).check.status == Status.PASS  # within a looser tolerance


def test_a_mid_size_dip_is_judged_on_gpus_and_left_out_on_cpu_ranks() -> None:
    """2M at half: below half the rerun's own peak. On GPUs a real regression; on CPU, scheduling noise."""
    for device, status in (("cuda", Status.FAIL), ("cpu", Status.PASS)):
        then, now = healthy(device=device), healthy(device=device)
        now["tables"]["bandwidth"][2]["busbw_gbps"] = 0.4
        result = baseline.compare(then, now, 0.2)
        assert result.check.status == status, result.check.detail
    # 1M too: a size counts only when every larger one does (and 64K as ever).
    assert "3 latency-bound sizes left out (below half the peak busbw in either run)" in result.check.detail


def test_faster_than_the_baseline_is_fine_and_said() -> None:
    fast = bandwidth({64 * 1024: 0.05, M: 1.2, 2 * M: 1.6, 4 * M: 2.0})
    result = baseline.compare(healthy(), fast, 0.2)
    assert result.check.status == Status.PASS
    assert set(statuses(result).values()) == {"better"}
    assert "3 figures better than the baseline" in result.check.detail
    assert "2.00x its speed (faster than it" in result.check.detail


def test_latency_bound_sizes_do_not_count() -> None:
    noisy = healthy()
    noisy["tables"]["bandwidth"][0]["busbw_gbps"] = 0.001  # 64K: 50x slower, but latency-bound
    assert baseline.compare(healthy(), noisy, 0.2).check.status == Status.PASS


def test_a_lucky_small_size_in_the_baseline_is_still_latency_bound() -> None:
    """Half the peak at 128K once, then below it at 256K: measured, a healthy rerun looked 0.13x there."""
    lucky = bandwidth({128 * 1024: 0.6, 256 * 1024: 0.3, M: 0.6, 2 * M: 0.8, 4 * M: 1.0})
    bound = {f.label: f.bandwidth_bound for f in bandwidth_figures(lucky)}
    assert bound == {
        "all_reduce busbw at 128K": False,
        "all_reduce busbw at 256K": False,
        "all_reduce busbw at 1M": True,
        "all_reduce busbw at 2M": True,
        "all_reduce busbw at 4M": True,
    }


def test_a_missing_op_is_all_reduce_and_each_op_is_compared_with_itself() -> None:
    collectives = healthy(op="all_reduce")
    collectives["command"] = "collectives"
    gather = bandwidth({M: 0.1, 2 * M: 0.1, 4 * M: 0.1}, op="all_gather")["tables"]["bandwidth"]
    collectives["tables"]["bandwidth"] += gather
    result = baseline.compare(healthy(), collectives, 0.2)
    assert (
        result.check.status == Status.PASS and len(result.table.rows) == 3
    )  # all_gather is not in the baseline


def test_wrong_rows_zero_and_nan_busbw_are_not_figures() -> None:
    odd = healthy()
    odd["tables"]["bandwidth"][1]["wrong"] = 3
    odd["tables"]["bandwidth"][2]["busbw_gbps"] = "nan"
    odd["tables"]["bandwidth"][3]["busbw_gbps"] = 0.0
    assert bandwidth_figures(odd) == bandwidth_figures(bandwidth({64 * 1024: 0.05}))


@pytest.mark.parametrize(
    ("changed", "said"),
    [
        ({"n": 4}, "world size 2 -> 4"),
        ({"backend": "nccl"}, "backend gloo -> nccl"),
        ({"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}, "device type cpu -> cuda"),
        ({"dtype": "bfloat16"}, "dtype float32 -> bfloat16"),
    ],
)
def test_another_setup_is_not_compared_blindly(changed: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError, match=f"nothing to compare with the baseline: .*{said}"):
        baseline.compare(healthy(), healthy(**changed), 0.2)


def test_another_command_is_refused() -> None:
    with pytest.raises(UsageError, match="report of `allreduce` and this is `profile`"):
        baseline.compare(healthy(), profile_report(), 0.2)


def test_links_are_matched_by_rank_pair_and_a_slow_one_is_named() -> None:
    pairs = {(0, 1): 10.0, (1, 0): 10.0, (0, 2): 1.0, (2, 0): 1.0}
    slow = {**pairs, (0, 2): 0.2}
    result = baseline.compare(links(pairs, 4, ("a", "b")), links(slow, 4, ("a", "b")), 0.2)
    assert result.check.status == Status.FAIL
    assert "link 0 -> 2 (a -> b) bandwidth 0.20x" in result.check.detail
    assert result.check.ranks == [0, 2] and result.check.hosts == ["a", "b"]
    assert {row["kind"] for row in result.table.rows} == {"link"}  # host pairs only stand in for rank pairs


def test_links_on_the_same_hosts_with_another_layout_are_matched_by_host_pair() -> None:
    """Partly comparable: 2 ranks per host then, 1 now; the a -> b links still compare, by host pair."""
    then = links({(0, 2): 1.0, (1, 3): 1.2, (2, 0): 1.0, (0, 1): 10.0}, 4, ("a", "b"))
    now = links({(0, 1): 0.3, (1, 0): 1.0}, 2, ("a", "b"))
    result = baseline.compare(then, now, 0.2)
    assert result.check.status == Status.FAIL
    assert "links a -> b bandwidth (median) 0.27x" in result.check.detail
    assert "not compared: per-link bandwidth and latency by rank pair (ranks per node 2+2 -> 1+1)" in (
        result.check.detail
    )
    assert {row["kind"] for row in result.table.rows} == {"host link"}
    assert statuses(result)["links b -> a bandwidth (median)"] == "PASS"
    assert result.check.hosts == ["a", "b"]


def test_a_slow_profile_phase_names_the_phase_and_the_rank() -> None:
    result = baseline.compare(
        profile_report(), profile_report({"backward": 3.0, "step": 2.5}, rank1=2.0), 0.3
    )
    assert result.check.status == Status.FAIL
    assert "backward time (median rank) 0.33x" in result.check.detail
    assert "rank 1 compute time on h0 0.50x" in result.check.detail
    assert result.check.ranks == [1]
    assert "exposed_comm" not in str(statuses(result))  # a difference of timings has no ratio
    assert baseline.compare(profile_report(), profile_report(), 0.3).check.status == Status.PASS


def test_profile_across_world_sizes_compares_compute_only() -> None:
    """2 ranks on one host, then 2 on each of two hosts: compute per rank compares, communication does not."""
    result = baseline.compare(
        profile_report(), profile_report({"forward": 2.0}, n=4, hosts=("h0", "h1")), 0.3
    )
    assert {row["kind"] for row in result.table.rows} == {"compute"}
    assert result.check.status == Status.FAIL and "forward time (median rank) 0.50x" in result.check.detail
    assert "not compared: phases with communication (world size 2 -> 4, ranks per node 2 -> 2+2)" in (
        result.check.detail
    )
    assert "not compared: per-rank compute (ranks per node 2 -> 2+2)" in result.check.detail
    with pytest.raises(UsageError, match="ranks per host 2 -> 4"):  # 4 ranks share one host's cores
        baseline.compare(profile_report(), profile_report(n=4), 0.3)


# ------------------------------------------------------------------ loading and the pre-launch check
def test_load_report_refuses_what_is_not_a_ddpcheck_report(tmp_path: Path) -> None:
    cases = {
        "missing.json": None,
        "text.json": "busbw 312 GB/s\n",
        "list.json": "[1, 2]",
        "other.json": json.dumps({"name": "nccl-tests", "results": []}),
        "old.json": json.dumps({**healthy(), "ddpcheck": "9.0.0"}),
        "compare.json": json.dumps({**healthy(), "command": "compare"}),
    }
    said = {}
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(UsageError) as caught:
            baseline.load_report(str(tmp_path / name))
        said[name] = str(caught.value).split(": ", 1)[1]
    assert said == {
        "missing.json": "no such file",
        "text.json": "not JSON (Expecting value at line 1)",
        "list.json": "not a ddpcheck report (save one with --json)",
        "other.json": "not a ddpcheck report (save one with --json)",
        "old.json": f"written by ddpcheck 9.0.0, incompatible with this ddpcheck {__version__}: "
        "save a new one",
        "compare.json": "a `compare` report, not a run: give the run's own report",
    }
    (tmp_path / "good.json").write_text(json.dumps(healthy()))
    assert baseline.load_report(str(tmp_path / "good.json"))["command"] == "allreduce"


def test_versions_compatible() -> None:
    assert baseline.compatible_version(__version__)
    major, minor = (int(x) for x in __version__.split(".")[:2])
    assert not baseline.compatible_version(f"{major + 1}.0.0")
    assert baseline.compatible_version(f"{major}.{minor}.99")
    assert not baseline.compatible_version("dev")


def test_check_setup_before_launch() -> None:
    def planned(**kw: Any) -> dict[str, Any]:
        args = {"world_size": 2, "backend": "gloo", "device": "cpu", **kw}
        return baseline.planned_setup("allreduce", args["world_size"], args["backend"], args["device"],
                                      {"dtype": kw.get("dtype", "float32")})  # fmt: skip

    baseline.check_setup(healthy(), "allreduce", planned(), "b.json")
    baseline.check_setup(healthy(), "collectives", planned(), "b.json")
    with pytest.raises(UsageError, match=r"b\.json: nothing comparable: world size 2 -> 3"):
        baseline.check_setup(healthy(), "allreduce", planned(world_size=3), "b.json")
    with pytest.raises(UsageError, match="dtype float32 -> int32"):
        baseline.check_setup(healthy(), "allreduce", planned(dtype="int32"), "b.json")
    with pytest.raises(UsageError, match="`profile` has no figures in common"):
        baseline.check_setup(healthy(), "profile", planned(), "b.json")


def test_tolerance_bounds() -> None:
    compare.validate_tolerance(0.0)
    for bad in (-0.1, 1.0, 2.5):
        with pytest.raises(UsageError, match="--tolerance must be a fraction in"):
            compare.validate_tolerance(bad)
    assert baseline.default_tolerance(healthy()) == baseline.DEFAULT_TOLERANCE["cpu"]
    assert baseline.default_tolerance(healthy(device="cuda")) == baseline.DEFAULT_TOLERANCE["cuda"]


# ------------------------------------------------------------------ verdicts and environment
def test_verdict_changes_name_what_broke() -> None:
    then, now = healthy(), healthy()
    now["checks"] = [{"name": "bandwidth", "status": "FAIL", "detail": "", "ranks": [3], "hosts": ["h1"]}]
    check, table = baseline.verdict_changes(then, now)
    assert check.status == Status.WARN and check.detail == "passed then, fails now: bandwidth"
    assert check.ranks == [3] and check.hosts == ["h1"]
    assert table.rows == [{"check": "bandwidth", "then": "PASS", "now": "FAIL", "changed": True}]
    assert baseline.verdict_changes(then, then)[0].status == Status.PASS


def test_environment_changes_include_the_driver_from_the_fingerprint() -> None:
    then, now = healthy(), healthy()
    then["world"]["fingerprint"] = {"driver": "550.54", "python": "3.11.7"}
    now["world"].update(nccl="2.21.5", fingerprint={"driver": "560.35", "python": "3.11.7"})
    check, table = baseline.environment_changes(then, now)
    assert check.status == Status.WARN
    assert check.detail == "changed: nccl none -> 2.21.5, driver 550.54 -> 560.35"
    assert {r["what"] for r in table.rows} == {"torch", "nccl", "driver", "python", "ddpcheck"}


# ------------------------------------------------------------------ what the hardware should do
def gpu_run(name: str, plateau: float, n: int = 8, largest: int = 1024**3) -> dict[str, Any]:
    run = bandwidth({largest // 4: plateau / 2, largest: plateau}, n=n, device="cuda", backend="nccl",
                    device_name=name)  # fmt: skip
    return run


@pytest.mark.parametrize(
    ("name", "plateau", "status", "said"),
    [
        ("NVIDIA H100 80GB HBM3", 465.0, Status.PASS, "8x H100 SXM should reach about 370 GB/s"),
        ("NVIDIA H100 80GB HBM3", 180.0, Status.WARN, "180 GB/s is 49% of the expected: 8x H100 SXM"),
        ("NVIDIA H200", 250.0, Status.WARN, "NVLink 4 through NVSwitch"),
        ("NVIDIA A100-SXM4-80GB", 235.0, Status.PASS, "8x A100 SXM should reach about 230 GB/s"),
        ("NVIDIA A100-SXM4-40GB", 90.0, Status.WARN, "NVLink 3"),
        ("NVIDIA H100 PCIe", 20.0, Status.WARN, "PCIe Gen5 only"),
        ("NVIDIA GeForce RTX 4090", 20.0, Status.SKIP, "no expectation for NVIDIA GeForce RTX 4090"),
        ("NVIDIA H200 NVL", 20.0, Status.SKIP, "not in ddpcheck's table"),
    ],
)
def test_expectations_of_known_gpus(name: str, plateau: float, status: Status, said: str) -> None:
    check = expectations.judge_expected(gpu_run(name, plateau))
    assert check.status == status and said in check.detail, check.detail


def test_expectations_say_when_they_do_not_apply() -> None:
    assert expectations.judge_expected(healthy()).detail == "no expectation for cpu ranks"
    four = expectations.judge_expected(gpu_run("NVIDIA H100 80GB HBM3", 100.0, n=4))
    assert four.status == Status.SKIP and "for 8 GPUs of one node over nccl" in four.detail
    short = expectations.judge_expected(gpu_run("NVIDIA H100 80GB HBM3", 100.0, largest=256 * M))
    assert short.status == Status.SKIP and "below the 1,073,741,824 where 8x H100 SXM" in short.detail
    mixed = gpu_run("NVIDIA H100 80GB HBM3", 400.0)
    mixed["ranks"][3]["device_name"] = "NVIDIA A100-SXM4-80GB"
    assert "mixed GPUs" in expectations.judge_expected(mixed).detail


# ------------------------------------------------------------------ real runs
SWEEP = ("--nproc", "2", "--sizes", "256K:1M", "--iters", "5")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One healthy allreduce and one healthy profile, saved with --json: the baselines of the real runs."""
    directory = tmp_path_factory.mktemp("wt15-baselines")
    scratch = directory / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1"}
    paths = {"allreduce": directory / "allreduce.json", "profile": directory / "profile.json"}
    runs = {"allreduce": ["allreduce", *SWEEP], "profile": ["profile", "--nproc", "2", "--hidden", "256"]}
    for name, args in runs.items():
        done = subprocess.run(
            [sys.executable, "-m", "ddpcheck", *args, "--json", str(paths[name]), "--quiet"],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    assert not worker_processes(scratch) and list(scratch.iterdir()) == []
    return paths


def test_a_healthy_rerun_passes_its_baseline(ddpcheck, scratch, saved) -> None:
    run = ddpcheck("allreduce", *SWEEP, "--baseline", str(saved["allreduce"]))
    assert run.code == 0, run.stdout + run.stderr
    check = run.check("baseline")
    assert check["status"] == "PASS" and f"baseline {saved['allreduce']}" in check["detail"]
    assert {row["figure"] for row in run.table("baseline")} >= {"all_reduce busbw at 1M"}
    assert "Compared with baseline" in run.stdout
    assert "expected bandwidth" not in {c["name"] for c in run.report["checks"]}  # a baseline replaces it
    assert_nothing_left(scratch, run)


def test_without_a_baseline_cpu_ranks_have_no_expectation(saved) -> None:
    report = json.loads(saved["allreduce"].read_text())
    expected = next(c for c in report["checks"] if c["name"] == "expected bandwidth")
    assert expected == {**expected, "status": "SKIP", "detail": "no expectation for cpu ranks"}


def test_profile_against_its_baseline_healthy_and_with_a_slow_rank(ddpcheck, scratch, saved) -> None:
    healthy_run = ddpcheck("profile", "--nproc", "2", "--hidden", "256", "--baseline", str(saved["profile"]))
    assert healthy_run.code == 0 and healthy_run.check("baseline")["status"] == "PASS", healthy_run.stdout
    # slow@1 makes rank 1's compute 11x to 40x longer here: beyond a tolerance of 0.5 every time, while
    # the CPU default (0.95, from this machine's spread) would judge only the slowest of those.
    slow = ddpcheck("profile", "--nproc", "2", "--hidden", "256", "--inject", "slow@1",
                    "--baseline", str(saved["profile"]), "--tolerance", "0.5")  # fmt: skip
    assert slow.code == 1, slow.stdout + slow.stderr
    check = slow.check("baseline")
    assert check["status"] == "FAIL" and 1 in check["ranks"]
    assert "rank 1 compute time on" in check["detail"] and "worse than baseline" in check["detail"]
    assert_nothing_left(scratch, slow)


@pytest.mark.parametrize(
    "args",
    [
        ("--baseline", "{tmp}/none.json"),
        ("--baseline", "{tmp}/text.json"),
        ("--nproc", "3", "--baseline", "{allreduce}"),  # judged after planning: still nothing launched
        ("--tolerance", "0.2"),
        ("--tolerance", "1.5", "--baseline", "{allreduce}"),
    ],
)
def test_a_bad_baseline_is_refused_before_anything_is_launched(
    ddpcheck, scratch, saved, tmp_path, args
) -> None:
    (tmp_path / "text.json").write_text("not json")
    filled = [a.format(tmp=tmp_path, **saved) for a in args]
    run = ddpcheck("allreduce", *(["--nproc", "2"] if "--nproc" not in filled else []), *filled)
    assert_usage_error(run, scratch)


def _compare(ddpcheck, old: Path, new: Path, *extra: str):
    return ddpcheck("compare", str(old), str(new), *extra)


def _doctored(saved: Path, tmp_path: Path, name: str, change) -> Path:
    data = json.loads(saved.read_text())
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_compare_pairs_of_saved_reports(ddpcheck, scratch, saved, tmp_path) -> None:
    real = saved["allreduce"]
    same = _compare(ddpcheck, real, real)
    assert same.code == 0 and same.check("baseline")["status"] == "PASS", same.stdout + same.stderr
    assert [c["name"] for c in same.report["checks"]] == ["baseline", "verdicts", "environment"]
    assert same.report["command"] == "compare" and same.table("environment")

    def faster_1m(data: dict[str, Any], factor: float) -> None:
        row = next(r for r in data["tables"]["bandwidth"] if r["size_bytes"] == M)
        row["busbw_gbps"] *= factor

    doubled = _doctored(real, tmp_path, "doubled.json", lambda d: faster_1m(d, 2.0))
    regressed = _compare(ddpcheck, doubled, real, "--tolerance", "0.3")
    assert regressed.code == 1
    assert "all_reduce busbw at 1M 0.50x" in regressed.check("baseline")["detail"]
    assert "FAIL" in regressed.stdout and "all_reduce busbw at 1M" in regressed.stdout
    hundredfold = _doctored(real, tmp_path, "hundredfold.json", lambda d: faster_1m(d, 100.0))
    assert _compare(ddpcheck, hundredfold, real).code == 1  # beyond even the CPU default
    improved = _compare(ddpcheck, real, doubled, "--tolerance", "0.3")
    assert improved.code == 0 and "1 figure better than the baseline" in improved.check("baseline")["detail"]

    def broke(data: dict[str, Any]) -> None:
        data["checks"][0]["status"] = "FAIL"
        data["world"]["nccl"] = "2.99.9"

    worse = _doctored(real, tmp_path, "broke.json", broke)
    changed = _compare(ddpcheck, real, worse, "--junit", str(tmp_path / "compare.xml"))
    assert changed.code == 0  # a speed gate: the changes are shown, the new report carries its own verdict
    assert changed.check("verdicts")["status"] == "WARN" and "passed then, fails now" in changed.stdout
    assert changed.check("environment")["detail"] == "changed: nccl none -> 2.99.9"
    assert 'name="baseline"' in (tmp_path / "compare.xml").read_text()

    mismatched = _doctored(real, tmp_path, "four.json", lambda d: d["world"].update(size=4))
    for bad in (mismatched, saved["profile"], tmp_path / "missing.json"):
        assert_usage_error(_compare(ddpcheck, real, bad), scratch)
    assert_usage_error(_compare(ddpcheck, real, real, "--tolerance", "-1"), scratch)


# ------------------------------------------------------------------ a slow link between two hosts
@pytest.fixture
def wt15_hosts():
    """Two network namespaces joined by a veth pair (10.231.15.1, .2), for a link that tc makes slow."""
    yield from veth_pair("wt15", "10.231.15", tools=("ip", "unshare", "tc"))


def _two_host_run(hosts: list[dict], scratch: Path, report: Path, *extra: str) -> int:
    """allreduce over the veth link, one rank per host; the exit code of rank 0's node (the report's)."""
    endpoint = f"{hosts[0]['address']}:{free_port()}"
    procs = []
    for node, host in enumerate(hosts):
        args = ["allreduce", "--nproc", "1", "--sizes", "128K:512K", "--iters", "5", "--nnodes", "2"]
        args += ["--node-rank", str(node), "--rdzv-endpoint", endpoint, "--timeout", "60", *extra]
        args += ["--json", str(report if node == 0 else report.with_suffix(".other.json")), "--quiet"]
        procs.append(on_host(host, args, scratch))
    outputs = [p.communicate(timeout=180) for p in procs]
    # The comparison is made where the report is: the other node exits with the ranks' own verdict.
    assert procs[1].returncode == 0, outputs
    return procs[0].returncode


@pytest.mark.netns
def test_a_link_made_slow_with_tc_fails_against_the_baseline(wt15_hosts, scratch, tmp_path) -> None:
    healthy_path = tmp_path / "healthy.json"
    assert _two_host_run(wt15_hosts, scratch, healthy_path) == 0
    host = wt15_hosts[1]
    ip("netns", "exec", host["netns"], "tc", "qdisc", "add", "dev", host["device"], "root", "tbf",
        "rate", "20mbit", "burst", "32kbit", "latency", "400ms")  # fmt: skip
    slow_path = tmp_path / "slow.json"
    assert _two_host_run(wt15_hosts, scratch, slow_path, "--baseline", str(healthy_path)) == 1
    check = next(c for c in json.loads(slow_path.read_text())["checks"] if c["name"] == "baseline")
    assert check["status"] == "FAIL" and "all_reduce busbw at 512K" in check["detail"], check
    assert_nothing_left(scratch)


@pytest.mark.parametrize("command", ["collectives", "links"])
def test_every_measuring_command_takes_a_baseline_and_checks_it_first(
    ddpcheck, scratch, saved, tmp_path, command
) -> None:
    # The registry gives --baseline to every command that measures speed; a baseline of another
    # command (allreduce's against links) is refused before anything starts, as a missing file is.
    (tmp_path / "text.json").write_text("not json")
    for path in (tmp_path / "none.json", tmp_path / "text.json"):
        assert_usage_error(ddpcheck(command, "--nproc", "2", "--baseline", str(path)), scratch)
    if command == "links":
        run = ddpcheck(command, "--nproc", "2", "--baseline", str(saved["allreduce"]))
        assert_usage_error(run, scratch)
        assert "allreduce" in run.stderr
