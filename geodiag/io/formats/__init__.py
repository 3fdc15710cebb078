"""How a checkpoint's tensors are stored: one module per format, each a
:class:`~geodiag.io.formats.tensor_store.TensorStore` over a file or folder, locally or
through ``geodiag.io.sources``' byte ranges behind a URL.

Bottom to top, each module importing only those above it in this list and
``geodiag.io.sources`` (``tests/geodiag/test_import_graph.py`` keeps it true):

- ``tensor_store``: :class:`~geodiag.io.formats.tensor_store.TensorStore`, the questions every
  store answers, and the one check of the row ids asked for;
- ``format``: :class:`~geodiag.io.formats.format.Format`, what the registry knows of one
  format (how it is found in a path, opened on disk and by URL, or why not; its files);
- ``safetensors``: a validating safetensors reader that reads only the rows asked for,
  and a small writer;
- ``gguf``: a GGUF file's tensors (rows dequantized by llama.cpp's ``gguf`` package),
  metadata and token strings, on disk or behind a URL;
- ``gguf_blob``: a GGUF file known by its magic whatever its name (a model store's blob);
- ``ollama``: Ollama's model store, a manifest read as the GGUF blob its model layer names;
- ``mlx_quantized``: the packed matrices of an MLX-quantized safetensors checkpoint
  (``mlx_lm.convert -q``), dequantized as mlx does, wrapped around a safetensors store;
- ``store``: safetensors stores, one file or the shards an index names, on disk or by URL
  (MLX's packed matrices dequantized), and their two formats;
- ``torch_pickle``: a ``torch.save`` state dict unpickled by torch with
  ``weights_only=True`` (``pytorch_model.bin``, ``*.pt``); on disk only;
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
- ``meta_llama``: Meta's own Llama layout (``params.json``, ``consolidated.00.pth``,
  ``tok_embeddings.weight``), through ``torch_pickle``'s reader;
- ``torch_training``: a training run's ``torch.save`` dict whose ``model`` entry is the
  state dict (nanoGPT's ``ckpt.pt``), read through ``torch_zip`` without torch;
- ``litgpt``: litgpt's checkpoint folder (``lit_model.pth`` beside ``model_config.yaml``),
  through ``torch_pickle``'s reader (``torch_training``'s when it wraps the state dict);
- ``torchtune``: torchtune's ``epoch_N/`` of ``model-0000I-of-0000K.bin`` shards, each
  through ``torch_pickle``'s reader;
- ``unread``: the formats recognised but not read (other DeepSpeed layouts, a DeepSpeed
  ``*model_states.pt`` given alone, sharded ``.bin``, TensorFlow, Flax, ONNX), each with the
  command that converts it or the path to pass;
- ``memory``: the same questions over a numpy array, a torch tensor or a model;
- ``tensor_names``: which tensor is the input embedding, which the output head;
- ``peft_adapter``: a PEFT adapter folder over its base, rows as PEFT merges them;
- ``registry``: :func:`~geodiag.io.formats.registry.formats`, one ``register_format``
  line per format in the order a path is tried (each module imported when a path reaches
  it), and what derives from it: ``open_store`` (a path), ``open_remote`` (a URL), the
  pre-commit hook's file pattern, the docs' table of formats.
"""
