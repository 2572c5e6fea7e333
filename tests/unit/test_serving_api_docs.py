"""docs/api.md kept honest: every config file it writes loads with its loader and runs
through the simulator as the page's command names it (a GPU, a link, a model and a run by
path; the link on a system whose scheduler policy follows the run's link, which once
failed), the summary naming what it used; every call in its API table exists; its Python
example compiles and imports what it uses."""
import ast
import importlib
import json
import pathlib
import re

import pytest

from isa.system import load_gpu, load_link, load_model
from serving.config import load_serving_config
from serving.engine import run

DOC = pathlib.Path(__file__).parents[2] / "docs" / "api.md"
TEXT = DOC.read_text()


def written_configs():
    """{file name: (its JSON, the `plora simulate` line that uses it)} of the page's heredocs."""
    out = {}
    for name, body in re.findall(r"\$ cat > build/configs/([\w.-]+) <<'JSON'\n(.*?)\nJSON\n", TEXT, re.S):
        use = next(line for line in TEXT.splitlines() if line.startswith("$ plora simulate") and name in line)
        out[name] = (json.loads(body), use)
    return out


CONFIGS = written_configs()


def test_the_page_writes_a_gpu_a_link_a_model_and_a_run():
    uses = {re.search(r"(--set \w+|--config)=?\s?build/configs/" + re.escape(n), u).group(1) for n, (_, u) in
            CONFIGS.items()}
    assert uses == {"--set gpu", "--set link", "--set model", "--config"}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_loads_and_runs_as_the_page_uses_it(name, tmp_path):
    data, use = CONFIGS[name]
    path = tmp_path / name
    path.write_text(json.dumps(data))
    sets = dict(re.findall(r"--set (\w+)=(\S+)", use))
    fields = {k: (str(path) if name in v else v) for k, v in sets.items() if k != "requests"}
    if "--config" in use:
        cfg = load_serving_config(str(path), requests=4)
    else:
        field, = [k for k, v in sets.items() if name in v]
        {"gpu": load_gpu, "link": load_link, "model": load_model}[field](str(path))
        cfg = load_serving_config("default", requests=4, **fields)
    summary = run(cfg, progress=False).summary()
    assert summary["requests"] == 4
    stem = path.stem
    if "--config" in use:
        assert all(summary[k] == data[k] for k in ("system", "workload", "max_batch"))
    else:
        assert summary[field] in (stem, str(path))
        if field == "link":
            assert summary["link_gb_s"] == data["bytes_per_s"] / 1e9
            assert summary["link_latency_ns"] == pytest.approx(data["latency_s"] * 1e9)


def test_every_call_in_the_api_table_exists():
    names = re.findall(r"^\| `((?:serving|isa)\.[\w.]+)", TEXT, re.M)
    names += [f"isa.system.{n}" for n in ("load_gpu", "load_link", "load_model", "load_cpu")]
    assert len(names) >= 10
    for dotted in names:
        module, _, attr = dotted.rpartition(".")
        if module.endswith(("RunResult", "summary_lines")):
            continue
        try:
            assert hasattr(importlib.import_module(module), attr), dotted
        except ModuleNotFoundError:             # a class's method: module.Class.method
            module, _, cls = module.rpartition(".")
            assert hasattr(getattr(importlib.import_module(module), cls), attr), dotted


def test_the_python_example_compiles_and_its_imports_exist():
    code = re.search(r"```python\n(.*?)```", TEXT, re.S).group(1)
    tree = ast.parse(code)
    imported = [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names]
    assert ("serving.trace", "Timeline") in imported and ("serving.engine", "run") in imported
    for module, name in imported:
        assert hasattr(importlib.import_module(module), name), (module, name)
