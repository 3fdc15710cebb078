"""Reading: open a checkpoint (or a matrix in memory) and hand out the new-token rows.

Floors, bottom to top, each module importing only those above it in this list (a
subpackage's own ``__init__`` lists its modules in order;
``tests/geodiag/test_import_graph.py`` keeps both true):

- ``sources``: where the bytes come from: local files, byte ranges, object stores, the Hub,
  a URL's small files; the reading flags;
- ``formats``: how the tensors are stored, one module per format (safetensors, GGUF, MLX,
  ``torch.save`` archives, DCP, ZeRO, PEFT adapters, arrays in memory), opened locally and
  behind a URL;
- ``vocabulary``: which rows are new and what they mean: tokenizer, new tokens, SID maps,
  sidecar, codebooks, references;
- ``stack``: which training stack wrote a checkpoint;
- ``assembly``: the one chain every route builds a checkpoint through (config and
  tokenizer, matrices, SID maps, new tokens, codebooks, notes), on files or in memory;
- ``in_memory``: a model, tensor or array in memory opened for the assembly, with the
  files of the folder it was loaded from;
- ``checkpoint``: :func:`~geodiag.io.checkpoint.open_checkpoint`, tying the above together;
- ``usage``: how often the training data (``--data``) and the chat template feed each new
  token.

Nothing here imports torch or transformers (a torch pickle or tensor brings its own).
"""
