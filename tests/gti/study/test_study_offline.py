"""The GPU script's preflight: what is missing on an offline machine, named."""

from __future__ import annotations

from gti.data import movielens
from gti.models import smollm2
from gti.study.offline import offline_inputs_missing


def test_empty_cache_names_both_inputs_and_a_filled_one_nothing(tmp_path):
    missing = offline_inputs_missing(tmp_path)
    assert len(missing) == 2
    assert str(movielens.dataset_dir(tmp_path)) in missing[0]
    assert str(smollm2.model_dir(tmp_path)) in missing[1]
    data = movielens.dataset_dir(tmp_path)
    data.mkdir(parents=True)
    (data / movielens.INTER_FILE).write_text("x")
    model = smollm2.model_dir(tmp_path)
    model.mkdir(parents=True)
    (model / smollm2.MARKER).write_text("{}")
    assert offline_inputs_missing(tmp_path) == []
