"""`env`'s "CUDA (driver supports)": what nvidia-smi's `CUDA Version` says, on every torch release.

torch 2.11 has no `_cuda_getDriverVersion`: the H200 run printed "-" where nvidia-smi said 13.0
(tests/fixtures/h200/nvidia-smi-q.xml). The driver's own cuDriverGetVersion answers instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddpcheck.checks.env.probe import driver_cuda_version

H200_SMI = Path(__file__).resolve().parent / "fixtures" / "h200" / "nvidia-smi-q.xml"


def torch_with(binding: object = None) -> SimpleNamespace:
    native = SimpleNamespace() if binding is None else SimpleNamespace(_cuda_getDriverVersion=binding)
    return SimpleNamespace(_C=native)


def test_torchs_binding_is_read_where_a_release_has_it() -> None:
    assert driver_cuda_version(torch_with(lambda: 12040)) == "12.4"
    assert driver_cuda_version(torch_with(lambda: 0)) is None


def test_without_the_binding_or_a_driver_library_there_is_nothing_to_say(tmp_path: Path) -> None:
    assert driver_cuda_version(torch_with(), libcuda=str(tmp_path / "libcuda.so.1")) is None


@pytest.mark.integration
def test_without_torchs_binding_the_drivers_library_says_what_nvidia_smi_says(tmp_path: Path) -> None:
    """A stand-in libcuda answering as the H200's driver did: nvidia-smi's <cuda_version> 13.0."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build a stand-in libcuda")
    smi = re.search(r"<cuda_version>([\d.]+)</cuda_version>", H200_SMI.read_text())
    assert smi is not None and smi[1] == "13.0"
    source = tmp_path / "libcuda.c"
    source.write_text("int cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n")
    library = tmp_path / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    assert driver_cuda_version(torch_with(), libcuda=str(library)) == smi[1]
