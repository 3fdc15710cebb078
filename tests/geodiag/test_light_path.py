"""The read-and-measure path must not import torch or transformers (a CI gate starts fast)."""

import subprocess
import sys

from geodiag_fixtures import base_rows, planted_new_rows, write_checkpoint


def test_check_imports_neither_torch_nor_transformers(tmp_path):
    root = write_checkpoint(tmp_path / "ck", planted_new_rows("random", base_rows()))
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from geodiag.cli import app\n"
        f"res = CliRunner().invoke(app, ['check', {str(root)!r}, '--permutations', '10'])\n"
        "res2 = CliRunner().invoke(app, ['metrics', " + repr(str(root)) + ", '--json'])\n"
        "assert res.exit_code == 0 and res2.exit_code == 0, (res.output, res2.output)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
