"""Reading: open a checkpoint (or a matrix in memory) and hand out the new-token rows.

Bottom to top, each module importing only those above it in this list:

- ``safetensors``: a validating safetensors reader that reads only the rows asked for,
  and a small writer;
- ``store``: the :class:`~geodiag.io.store.TensorStore` questions (names, shape, dtype,
  rows) over one file, a sharded set, a torch pickle or a GGUF file;
- ``memory``: the same questions over a numpy array, a torch tensor or a model;
- ``tokenizer``: token strings and added tokens from ``tokenizer.json``;
- ``gguf``: a GGUF file's tensors (rows dequantized by llama.cpp's ``gguf`` package),
  metadata and token list, opened by ``store`` only for a ``.gguf``;
- ``mlx_quantized``: the packed matrices of an MLX-quantized safetensors checkpoint
  (``mlx_lm.convert -q``), dequantized as mlx does, wrapped around ``store``'s by it;
- ``tensor_names``: which tensor is the input embedding, which the output head;
- ``peft_adapter``: a PEFT adapter folder over its base, rows as PEFT merges them;
- ``stack``: which training stack wrote a checkpoint;
- ``options``: :class:`~geodiag.io.options.ReadOptions`, the reading flags of every command;
- ``new_tokens``: which rows are new, one resolver per source in precedence order, for a
  checkpoint and for rows in memory (the API and the callback name theirs in Python);
- ``checkpoint``: :func:`~geodiag.io.checkpoint.open_checkpoint`, tying the above together.

Nothing here imports torch or transformers (a torch pickle or tensor brings its own).
"""
