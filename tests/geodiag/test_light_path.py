"""The read-and-measure path must not import torch or transformers (README, DESIGN.md: a
CI gate starts fast), nor scipy (the Gram route uses numpy's own syrk; rsa.py writes
out its ranks to avoid scipy.stats).
numpy.ma (np.median and np.unique import it on first use) and the drift metrics stay
out of it too: start-up is most of a gate's time."""

import subprocess
import sys

from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint


def test_check_imports_neither_torch_nor_transformers_nor_scipy(tmp_path):
    from geodiag.metrics import geometry

    rows = base_rows()
    assert rows.size < geometry._SVD_MAX_ELEMENTS  # a matrix that needs no scipy
    root = write_checkpoint(tmp_path / "ck", planted_new_rows("random", rows))
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from geodiag.cli import app\n"
        f"res = CliRunner().invoke(app, ['check', {str(root)!r}, '--permutations', '10'])\n"
        "res2 = CliRunner().invoke(app, ['metrics', " + repr(str(root)) + ", '--json'])\n"
        "assert res.exit_code == 0 and res2.exit_code == 0, (res.output, res2.output)\n"
        "heavy = ('torch', 'transformers', 'scipy')\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & set(heavy))\n"
        "heavy += [m for m in ('numpy.ma', 'geodiag.metrics.drift') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_gate_on_a_safetensors_folder_imports_no_other_formats_reader(tmp_path):
    """The registry imports a format's module when a path reaches it (registry.formats):
    a safetensors folder is found before the training layouts, so a gate on it never
    loads their readers; nor the JUnit and SARIF writers it was not asked for."""
    root = write_checkpoint(tmp_path / "ck", planted_new_rows("random", base_rows()))
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from geodiag.cli import app\n"
        f"res = CliRunner().invoke(app, ['check', {str(root)!r}, '--permutations', '10'])\n"
        "assert res.exit_code == 0, res.output\n"
        "unused = ['geodiag.io.formats.' + m for m in ('dcp', 'zero', 'torch_training',"
        " 'meta_llama', 'unread')] + ['geodiag.outputs.sarif', 'xml.etree.ElementTree']\n"
        "loaded = [m for m in unused if m in sys.modules]\n"
        "found = 'geodiag.io.formats.store' in sys.modules\n"
        "print(loaded, found)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True", out.stdout
