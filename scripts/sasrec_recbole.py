"""SASRec (RecBole 1.2.1) on the project's leave-one-out split -> per-user top-20 lists.

Runs in its own venv (scripts/sasrec-venv.sh): RecBole 1.2.1 does not import with the
project's pinned numpy 2.x (``np.float_`` in ``Config.compatibility_settings``; ray
2.6.3, which its quick_start imports, uses ``np.bool8``), so that venv pins
numpy 1.26.4, pandas < 2.3, scipy < 1.14 and setuptools < 81 (ray imports
pkg_resources). torch 2.13's ``torch.load`` defaults to ``weights_only=True``, which
cannot read RecBole's own checkpoint (``Trainer.evaluate(load_best_model=True)``
fails): the best epoch's weights are therefore loaded here from the file this run
wrote, with ``weights_only=False``.

Input: the benchmark files written by ``gti baselines --export-recbole DIR``
(``<name>.{train,valid,test}.inter``: user, history (<= 20 items), target; exactly
the LM arms' examples). Training: RecBole's SASRec defaults (2 layers, 2 heads,
hidden 64, dropout 0.5, CE loss over all items), Adam lr 1e-3, batch 256, early
stopping on validation NDCG@10 (patience ``--patience`` epochs). Ranking: every
item RecBole knows (those of the three files) by ``full_sort_predict``, nothing
excluded (as the LM arms), top 20, written in the ``gti.rankings`` format.

    python scripts/sasrec_recbole.py DATA_DIR NAME OUT_DIR [--epochs 50] [--patience 5]
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch


def rows_of(path):
    lines = Path(path).read_text().splitlines()[1:]
    return [line.split("\t") for line in lines]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("name")
    ap.add_argument("out")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--patience", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import recbole
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.data.interaction import Interaction
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data_dir = Path(args.data_dir).resolve()
    os.chdir(out)  # RecBole writes log_tensorboard/ into the working directory
    cfg = {
        "data_path": str(data_dir.parent),
        "benchmark_filename": ["train", "valid", "test"],
        "alias_of_item_id": ["item_id_list"],
        "load_col": None,
        "USER_ID_FIELD": "user_id",
        "ITEM_ID_FIELD": "item_id",
        "TIME_FIELD": None,
        "MAX_ITEM_LIST_LENGTH": 20,
        "epochs": args.epochs,
        "train_batch_size": 256,
        "eval_batch_size": 256,
        "learning_rate": 1e-3,
        "loss_type": "CE",
        "train_neg_sample_args": None,
        "eval_args": {"split": None, "group_by": "user", "order": "TO", "mode": "full"},
        "metrics": ["Recall", "NDCG"],
        "topk": [10, 20],
        "valid_metric": "NDCG@10",
        "device": "cpu",
        "use_gpu": False,
        "seed": args.seed,
        "reproducibility": True,
        "stopping_step": args.patience,
        "checkpoint_dir": str(out / "saved"),
        "show_progress": False,
        "worker": 0,
    }
    config = Config(model="SASRec", dataset=args.name, config_dict=cfg)
    ds = create_dataset(config)
    train, valid, _test = data_preparation(config, ds)
    model = SASRec(config, train.dataset)
    trainer = Trainer(config, model)
    t0 = time.time()
    best_score, best_valid = trainer.fit(train, valid, saved=True, show_progress=False)
    fit_s = time.time() - t0
    # Our own file, written by this run: safe to unpickle.
    state = torch.load(trainer.saved_model_file, map_location="cpu", weights_only=False)
    model.load_state_dict(state["state_dict"])
    model.eval()

    tokens = ds.field2id_token["item_id"]  # internal id -> item id ("[PAD]" at 0)
    ids = ds.field2token_id["item_id"]
    for split in ("valid", "test"):
        rows = rows_of(data_dir / f"{args.name}.{split}.inter")
        ranked_rows = []
        for start in range(0, len(rows), 256):
            chunk = rows[start : start + 256]
            hist = torch.zeros(len(chunk), 20, dtype=torch.long)
            length = torch.zeros(len(chunk), dtype=torch.long)
            for i, (_u, h, _t) in enumerate(chunk):
                items = [ids[x] for x in h.split(" ")][-20:]
                hist[i, : len(items)] = torch.tensor(items)
                length[i] = len(items)
            inter = Interaction({"item_id_list": hist, "item_length": length})
            with torch.no_grad():
                scores = model.full_sort_predict(inter).view(len(chunk), -1)  # (B, n_items)
            scores[:, 0] = -float("inf")  # padding
            top = scores.topk(20, dim=1).indices.tolist()
            for (u, _h, t), row in zip(chunk, top, strict=True):
                ranked_rows.append([u, t, [str(tokens[i]) for i in row]])
        ranked_rows.sort(key=lambda r: r[0])
        head = {
            "format": "gti.rankings",
            "format_version": 1,
            "split": split,
            "top": 20,
            "source": {
                "model": "sasrec",
                "library": f"recbole {recbole.__version__}",
                "max_epochs": args.epochs,
                "patience": args.patience,
                "best_valid_ndcg@10": best_score,
                "fit_seconds": round(fit_s, 1),
                "seed": args.seed,
                "threads": args.threads,
            },
        }
        text = (
            json.dumps(head)[:-1]
            + ', "users": [\n'
            + ",\n".join(json.dumps(r) for r in ranked_rows)
            + "\n]}\n"
        )
        tmp = out / f".{split}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / f"{split}.rankings.json")
    print(json.dumps({"best_valid": {k: float(v) for k, v in best_valid.items()}, "fit_s": fit_s}))


if __name__ == "__main__":
    main()
