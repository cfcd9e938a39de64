"""python -m mlsys: each subcommand's output checked against hand-computed figures."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import mlsys
from mlsys import cli


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["name", "vendor", "architecture", "year"]
    h100 = next(line for line in lines if line.startswith("H100-SXM"))
    # bf16 dense 989.4 TFLOP/s / 3.35 TB/s = 295 FLOP/byte
    assert "3.35 TB/s" in h100 and "295 FLOP/B" in h100
    assert len(lines) == 2 + len(mlsys.hardware.all_accelerators())


def test_show_lists_figures_and_sources(capsys):
    code, out, _ = run(capsys, "show", "h100")
    assert code == 0
    assert out.startswith("H100-SXM (NVIDIA Hopper, 2022)")
    assert "interconnect_bandwidth  450 GB/s" in out
    assert "https://" in out and "sources:" in out


def test_ridge(capsys):
    code, out, _ = run(capsys, "ridge", "A100", "--dtype", "fp16")
    # 312 TFLOP/s / 2.039 TB/s = 153.0 FLOP/byte
    assert code == 0
    assert "ridge point 153 FLOP/B" in out


def test_bound(capsys):
    code, out, _ = run(capsys, "bound", "H100", "--flops", "2 GFLOP", "--bytes", "1 GB")
    assert code == 0
    # intensity 2e9 / 1e9 = 2 FLOP/byte < 295: memory-bound; attainable 3.35e12 * 2 = 6.7 TFLOP/s;
    # time 1e9 B / 3.35e12 B/s = 298.5 us
    assert "arithmetic intensity  2 FLOP/B" in out
    assert "bound                 memory" in out
    assert "attainable            6.7 TFLOP/s" in out
    assert "time lower bound      299 µs" in out
    # bare numbers are FLOPs and bytes: 1e15 FLOP over 1e9 B = 1e6 FLOP/byte: compute-bound
    code, out, _ = run(capsys, "bound", "H100", "--flops", "1e15", "--bytes", "1e9")
    assert "bound                 compute" in out


def test_allreduce(capsys):
    code, out, _ = run(capsys, "allreduce", "--size", "1 GB", "--world", "8", "--bandwidth", "450 GB/s",
                       "--latency", "5 us")
    assert code == 0
    # 2 * 7 / 8 * 1 GB = 1.75 GB; 70 us + 1.75e9 / 450e9 s = 3.959 ms
    assert "bytes sent per GPU  1.75 GB" in out
    assert "time                3.96 ms" in out
    code, out, _ = run(capsys, "allreduce", "--size", "1 GB", "--world", "8", "--bandwidth", "H100",
                       "--algorithm", "tree")
    # tree: 2 GB at 450 GB/s = 4.44 ms
    assert "bytes sent per GPU  2 GB" in out and "time                4.44 ms" in out


def test_format(capsys):
    code, out, _ = run(capsys, "format", "fp8_e5m2")
    assert code == 0 and "57344" in out and "rounds to ±inf" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["show", "H900"], "unknown accelerator 'H900'"),
        (["bound", "H100", "--flops", "2 GB", "--bytes", "1 GB"], "--flops must have the dimension of FLOP"),
        (["bound", "H100", "--flops", "2 GFLOP", "--bytes", "0"], "must be positive"),
        (["allreduce", "--size", "1 GB", "--world", "0", "--bandwidth", "1 GB/s"], "world_size"),
        (["ridge", "V100", "--dtype", "bf16"], "has no dense bf16 peak"),
        (["format", "fp7"], "unknown dtype"),
        (["list", "--dtype", "fp7"], "unknown dtype"),
    ],
)
def test_errors_are_one_line_with_status_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("mlsys: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_measure_delegates_to_bench(monkeypatch, capsys):
    seen = []
    fake = types.ModuleType("mlsys.bench")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "mlsys.bench", fake)
    monkeypatch.setattr(mlsys, "bench", fake, raising=False)
    assert cli.main(["measure", "--out", "x.json", "--quick"]) == 0
    assert seen == [["--out", "x.json", "--quick"]]


def test_measure_without_bench_main_is_a_clear_error(monkeypatch, capsys):
    fake = types.ModuleType("mlsys.bench")
    monkeypatch.setitem(sys.modules, "mlsys.bench", fake)
    monkeypatch.setattr(mlsys, "bench", fake, raising=False)
    code, _, err = run(capsys, "measure")
    assert code == 2 and "mlsys.bench.main" in err


def test_python_m_mlsys():
    help_ = subprocess.run([sys.executable, "-m", "mlsys", "--help"], capture_output=True, text=True, check=True)
    for sub in ("list", "show", "ridge", "bound", "allreduce", "format", "measure"):
        assert sub in help_.stdout
    bad = subprocess.run([sys.executable, "-m", "mlsys", "show", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "mlsys"], capture_output=True, text=True)
    assert missing.returncode == 2  # argparse: a subcommand is required
