"""hw.gen writes its output only when the content changes, so the Verilator builds keyed on
the file's time (make rtl, then make demo) are not redone when nothing changed."""
import os

import pytest

from hw import gen

OLD = 1_000_000_000          # an mtime far in the past: a rewrite shows whatever the clock's resolution


def test_write_if_changed(tmp_path):
    path = tmp_path / "sub" / "out.v"
    assert gen.write_if_changed(path, "module a;\nendmodule\n")        # new file, folder made
    assert path.read_text() == "module a;\nendmodule\n"
    os.utime(path, (OLD, OLD))
    assert not gen.write_if_changed(path, "module a;\nendmodule\n")    # same bytes: untouched
    assert path.stat().st_mtime == OLD
    assert gen.write_if_changed(path, "module b;\nendmodule\n")        # changed: written
    assert path.read_text() == "module b;\nendmodule\n"
    assert path.stat().st_mtime != OLD
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.v"]  # no temporary left


def test_main_writes_only_a_changed_output(tmp_path, capsys, monkeypatch):
    """main on a config, with the generator stood in by its config's name (a real run is
    about 15 s of Amaranth's conversion: the slow test below, and test_lint.py's check of the
    committed RTL against a fresh generation): the same output leaves the file (and its
    time) alone, a changed one is written, each run says which."""
    configs = []
    monkeypatch.setattr(gen, "generate", lambda cfg: configs.append(cfg.name) or f"// {cfg.name}\n")
    out = tmp_path / "ndp_device.v"
    gen.main(["--config", "small", "-o", str(out)])
    assert out.read_text() == "// small\n"
    os.utime(out, (OLD, OLD))
    gen.main(["--config", "small", "-o", str(out)])
    assert out.stat().st_mtime == OLD
    gen.main(["--config", "quad", "-o", str(out)])
    assert out.read_text() == "// quad\n" and out.stat().st_mtime != OLD
    assert configs == ["small", "small", "quad"]
    assert capsys.readouterr().out.splitlines() == [f"{out}: written", f"{out}: unchanged", f"{out}: written"]


@pytest.mark.slow
def test_main_keeps_an_unchanged_file(tmp_path, capsys, monkeypatch):
    """Two real runs on the smallest config: the Verilog is deterministic and the second run
    leaves the file (and its time) alone; a changed generator output is written."""
    out = tmp_path / "ndp_device.v"
    gen.main(["--config", "small", "-o", str(out)])
    first = out.read_bytes()
    assert b"module ndp_device" in first
    os.utime(out, (OLD, OLD))
    gen.main(["--config", "small", "-o", str(out)])
    assert out.read_bytes() == first
    assert out.stat().st_mtime == OLD
    assert capsys.readouterr().out.splitlines() == [f"{out}: written", f"{out}: unchanged"]

    monkeypatch.setattr(gen, "generate", lambda cfg: "// changed\n")
    gen.main(["--config", "small", "-o", str(out)])
    assert out.read_text() == "// changed\n"
    assert out.stat().st_mtime != OLD
