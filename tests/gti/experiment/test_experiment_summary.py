"""The last screen of ``gti experiment``, from a report JSON: verdict lines per arm and
stage, the per-token counts, the recall note and the report path."""

from __future__ import annotations

import json

from gti.experiment.summary import RECALL_MIN_USERS, STUDY, load_screen, sft_stage_name


def checkpoint(path, label, status, sentence, untrained=None, rsa=0.1):
    return {
        "label": label,
        "verdict": {"status": status, "sentence": sentence, "checks": []},
        "report": {
            "path": path,
            "matrices": [
                {
                    "n_new": 24,
                    "new": {"mean_pairwise_cosine": 0.5, "centered": {"effective_rank": 9.6}},
                    "levels": [{"name": "a", "rsa": {"spearman": rsa, "p_value": 0.01}}],
                    "untrained": untrained or {"n_untrained": 0, "usage_movement": [{}]},
                }
            ],
        },
    }


def test_screen_names_each_arm_and_stage_with_its_verdict(tmp_path):
    dead = {"size": 3}
    report = {
        "checkpoints": [
            checkpoint(
                "r/init/mean",
                "mean/init",
                "fail",
                "All 24 new tokens are the same vector; ground them with `gti init --strategy gti`.",
                {"n_untrained": 24, "dead_codes": dead, "usage_movement": [{}]},
            ),
            checkpoint("r/init/gti", "gti/init", "pass", "Healthy: not collapsed.", rsa=0.4),
            checkpoint(
                "r/sft/mean",
                "mean/sft",
                "fail",
                "All 24 lie within 0.01 of one point.",
                {
                    "n_untrained": 20,
                    "barely_moved": {"size": 20},
                    "movement": {},
                    "usage_movement": [{}],
                },
            ),
        ]
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    stage = sft_stage_name(3, 4)
    names = {
        "r/init/mean": ("mean", "init"),
        "r/init/gti": ("gti", "init"),
        "r/sft/mean": ("mean", stage),
    }
    text = load_screen(path, names, n_users=20, results_md=tmp_path / "results.md")
    lines = text.splitlines()
    assert stage == "3 SFT steps x 4 (smoke)"
    assert "FAIL  mean, init" in lines and "PASS  gti, init" in lines
    assert f"FAIL  mean, {stage}" in lines
    assert "ground them with gti init --strategy gti." in text  # the sentence, code spans plain
    assert "RSA a 0.400 p=0.01" in text
    rows = {line.split("  ")[0]: line.split()[-5:] for line in lines if " of 24 " in line}
    assert rows["mean, init"] == ["24", "of", "24", "3", "-"]
    assert rows[f"mean, {stage}"] == ["20", "of", "24", "0", "20"]
    assert rows["gti, init"] == ["0", "of", "24", "0", "-"]
    assert "Recall left out" in text and STUDY in text
    assert lines[-1] == f"report: {tmp_path / 'report.html'}"


def test_enough_users_keep_recall_and_a_long_sft_is_not_a_smoke():
    from gti.experiment.summary import recall_note

    assert recall_note(RECALL_MIN_USERS, None) is None
    assert "smoke" not in sft_stage_name(8000, 128)
