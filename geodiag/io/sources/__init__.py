"""Where a checkpoint's bytes come from: local files (and what a path turns out to hold:
a Hub cache, a Git LFS pointer), byte ranges on disk or behind a URL, object stores, the
Hub's token, a URL's folder and its small files fetched, and the reading flags.

Bottom to top, each module importing only those above it in this list (and the
foundation below ``geodiag.io``; ``tests/geodiag/test_import_graph.py`` keeps it true):

- ``layouts``: where a folder keeps its weights (the Hub cache, a DCP or DeepSpeed folder),
  and the layouts named but not read (Git LFS pointers, other frameworks);
- ``byte_ranges``: a file's bytes by ranges, on disk or behind an HTTP(S) URL (retried,
  nearby ranges read with one request): what the safetensors, GGUF and ``torch.save``
  archive readers read through; a folder's files asked for by name (``Folder``), never
  listed, on disk or behind a URL;
- ``hub_auth``: the Hub's token for ``hf://``, found where huggingface_hub finds it (``HF_TOKEN``,
  the file of ``hf auth login``), and what a 401 or 403 of the Hub means (gated, a wrong token);
- ``object_store``: the same over an ``s3://`` or ``gs://`` bucket (fsspec's s3fs or
  gcsfs, the ``s3`` and ``gs`` extras; one backend table, one read and retry path);
- ``remote``: a checkpoint folder behind an ``https://``, ``hf://``, ``s3://`` or ``gs://`` URL:
  where its files are (``RemoteFolder``, an object store's folder), its small files
  fetched into a temporary folder; the weights are opened by ``formats``;
- ``options``: :class:`~geodiag.io.sources.options.ReadOptions`, the reading flags of every command;
"""
