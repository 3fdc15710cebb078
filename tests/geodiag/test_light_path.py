"""The read-and-measure path must not import torch or transformers (README, DESIGN.md: a
CI gate starts fast), nor scipy (the Gram route uses numpy's own syrk; rsa.py writes
out its ranks to avoid scipy.stats).
numpy.ma (np.median and np.unique import it on first use) and the drift metrics stay
out of it too: start-up is most of a gate's time."""

import json
import subprocess
import sys

from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint


def _loaded_after(commands: list[list[str]], modules: list[str]) -> tuple[list[str], set[str]]:
    """(those of ``modules`` loaded, the top-level packages loaded) in a fresh process
    after it ran each of ``commands`` (geodiag CLI arguments), each exiting 0."""
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from geodiag.cli import app\n"
        f"for args in {commands!r}:\n"
        "    res = CliRunner().invoke(app, args)\n"
        "    assert res.exit_code == 0, res.output\n"
        f"loaded = [m for m in {modules!r} if m in sys.modules]\n"
        "print(json.dumps([loaded, sorted({m.split('.')[0] for m in sys.modules})]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, packages = json.loads(out.stdout)
    return loaded, set(packages)


def test_check_imports_neither_torch_nor_transformers_nor_scipy(tmp_path):
    from geodiag.metrics import geometry

    rows = base_rows()
    assert rows.size < geometry._SVD_MAX_ELEMENTS  # a matrix that needs no scipy
    root = str(write_checkpoint(tmp_path / "ck", planted_new_rows("random", rows)))
    commands = [["check", root, "--permutations", "10"], ["metrics", root, "--json"]]
    loaded, packages = _loaded_after(commands, ["numpy.ma", "geodiag.metrics.drift"])
    assert loaded == [] and not packages & {"torch", "transformers", "scipy"}


def test_a_gate_on_a_safetensors_folder_imports_no_other_formats_reader(tmp_path):
    """The registry imports a format's module when a path reaches it (registry.formats):
    a safetensors folder is found before the training layouts, so a gate on it never
    loads their readers; nor the JUnit and SARIF writers it was not asked for."""
    root = str(write_checkpoint(tmp_path / "ck", planted_new_rows("random", base_rows())))
    formats = ("dcp", "zero", "torch_training", "meta_llama", "unread", "store")
    unused = [f"geodiag.io.formats.{m}" for m in formats]
    unused += ["geodiag.outputs.sarif", "xml.etree.ElementTree"]
    loaded, _ = _loaded_after([["check", root, "--permutations", "10"]], unused)
    assert loaded == ["geodiag.io.formats.store"]  # the one format it holds
