"""The command line: outputs, JSON summaries and one-line errors (no tracebacks)."""

import json
import subprocess
import sys

import pytest

from workbench.cli.main import main

PROMPT = "a large red circle in the top left on a white background"


def run_cli(*args, cwd=None):
    """Run `python -m workbench` in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def run_main(capsys, *args) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the command line run in this process: what `python -m workbench` runs
    after its imports (`sys.exit(main())`), without a new interpreter's ~4 s of imports."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_:  # argparse: --help and bad flags
        code = exit_.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def test_python_m_workbench_is_the_command_line(tmp_path):
    """The entry point in a fresh interpreter, as a user runs it (the tests below call `main` in-process):
    help exits 0, a bad input exits 2 with one `error:` line and no traceback."""
    result = run_cli("sample", "--help")
    assert result.returncode == 0 and "usage" in result.stdout
    result = run_cli("sample", "--prompt", "a red dog", "--out", "x.png", cwd=tmp_path)
    assert result.returncode == 2 and "unknown word 'dog'" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("error:") == 1, result.stderr


def test_sample_writes_a_grid(model_dir, tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert main(["sample", "--prompt", PROMPT, "--num", "4", "--steps", "3", "--seed", "0", "--out", str(out),
                 "--model", str(model_dir)]) == 0
    assert out.is_file() and str(out) in capsys.readouterr().out


def test_sample_json_summary(model_dir, tmp_path, capsys):
    out = tmp_path / "group"
    assert main(["sample", "--prompt", PROMPT, "--group", "3", "--steps", "4", "--noise-level", "0.7", "--seed", "0",
                 "--out", str(out), "--json", "--model", str(model_dir)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["prompt"] == PROMPT and summary["group"] == 3 and summary["steps"] == 4
    assert len(summary["sigmas"]) == 5 and len(summary["log_prob"]) == 3 and len(summary["log_prob"][0]) == 4
    assert len(summary["l1_rel"]) == 3 and len(summary["l1_rel"][0]) == 4
    for path in summary["files"].values():
        assert (tmp_path / "group" / path.split("/")[-1]).is_file()


def test_attribute_json(model_dir, capsys):
    assert main(["attribute", "--prompt", PROMPT, "--group", "3", "--steps", "4", "--continuations", "2",
                 "--chunks", "1,3", "--json", "--precision", "float32", "--model", str(model_dir)]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["precision"] == "float32"  # the continuations' numerics, as asked
    assert len(s["advantage"]) == 3 and len(s["credit"][0]) == 4 and len(s["chunk_credit"][0]) == 2
    for key in ("step_misattribution", "chunk_misattribution", "step_misattribution_se", "chunk_misattribution_se"):
        assert 0 <= s[key] <= 1
    assert s["estimator"] == "mc" and s["crn"] and s["z"] == 2.0 and len(s["credit_se"][0]) == 4
    assert 0 <= s["step_determined"] <= 1 and set(sum(s["step_classes"], [])) <= {-1, 0, 1}


def test_attribute_estimator_z_and_independent_continuations(model_dir, capsys):
    assert main(["attribute", "--prompt", PROMPT, "--group", "3", "--steps", "4", "--chunks", "4", "--estimator", "x0",
                 "--z", "1", "--no-crn", "--model", str(model_dir)]) == 0
    out = capsys.readouterr().out
    assert "estimator x0 (one look-ahead per state, independent)" in out and "z=1" in out
    assert "step  misattributed among determined" in out and "plain sign rate" in out
    with pytest.raises(SystemExit):
        main(["attribute", "--prompt", PROMPT, "--steps", "4", "--estimator", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_chunks_json(model_dir, capsys):
    assert main(["chunks", "--steps", "6", "--method", "adaptive", "--prompts", "3", "--json",
                 "--model", str(model_dir)]) == 0
    s = json.loads(capsys.readouterr().out)
    assert sum(s["sizes"]) == 6 and len(s["l1_rel"]) == 6


@pytest.mark.parametrize("args,needle", [
    (["sample", "--prompt", "a red dog", "--out", "x.png"], "unknown word 'dog'"),
    (["sample", "--prompt", "", "--out", "x.png"], "empty"),
    (["sample", "--prompt", PROMPT, "--num", "0", "--out", "x.png"], "whole number in 1..256, got 0"),
    (["sample", "--prompt", PROMPT, "--steps", "-3", "--out", "x.png"], "whole number in 1..200, got -3"),
    (["sample", "--prompt", PROMPT, "--num", "two", "--out", "x.png"], "whole number"),
    (["sample", "--prompt", PROMPT, "--steps", "2", "--out", "/proc/nope/grid.png"], "cannot write"),
    (["sample", "--prompt", PROMPT, "--model", "/nonexistent/model", "--out", "x.png"], "does not exist"),
    (["attribute", "--prompt", PROMPT, "--steps", "4", "--chunks", "2,a"], "integer"),
    (["chunks", "--method", "zigzag"], "valid chunkers"),
])
def test_errors_are_one_line_without_traceback(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, *args)
    assert code != 0
    assert needle in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


@pytest.mark.parametrize("command,out", [("sample", ["--out", "x.png"]), ("attribute", []),
                                         ("export", ["--out", "x.html"])])
def test_a_prompt_outside_the_grammar_is_refused_before_the_model_loads(command, out, model_dir, tmp_path,
                                                                         monkeypatch, capsys):
    """The embedded format (no --model, or such a folder) reads only the shapes grammar: the command says so
    before loading (the load imports diffusers, seconds); a diffusers folder takes any text and goes on to load."""
    from workbench.core.errors import WorkbenchError

    def load_policy(source, **options):
        raise WorkbenchError(f"loading {source.model}")

    monkeypatch.setattr("workbench.train.sources.load_policy", load_policy)
    monkeypatch.chdir(tmp_path)
    for model in ([], ["--model", str(model_dir)]):
        code, _, err = run_main(capsys, command, "--prompt", "a red dog", *model, *out)
        assert code == 2 and "unknown word 'dog'" in err and "loading" not in err, err
    pipeline = tmp_path / "sd3"
    pipeline.mkdir()
    (pipeline / "model_index.json").write_text('{"_class_name": "StableDiffusion3Pipeline"}')
    code, _, err = run_main(capsys, command, "--prompt", "a red dog", "--model", str(pipeline), *out)
    assert code == 2 and f"loading {pipeline}" in err, err


def test_corrupted_weights_are_a_clear_error(model_dir, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((model_dir / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    code, _, err = run_main(capsys, "sample", "--prompt", PROMPT, "--model", bad, "--out", tmp_path / "g.png")
    assert code == 2 and "corrupted" in err and "Traceback" not in err


def test_missing_weights_are_a_clear_error(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    code, _, err = run_main(capsys, "sample", "--prompt", PROMPT, "--model", tmp_path / "m", "--out",
                            tmp_path / "g.png")
    assert code == 2 and "model.safetensors" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["sample", "attribute", "chunks", "bench", "train"])
def test_every_command_has_help(command, capsys):
    code, out, _ = run_main(capsys, command, "--help")
    assert code == 0 and "usage" in out


def test_attribute_marks_a_whole_trajectory_chunk_fixed_by_construction(model_dir, capsys):
    args = ["attribute", "--prompt", PROMPT, "--group", "3", "--steps", "3", "--continuations", "2", "--chunks", "3",
            "--model", str(model_dir)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "fixed by construction" in out and "other continuation noise" in out
    assert main([*args, "--no-shared-noise"]) == 0  # own x_T per trajectory: V(x_T^i) is measured, not the mean
    assert "fixed by construction" not in capsys.readouterr().out


def test_export_writes_a_standalone_page(model_dir, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["export", "--prompt", PROMPT, "--group", "2", "--steps", "3", "--continuations", "2", "--chunks",
                 "1,2", "--model", str(model_dir), "--out", str(out)]) == 0
    assert "no network needed" in capsys.readouterr().err
    text = out.read_text()
    assert len(text.encode()) < 10_000_000 and text.count('class="plotly-graph-div"') == 5
    assert "<h2>Temporal dynamics and the chunks</h2>" in text  # the model's L1_rel curve under the chunks
    from workbench.rl.objectives import OBJECTIVES

    shown = [name for name in OBJECTIVES.names() if f'"text":"{name}\\u003cbr' in text]  # a map's title
    assert shown == OBJECTIVES.names()  # every registered objective, gfpo (filtered by sharpness) included
    assert "--chunks 1,2 --continuations 2 --estimator mc" in text and f"--model {model_dir}" in text
    assert main(["export", "--prompt", PROMPT, "--steps", "3", "--chunks", "1,1", "--model", str(model_dir),
                 "--out", str(out)]) == 2  # a schedule that does not cover the steps: a message, no page
    assert "sum to 2" in capsys.readouterr().err
