"""Bad input to `plora` (plora_cli) through click's CliRunner, in process: every subcommand
that takes a config refuses a missing one, and a malformed file, a JSON array, an unknown
key, an unknown `--set` field, a value of the wrong type or out of range, an unknown option
each give ONE line `Error: <what>` naming the file (or config) and the field, exit status 2
(click's usage-error status; `plora_cli.BadInput` is a ClickException with exit_code 2,
so no usage text is printed), and no traceback. Every input here fails before any work
starts (no simulation, no Verilator, no synthesis). The Python API raises
`isa.config.ConfigError` (a ValueError; ConfigNotFound is a FileNotFoundError as well).
"""
import json

import pytest
from click.testing import CliRunner

import isa
from isa.config import ConfigError, ConfigNotFound
from isa.system import load_gpu, load_link, load_model
from plora_cli import main, package_version
from serving.config import load_serving_config


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result, *named):
    """Exit status 2, one line `Error: ...` naming every string in `named`, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    for text in named:
        assert str(text) in lines[0], (text, lines[0])
    return lines[0]


@pytest.fixture
def files(tmp_path):
    """Bad config files: malformed JSON, a JSON array, a GPU with a typo'd key, a link with a
    string for a number, a device with a value out of range."""
    gpu = json.loads((isa.config.CONFIG_DIR / "gpus" / "h100.json").read_text())
    gpu["hbm_bytez"] = gpu.pop("hbm_bytes")
    link = json.loads((isa.config.CONFIG_DIR / "links" / "cxl3.1.json").read_text())
    link["bytes_per_s"] = "fast"
    device = json.loads((isa.config.CONFIG_DIR / "default.json").read_text())
    device["num_queues"] = 40
    out = {"malformed": '{"name": "x",\n "lanes": 32 "rows": 4}\n', "array": "[1, 2]\n",
           "gpu_typo": json.dumps(gpu), "link_type": json.dumps(link), "device_range": json.dumps(device)}
    for name, text in out.items():
        (tmp_path / f"{name}.json").write_text(text)
    return {name: tmp_path / f"{name}.json" for name in out}


# ---- a missing config, per subcommand ---------------------------------------------------

DEVICE_CONFIGS = "default, paper, quad, small"


@pytest.mark.parametrize("args,named", [
    (("validate", "--config", "nosuch"), ["no device config 'nosuch'", DEVICE_CONFIGS]),
    (("roofline", "--config", "nosuch"), ["no device config 'nosuch'", DEVICE_CONFIGS]),
    (("verify", "--config", "nosuch"), ["no device config 'nosuch'", DEVICE_CONFIGS]),
    (("bench", "--config", "nosuch"), ["no device config 'nosuch'", DEVICE_CONFIGS]),
    (("timing-check", "--config", "nosuch"), ["no device config 'nosuch'", DEVICE_CONFIGS]),
    (("area", "--config", "nosuch"), ["no device config 'nosuch'", DEVICE_CONFIGS]),
    (("area", "--config", "nosuch", "--scaling"), ["no device config 'nosuch'", DEVICE_CONFIGS]),
    (("crossovers", "--config", "nosuch"), ["no scheduler config 'nosuch'", "default"]),
    (("steps", "--config", "nosuch"), ["no scheduler config 'nosuch'", "default"]),
    (("simulate", "--config", "nosuch"), ["no serving config 'nosuch'", "default, serve-bench"]),
    (("serve-bench", "--config", "nosuch"), ["no serving config 'nosuch'", "default, serve-bench"]),
    (("sweep", "--config", "nosuch", "--axis", "link_gb_s=8"), ["no serving config 'nosuch'"]),
    (("reproduce", "--set", "gpu=nosuch"), ["no gpu config 'nosuch'", "h100"]),
    (("simulate", "--config", "nosuch.json"), ["no serving config file 'nosuch.json'"]),
])
def test_a_missing_config_is_one_line_listing_the_known(args, named):
    one_error_line(invoke(*args), *named)


# ---- bad files --------------------------------------------------------------------------

def test_malformed_json_names_file_line_and_column(files):
    path = files["malformed"]
    for args in (("validate", "--config", path), ("simulate", "--set", f"model={path}")):
        one_error_line(invoke(*args), path, "malformed JSON at line 2 column 14")


def test_a_json_array_is_refused_naming_the_file(files):
    path = files["array"]
    for args in (("roofline", "--config", path), ("crossovers", "--set", f"gpu={path}"),
                 ("serve-bench", "--config", path)):
        one_error_line(invoke(*args), path, "expected a JSON object", "got a JSON array")


def test_an_unknown_key_is_named_with_the_valid_ones(files):
    path = files["gpu_typo"]
    line = one_error_line(invoke("simulate", "--set", f"gpu={path}"), path, "'hbm_bytez'")
    assert "hbm_bytes, hbm_bytes_per_s, fp16_flops, kernel_launch_s" in line


def test_a_wrong_type_names_the_field(files):
    path = files["link_type"]
    one_error_line(invoke("simulate", "--set", f"link={path}"), path, "bytes_per_s must be a number", "'fast'")
    one_error_line(invoke("simulate", "--set", "num_devices=abc"), "num_devices must be an integer", "'abc'")


def test_a_value_out_of_range_names_the_field(files):
    path = files["device_range"]
    for command in ("verify", "timing-check", "validate"):
        one_error_line(invoke(command, "--config", path), path, "num_queues must be 1..16, got 40")
    one_error_line(invoke("simulate", "--set", "max_batch=0"), "max_batch must be an integer >= 1")
    one_error_line(invoke("steps", "--set", "max_loras=0"), "max_loras")


# ---- --set and the command line ---------------------------------------------------------

@pytest.mark.parametrize("command,valid", [("simulate", "system, workload"), ("serve-bench", "system, workload"),
                                           ("reproduce", "system, workload"), ("crossovers", "gpu, link"),
                                           ("steps", "gpu, link")])
def test_an_unknown_set_field_lists_the_valid_ones(command, valid):
    one_error_line(invoke(command, "--set", "bogus=1"), "--set bogus", valid)


def test_a_malformed_set_item_is_named():
    one_error_line(invoke("simulate", "--set", "requests"), "expected FIELD=VALUE", "'requests'")


@pytest.mark.parametrize("args,named", [
    (("validate", "--count", "abc"), "--count"),
    (("validate", "--backend", "x"), "--backend"),
    (("roofline", "--copies", "2"), "--copies"),
    (("roofline", "--kinds", "nonsense"), "nonsense"),
    (("roofline", "--source", "x"), "--source"),
    (("sweep", "--axis", "link_gb_s"), "--axis"),
    (("sweep", "--axis", "nonsense=1,2"), "nonsense"),
    (("replay-step", "--case", "nonsense"), "nonsense"),
    (("bench", "--bogus"), "--bogus"),
    (("demo", "--bogus"), "--bogus"),
    (("demo", "extra"), "extra"),
    (("systems", "--bogus"), "--bogus"),
    (("systems", "extra"), "extra"),
    (("nosuch",), "nosuch"),
])
def test_a_bad_option_is_one_line(args, named):
    one_error_line(invoke(*args), named)


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_subcommand_refuses_an_unknown_option_in_one_line(command):
    """Every subcommand, including those without a config (demo, systems): a bad input is
    one line naming it and the command's --help, exit status 2, before any work."""
    one_error_line(invoke(command, "--no-such-option"), "--no-such-option", f" {command} --help')")


def test_validate_and_roofline_are_click_not_argparse():
    for command in ("validate", "roofline"):
        result = invoke(command, "--help")
        assert result.exit_code == 0 and "usage: plora [-h]" not in result.output
        assert "--config" in result.output and "Usage:" in result.output
    assert "--stream" in invoke("validate", "--help").output
    assert "--kinds" in invoke("roofline", "--help").output


def test_version_and_help_describe_the_tool():
    result = invoke("--version")
    assert result.exit_code == 0 and result.output == f"plora {package_version()}\n"
    assert not package_version().startswith("unknown")
    text = invoke("--help").output
    for command in ("simulate", "crossovers", "validate", "verify", "area"):
        assert command in text
    assert "device" in text.lower() and "serve" in text.lower()


# ---- the Python API: an exception naming the problem ------------------------------------

def test_the_api_raises_config_errors(files):
    with pytest.raises(ConfigNotFound, match="no device config 'nosuch'; known"):
        isa.load_config("nosuch")
    assert issubclass(ConfigNotFound, FileNotFoundError) and issubclass(ConfigError, ValueError)
    with pytest.raises(ConfigError, match="unknown fields \\['hbm_bytez'\\]") as info:
        load_gpu(files["gpu_typo"])
    assert info.value.field == "hbm_bytez"
    with pytest.raises(ConfigError, match="bytes_per_s must be a number") as info:
        load_link(files["link_type"])
    assert info.value.field == "bytes_per_s"
    with pytest.raises(ConfigError, match="JSON array"):
        load_model(files["array"])
    with pytest.raises(ConfigError, match=r"serving config 'default': max_batch .* \(overridden\)") as info:
        load_serving_config("default", max_batch=0)
    assert info.value.field == "max_batch"


# ---- the new outputs' options (crossovers --csv/--plot, steps, sweep --plot, reproduce, boost) --

@pytest.mark.parametrize("args,named", [
    (("crossovers", "--plot", "{tmp}/x.xyz"), ["--plot", "unknown image format 'xyz'", ".png"]),
    (("crossovers", "--plot", "{tmp}/noext"), ["--plot", "no file extension"]),
    (("crossovers", "--csv", "{tmp}/afile/x.csv"), ["--csv", "afile", "is a file, not a folder"]),
    (("crossovers", "--plot", "{tmp}"), ["--plot", "is a directory"]),
    (("crossovers", "--max-batch", "0"), ["--max-batch", "0"]),
    (("crossovers", "--d", "-1"), ["--d", "-1"]),
    (("steps", "--adapters", "0"), ["--adapters", "0"]),
    (("steps", "--steps", "0"), ["--steps"]),
    (("steps", "--batch", "0"), ["--batch"]),
    (("steps", "--skew", "1.5"), ["--skew", "1.5"]),
    (("steps", "--adapters", "5000"), ["--adapters", "5000 adapters exceed", "max_cpu_loras=4096"]),
    (("steps", "--set", "max_lora_rank=4"), ["max_lora_rank=4", "8, 16, 32, 64, 128"]),
    (("steps", "--set", "max_loras_per_batch=8"), ["--batch", "max_loras_per_batch=8"]),
    (("sweep", "--axis", "link_gb_s=8", "--plot", "{tmp}/x.xyz"), ["--plot", "unknown image format 'xyz'"]),
    (("sweep", "--axis", "link_gb_s=8", "--out", "{tmp}/afile/s.csv"), ["--out", "is a file, not a folder"]),
    (("sweep", "--axis", "link_gb_s=8", "--workers", "0"), ["--workers", "0"]),
    (("reproduce", "--requests", "8"), ["--requests 8", "max_batch=32"]),
    (("reproduce", "--out", "{tmp}/afile"), ["--out", "afile"]),
    (("reproduce", "--out", "{tmp}/afile/r"), ["--out", "is a file, not a folder"]),
    (("simulate", "--out", "{tmp}/afile/x"), ["--out", "afile", "is a file, not a folder"]),
    (("simulate", "--out", "{tmp}/afile"), ["--out", "afile"]),
    (("area", "--out", "{tmp}/afile/x"), ["--out", "afile", "is a file, not a folder"]),
    (("boost", "--requests", "0"), ["--requests", "0"]),
    (("boost", "--pool-requests", "x"), ["--pool-requests", "'x'"]),
])
def test_the_new_options_refuse_bad_input_in_one_line(args, named, tmp_path):
    (tmp_path / "afile").write_text("")
    result = invoke(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    one_error_line(result, *named)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]      # nothing written
