"""scripts/gpu_smoke.py's code path on CPU with tiny random SD3 sizes: the recipe's iteration, the phases, the
estimate, TFLOPS, and every check (on-policy ratio, LoRA change, KL 0 then > 0, resume, the app through
gradio_client) pass; a failed check makes it exit 1."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_smoke.py"


@pytest.fixture(scope="module")
def smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_smoke_runs_on_cpu_with_tiny_sizes(smoke, tmp_path, capsys):
    assert smoke.main(["--tiny", "--device", "cpu", "--out", str(tmp_path)]) == 0, capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report["phases"]) == ["build", "iteration 1", "iteration 2", "resume"]
    assert {"on-policy ratio 1", "KL 0 then > 0", "LoRA weights change", "resume",
            "the app's Fine-tune through gradio_client"} <= set(report["checks"])
    assert all(ok for ok, _ in report["checks"].values()), report["checks"]
    assert report["estimate"]["total"] > 0 and report["tflops"]["achieved"] > 0 and "fits" in report["plan"]
    out = capsys.readouterr().out
    assert "| check | ok | detail |" in out and "bf16 matmul peak" in out


def test_a_failed_check_exits_1(smoke, tmp_path, monkeypatch, capsys):
    report = {"device": "cpu", "phases": {"build": {"seconds": 1.0}}, "estimate": {"total": 1e9},
              "tflops": {"achieved": 1.0, "matmul_peak": 2.0}, "checks": {"resume": (False, "weights differ")}}
    monkeypatch.setattr(smoke, "smoke", lambda args: report)
    assert smoke.main(["--tiny", "--device", "cpu", "--out", str(tmp_path)]) == 1
    assert "| resume | NO | weights differ |" in capsys.readouterr().out
    assert smoke.iteration_flops(10, 1, 2, 3, 1, 1, 2, 1, False, False, False) == (2 * 10 * 3 + 4 * 9 * 2) * 5
