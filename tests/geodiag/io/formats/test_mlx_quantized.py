"""MLX-quantized safetensors (``mlx_lm.convert -q``): words packed by hand, mlx's own
quantize/dequantize output (``mlx_data/``, written by mlx 0.32.4 and mlx-lm 0.32.2 with
``mlx_data/make_mlx_fixtures.py``), mlx itself when it is importable, then every command
on converted checkpoints: the rows measured are mlx's, bit for bit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from geodiag.cli import app
from geodiag.io.checkpoint import open_checkpoint
from geodiag.io.formats.mlx_quantized import BITS, MLXQuantizedStore, dequantize, unpack
from geodiag.io.formats.registry import open_store
from geodiag.io.formats.safetensors import SafetensorsFile, save_file
from geodiag.io.formats.store import SafetensorsStore

DATA = Path(__file__).resolve().parent / "mlx_data"
EMBED = "model.embed_tokens.weight"
BASE_VOCAB, N_NEW, HIDDEN = 300, 24, 64
# The rows of each converted embedding that expected.safetensors holds, from mx.dequantize.
EXPECTED_ROWS = np.array([*range(8), *range(BASE_VOCAB, BASE_VOCAB + N_NEW)])


def reference_unpack(words: np.ndarray, bits: int, hidden: int) -> np.ndarray:
    """(k, hidden) integers: the little-endian words' bits, LSB first, in runs of ``bits``."""
    stream = np.unpackbits(words.astype("<u4").view(np.uint8), axis=1, bitorder="little")
    return stream[:, : hidden * bits].reshape(len(words), hidden, bits) @ (1 << np.arange(bits))


def reference_pack(q: np.ndarray, bits: int) -> np.ndarray:
    """The inverse: (k, hidden) integers -> (k, hidden * bits / 32) uint32 words."""
    stream = ((q[..., None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(len(q), -1)
    return np.packbits(stream, axis=1, bitorder="little").view("<u4")


def reference_dequantize(words, scales, biases, bits: int, group: int, dtype: str) -> np.ndarray:
    """float64 arithmetic, each of mlx's two operations rounded to the scales' dtype."""
    import ml_dtypes

    t = {"F16": np.float16, "BF16": ml_dtypes.bfloat16, "F32": np.float32}[dtype]
    q = reference_unpack(words, bits, scales.shape[1] * group).astype(np.float64)
    s = np.repeat(scales.astype(np.float64), group, axis=1)
    b = np.repeat(biases.astype(np.float64), group, axis=1)
    product = (q * s).astype(t).astype(np.float64)
    return (product + b).astype(t).astype(np.float32)


# -- packing and arithmetic, by hand -------------------------------------------------


def test_unpack_4_bit_words_packed_by_hand():
    # 0..15 then 15..0: the first value in the lowest nibble of the first word.
    words = np.array([[0x76543210, 0xFEDCBA98, 0x89ABCDEF, 0x01234567]], np.uint32)
    expected = [*range(16), *range(15, -1, -1)]
    assert unpack(words, 4, 32).tolist() == [expected]


def test_unpack_values_straddling_two_words():
    # 3 bits, values j % 8: value 10 (= 2, 0b010) takes bits 30-32, its two low bits the top
    # of word 0 (0x8.......: bit 31 set) and its high bit word 1's bit 0; value 21 (= 5,
    # 0b101) takes bits 63-65 (bit 31 of word 1 set, then bits 0-1 of word 2: 0b10).
    words = np.array([[0x88FAC688, 0xC688FAC6, 0xFAC688FA]], np.uint32)
    assert unpack(words, 3, 32).tolist() == [[j % 8 for j in range(32)]]
    # 6 bits, values 0..15 in three words; 5 bits, values 31..0 in five.
    words = np.array([[0x440C2040, 0xA2481C61, 0x3CE34C2C]], np.uint32)
    assert unpack(words, 6, 16).tolist() == [list(range(16))]
    words = np.array([[0x75BE77DF, 0x3A56D7C6, 0x35CF8465, 0xC74254B6, 0x443214]], np.uint32)
    assert unpack(words, 5, 32).tolist() == [list(range(31, -1, -1))]


@pytest.mark.parametrize("bits", BITS)
def test_unpack_matches_an_independent_bit_stream(bits):
    rng = np.random.default_rng(bits)
    q = rng.integers(0, 1 << bits, size=(5, 256))
    words = reference_pack(q, bits)
    assert words.shape == (5, 256 * bits // 32)
    np.testing.assert_array_equal(unpack(words, bits, 256), q)
    np.testing.assert_array_equal(reference_unpack(words, bits, 256), q)


def test_dequantize_rounds_the_product_then_the_sum_as_mlx_does():
    # F16 scale 1 + 2^-10, q = 3, bias -3: q * scale = 3 + 1.5 * 2^-9 is a tie between two
    # F16 numbers and rounds to even, 3 + 2^-8; plus the bias: 2^-8. One rounding of the
    # exact 3 * 2^-10 would give 0.0029296875 instead (mx.dequantize on the CPU: 2^-8).
    words = np.array([[3, 0, 0, 0]], np.uint32)  # 32 values of 4 bits: 3, then zeros
    scales, biases = np.array([[1 + 2**-10]], np.float32), np.array([[-3.0]], np.float32)
    out = dequantize(words, scales, biases, bits=4, group_size=32, scale_dtype="F16")
    assert out[0, 0] == 2**-8 and out[0, 1] == -3.0
    f32 = dequantize(words, scales, biases, bits=4, group_size=32, scale_dtype="F32")
    assert f32[0, 0] == np.float32(3 * (1 + 2**-10)) - 3


# -- against mlx ---------------------------------------------------------------------


def test_every_golden_case_reads_as_mx_dequantize_computed_it():
    """mx.quantize'd rows for every bits, group size (32, 64, 128) and scales dtype, read
    through open_store: config.json's per-module entries give each its parameters."""
    store = open_store(DATA / "golden")
    assert isinstance(store, MLXQuantizedStore)
    cases = store.packed
    assert len(cases) == len(BITS) * (3 * 2 + 1)
    assert not any(n.endswith((".scales", ".biases")) for n in store.names())
    raw = SafetensorsFile(DATA / "golden" / "model.safetensors")
    for name in cases:
        case = name.removesuffix(".weight")
        bits, group = (int(x[1:]) for x in case.split("_")[:2])
        dtype = case.split("_")[2].upper()
        assert store.dtype(name) == f"U32 (MLX affine {bits}-bit, group {group}, {dtype} scales)"
        assert store.shape(name) == (1, 128)
        got = store.read_rows(name, np.array([0]), float32=True)
        expected = store.read_rows(f"{case}.expected", np.array([0]), float32=True)
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32), err_msg=case)
        words = raw.read_words(name, np.array([0]))
        np.testing.assert_array_equal(reference_pack(unpack(words, bits, 128), bits), words)
        scales, biases = raw.read(f"{case}.scales"), raw.read(f"{case}.biases")
        ref = reference_dequantize(words, scales, biases, bits, group, dtype)
        np.testing.assert_array_equal(ref, expected, err_msg=case)


def test_against_mlx_itself():
    mx = pytest.importorskip("mlx.core")
    rng = np.random.default_rng(7)
    for dtype, mx_dtype in (("F16", mx.float16), ("BF16", mx.bfloat16), ("F32", mx.float32)):
        for bits in BITS:
            for group in (32, 64, 128):
                w = rng.normal(size=(9, 384)).astype(np.float32) * rng.uniform(0.01, 3)
                q, s, b = mx.quantize(mx.array(w).astype(mx_dtype), group_size=group, bits=bits)
                ref = mx.dequantize(q, s, b, group_size=group, bits=bits).astype(mx.float32)
                got = dequantize(
                    np.array(q),
                    np.array(s.astype(mx.float32)),
                    np.array(b.astype(mx.float32)),
                    bits=bits,
                    group_size=group,
                    scale_dtype=dtype,
                )
                case = f"{dtype} {bits}-bit group {group}"
                np.testing.assert_array_equal(got, np.array(ref), err_msg=case)


def test_converted_checkpoints_read_as_mlx_dequantizes_them():
    expected = SafetensorsFile(DATA / "expected.safetensors")
    labels = {
        "mlx_q4_random": "U32 (MLX affine 4-bit, group 64, BF16 scales)",
        "mlx_q3_mean": "U32 (MLX affine 3-bit, group 32, F16 scales)",
    }
    for folder, label in labels.items():
        store = open_store(DATA / folder)
        assert store.packed == sorted(n for n in store.names() if store.dtype(n).startswith("U32"))
        assert EMBED in store.packed and f"{EMBED[:-7]}.scales" not in store.names()
        assert (store.shape(EMBED), store.dtype(EMBED)) == ((BASE_VOCAB + N_NEW, HIDDEN), label)
        want = expected.read(folder).astype(np.float32)
        got = store.read_rows(EMBED, EXPECTED_ROWS, float32=True)
        np.testing.assert_array_equal(got, want)
        assert store.read_rows(EMBED, EXPECTED_ROWS).dtype == np.float64
        np.testing.assert_array_equal(store.read_block(EMBED, 0, 8, float32=True), want[:8])


def test_only_the_rows_asked_for_are_read(monkeypatch):
    asked = []
    original = SafetensorsStore.read_words
    original_rows = SafetensorsStore.read_rows

    def words(self, name, rows):
        asked.append((name, sorted(rows.tolist())))
        return original(self, name, rows)

    def rows_(self, name, rows, float32=False):
        asked.append((name, sorted(np.asarray(rows).tolist())))
        return original_rows(self, name, rows, float32)

    monkeypatch.setattr(SafetensorsStore, "read_words", words)
    monkeypatch.setattr(SafetensorsStore, "read_rows", rows_)
    open_store(DATA / "mlx_q4_random").read_rows(EMBED, np.array([310, 2]))
    module = EMBED.removesuffix(".weight")
    sidecars = [(f"{module}.{k}", [2, 310]) for k in ("scales", "biases")]
    assert asked == [(EMBED, [2, 310]), *sidecars]


# -- the commands ----------------------------------------------------------------------


def reference_embedding(folder: Path) -> np.ndarray:
    """The whole converted embedding, dequantized by this file's reference functions."""
    f = SafetensorsFile(folder / "model.safetensors")
    q = json.loads((folder / "config.json").read_text())["quantization"]
    module = EMBED.removesuffix(".weight")
    words = f.read_words(EMBED, np.arange(BASE_VOCAB + N_NEW))
    scales, biases = f.read(f"{module}.scales"), f.read(f"{module}.biases")
    dtype = f.info(f"{module}.scales").dtype
    return reference_dequantize(words, scales, biases, q["bits"], q["group_size"], dtype)


def test_metrics_of_a_converted_checkpoint_are_those_of_its_dequantized_rows(tmp_path):
    """geodiag metrics on the MLX folder = geodiag metrics on an F32 copy of the reference
    rows (same tokenizer): every figure, to the last bit."""
    folder = DATA / "mlx_q4_random"
    plain = tmp_path / "plain"
    plain.mkdir()
    save_file({EMBED: reference_embedding(folder)}, plain / "model.safetensors")
    shutil.copy(folder / "tokenizer.json", plain / "tokenizer.json")
    config = json.loads((folder / "config.json").read_text())
    del config["quantization"], config["quantization_config"]
    (plain / "config.json").write_text(json.dumps(config))
    runs = [CliRunner().invoke(app, ["metrics", str(p), "--json"]) for p in (folder, plain)]
    assert [r.exit_code for r in runs] == [0, 0], runs[0].output
    mlx, ref = (json.loads(r.output) for r in runs)
    assert mlx["store"].endswith("MLX-quantized")
    assert mlx["matrices"][0]["dtype"] == "U32 (MLX affine 4-bit, group 64, BF16 scales)"
    for m, folder_ in ((mlx["matrices"][0], folder), (ref["matrices"][0], plain)):
        m.pop("dtype")
        assert m.pop("file") == str(folder_ / "model.safetensors")
    assert mlx["matrices"] == ref["matrices"]
    ids = open_checkpoint(folder).new.ids
    assert ids.tolist() == list(range(BASE_VOCAB, BASE_VOCAB + N_NEW))


def test_check_fails_a_mean_initialized_block_and_passes_a_random_one():
    mean = CliRunner().invoke(app, ["check", str(DATA / "mlx_q3_mean"), "--permutations", "10"])
    assert mean.exit_code == 1, mean.output
    # One point, but 3-bit quantization moved it off the mean: identical, not "at their init".
    assert "24 of 24 new rows are untrained (1 group(s) of rows identical" in mean.output
    rand = CliRunner().invoke(app, ["check", str(DATA / "mlx_q4_random"), "--permutations", "10"])
    assert rand.exit_code == 0, rand.output


def test_drift_reports_what_quantization_did():
    before, after = DATA / "full_precision", DATA / "mlx_q4_random"
    args = ["drift", str(before), str(after), "--permutations", "50"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    (rep,) = json.loads(r.output)
    q = rep["quantization"]
    assert q["dtype"] == "U32 (MLX affine 4-bit, group 64, BF16 scales)"
    train = SafetensorsFile(before / "model.safetensors").read(EMBED)[BASE_VOCAB:]
    deployed = SafetensorsFile(DATA / "expected.safetensors").read("mlx_q4_random")[8:]
    err = np.linalg.norm(deployed - train, axis=1) / np.linalg.norm(train, axis=1)
    np.testing.assert_allclose(q["per_token_relative_error"], err, rtol=1e-12)
    assert q["identical_pairs"] == 0
    text = CliRunner().invoke(app, args)
    assert "export to U32 (MLX affine 4-bit, group 64, BF16 scales): relative error" in text.output


# -- what is refused, in one line ----------------------------------------------------


def _converted_copy(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "edited"
    shutil.copytree(DATA / "mlx_q4_random", folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _one_line_error(folder: Path) -> str:
    r = CliRunner().invoke(app, ["check", str(folder), "--permutations", "10"])
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: "), line
    return line


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda c: c["quantization"].update(bits=8),
            "packs 32 values per row (8 words at 8 bits) but 'model.embed_tokens.scales' "
            "has 1 groups of 64 (= 64): not 8-bit, group 64 as config.json says",
        ),
        (
            lambda c: c["quantization"].update(group_size=32),
            "has 1 groups of 32 (= 32): not 4-bit, group 32",
        ),
        (
            lambda c: c["quantization"].update({"model.embed_tokens": {"bits": 5}}),
            "packs 8 words per row, which is no whole number of 5-bit values",
        ),
        (
            lambda c: c["quantization"].update(bits=7),
            "quantized with bits=7, group_size=64; MLX's affine mode packs bits 2, 3, 4, 5, 6, 8",
        ),
        (
            lambda c: c["quantization"].update(mode="mxfp4"),
            "is quantized in MLX's 'mxfp4' mode; geodiag reads MLX's affine mode only, not "
            "mxfp4, mxfp8, nvfp4",
        ),
        (
            lambda c: [c.pop("quantization"), c.pop("quantization_config")],
            "is U32 with 'model.embed_tokens.scales' beside it (MLX's quantized layout), but no "
            "config.json beside it says how it was packed",
        ),
        (
            lambda c: c["quantization"].update({"model.embed_tokens": False}),
            "'quantization' says 'model.embed_tokens' is not quantized",
        ),
    ],
)
def test_inconsistent_packing_exits_2_in_one_line(tmp_path, edit, problem):
    folder = _converted_copy(tmp_path, edit)
    line = _one_line_error(folder)
    assert problem in line, line
    assert line.startswith(f"error: {folder}/"), line


# -- layouts the converter can write, built here with the reference packer ------------


def _write_mlx(folder: Path, tensors: dict[str, np.ndarray], config: dict) -> Path:
    """An MLX-layout folder: U32 words through the safetensors library's own writer."""
    st = pytest.importorskip("safetensors.numpy")
    folder.mkdir(parents=True)
    st.save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(DATA / "mlx_q4_random" / "tokenizer.json", folder / "tokenizer.json")
    return folder


def _quantized(rng, name: str, bits: int, group: int, dtype) -> dict[str, np.ndarray]:
    n_groups = HIDDEN // group
    q = rng.integers(0, 1 << bits, size=(BASE_VOCAB + N_NEW, HIDDEN))
    scales = rng.uniform(0.001, 0.01, size=(len(q), n_groups)).astype(dtype)
    biases = rng.uniform(-0.05, 0.0, size=(len(q), n_groups)).astype(dtype)
    module = name.removesuffix(".weight")
    return {name: reference_pack(q, bits), f"{module}.scales": scales, f"{module}.biases": biases}


def test_an_untied_quantized_head_and_a_per_module_override(tmp_path):
    """The embedding 8-bit in groups of 32 (its own entry), the head at the top-level 4-bit,
    group 64; F32 and F16 scales. Both matrices are analyzed, each read as packed."""
    rng = np.random.default_rng(0)
    packing = {EMBED: (8, 32, "F32"), "lm_head.weight": (4, 64, "F16")}
    tensors = {"model.norm.weight": np.ones(HIDDEN, np.float16)}
    for name, (bits, group, dtype) in packing.items():
        tensors |= _quantized(rng, name, bits, group, {"F32": np.float32, "F16": np.float16}[dtype])
    embed = {"group_size": 32, "bits": 8}
    quantization = {"group_size": 64, "bits": 4, "model.embed_tokens": embed}
    config = {"hidden_size": HIDDEN, "tie_word_embeddings": False, "quantization": quantization}
    folder = _write_mlx(tmp_path / "untied", tensors, config)
    ckpt = open_checkpoint(folder)
    assert [(m.role, m.tensor, m.dtype) for m in ckpt.matrices] == [
        ("input", EMBED, "U32 (MLX affine 8-bit, group 32, F32 scales)"),
        ("output", "lm_head.weight", "U32 (MLX affine 4-bit, group 64, F16 scales)"),
    ]
    for m in ckpt.matrices:
        module = m.tensor.removesuffix(".weight")
        scales, biases = tensors[f"{module}.scales"], tensors[f"{module}.biases"]
        ref = reference_dequantize(tensors[m.tensor], scales, biases, *packing[m.tensor])
        got = ckpt.read_rows(m, ckpt.new.ids, float32=True)
        np.testing.assert_array_equal(got, ref[ckpt.new.ids])
    r = CliRunner().invoke(app, ["metrics", str(folder), "--json"])
    assert r.exit_code == 0, r.output
    assert [m["role"] for m in json.loads(r.output)["matrices"]] == ["input", "output"]


def test_microscaling_scales_are_named_and_refused(tmp_path):
    """mxfp4 as mlx-lm writes it: U8 scales, no biases; the config may not even say so."""
    rng = np.random.default_rng(1)
    words = reference_pack(rng.integers(0, 16, size=(BASE_VOCAB + N_NEW, HIDDEN)), 4)
    scales = rng.integers(120, 130, size=(BASE_VOCAB + N_NEW, HIDDEN // 32)).astype(np.uint8)
    tensors = {EMBED: words, "model.embed_tokens.scales": scales}
    config = {"hidden_size": HIDDEN, "quantization": {"group_size": 32, "bits": 4}}
    line = _one_line_error(_write_mlx(tmp_path / "mx", tensors, config))
    assert "quantized in MLX's mxfp4/mxfp8/nvfp4 (U8 scales) mode" in line, line


def test_the_light_path_stays_light_on_mlx_checkpoints():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from geodiag.cli import app\n"
        f"res = CliRunner().invoke(app, ['check', {str(DATA / 'mlx_q4_random')!r}])\n"
        "assert res.exit_code == 0, res.output\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'mlx'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
