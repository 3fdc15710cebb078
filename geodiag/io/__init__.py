"""Reading: open a checkpoint (or a matrix in memory) and hand out the new-token rows.

Bottom to top, each module importing only those above it in this list
(``tests/geodiag/test_import_graph.py`` keeps it true):

- ``layouts``: where a folder keeps its weights (the Hub cache, a DCP or DeepSpeed folder),
  and the layouts named but not read (Git LFS pointers, other frameworks);
- ``tensor_store``: :class:`~geodiag.io.tensor_store.TensorStore`, the questions every
  store answers, and the one check of the row ids asked for;
- ``byte_ranges``: a file's bytes by ranges, on disk or behind an HTTP(S) URL (retried,
  nearby ranges read with one request): what the safetensors, GGUF and ``torch.save``
  archive readers read through; a folder's files asked for by name (``Folder``), never
  listed, on disk or behind a URL;
- ``object_store``: the same over an ``s3://`` or ``gs://`` bucket (fsspec's s3fs or
  gcsfs, the ``s3`` and ``gs`` extras; one backend table, one read and retry path);
- ``safetensors``: a validating safetensors reader that reads only the rows asked for,
  and a small writer;
- ``tokenizer``: token strings and added tokens from ``tokenizer.json``;
- ``gguf``: a GGUF file's tensors (rows dequantized by llama.cpp's ``gguf`` package),
  metadata and token list, opened by ``store`` only for a ``.gguf``;
- ``mlx_quantized``: the packed matrices of an MLX-quantized safetensors checkpoint
  (``mlx_lm.convert -q``), dequantized as mlx does, wrapped around a safetensors store by ``store``;
- ``torch_zip``: a ``torch.save`` archive without torch: its ``data.pkl`` unpickled with only
  the globals a caller allows (inert stand-ins), each storage's values by byte range, from
  any ``ByteSource`` (the archive's two ends read in one call);
- ``dcp``: a torch.distributed.checkpoint folder (FSDP2's ``dcp.save``, a Trainer's
  ``pytorch_model_fsdp_0/``): its ``.metadata`` unpickled with only DCP's own classes, the
  rows asked for read by byte range from the ``.distcp`` shards that hold them, on disk or
  behind a URL (a ``byte_ranges.Folder``);
- ``zero``: a DeepSpeed ZeRO checkpoint (ZeRO-1/2/3 ``global_stepN/`` partitions, a universal
  folder): the fp32 rows ``zero_to_fp32`` consolidates, read by byte range from the ranks
  that hold them, its pickles unpickled with only DeepSpeed's own classes;
- ``store``: those questions over one file, a sharded set, a torch pickle, a GGUF file, a
  DCP folder or a DeepSpeed ZeRO folder
  (``open_store``: the one place that picks the store for a path);
- ``remote``: a checkpoint folder behind an ``https://``, ``hf://``, ``s3://`` or ``gs://`` URL: its
  small files fetched into a temporary folder, its weights (safetensors, a GGUF file, a PEFT
  adapter's, a DCP folder's shards) read by byte ranges;
- ``memory``: the same questions over a numpy array, a torch tensor or a model;
- ``tensor_names``: which tensor is the input embedding, which the output head;
- ``peft_adapter``: a PEFT adapter folder over its base, rows as PEFT merges them;
- ``stack``: which training stack wrote a checkpoint;
- ``options``: :class:`~geodiag.io.options.ReadOptions`, the reading flags of every command;
- ``sids``: the SID maps and codebooks of the generative-recommendation frameworks, as they
  write them (one module per dialect under a registry, recognised by content; torch files
  through ``torch_zip``'s restricted unpickler; parquet through pyarrow, the ``sids`` extra);
- ``sidecar``: ``semantic_ids.json``, the levels and codes of the new tokens (read and written);
- ``sid_index``: a framework's SID map and codebooks matched to each other and to the
  tokenizer (levels, offset, spelling, token ids): the sidecar they amount to;
- ``new_tokens``: which rows are new, one resolver per source in precedence order, for a
  checkpoint and for rows in memory (the API and the callback name theirs in Python);
- ``codebooks``: the RQ-VAE codebooks beside the weights, per new token's code;
- ``references``: the before the new rows' movement is measured from: ``--reference``, else
  each one the files carry (the sidecar's init, PEFT's ``original_module``, a Trainer
  run's earliest ``checkpoint-N``);
- ``checkpoint``: :func:`~geodiag.io.checkpoint.open_checkpoint`, tying the above together;
- ``usage``: how often the training data (``--data``) and the chat template feed each new
  token.

Nothing here imports torch or transformers (a torch pickle or tensor brings its own).
"""
