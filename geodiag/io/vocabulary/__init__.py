"""Which rows are new and what they mean: the tokenizer, the new tokens, the SID maps and
codebooks (ours and other frameworks'), the befores their movement is measured from.

Bottom to top, each module importing only those above it in this list,
``geodiag.io.formats`` and ``geodiag.io.sources`` (``tests/geodiag/test_import_graph.py``
keeps it true):

- ``tokenizer``: token strings and added tokens from ``tokenizer.json`` (or a GGUF file's
  token list);
- ``sids``: the SID maps and codebooks of the generative-recommendation frameworks, as they
  write them (one module per dialect under a registry, recognised by content; torch files
  through ``torch_zip``'s restricted unpickler; parquet through pyarrow, the ``sids`` extra);
- ``sidecar``: ``semantic_ids.json``, the levels and codes of the new tokens (read and written);
- ``signature``: what init the sidecar's provenance says the new rows are (``init_signature``);
- ``sid_index``: a framework's SID map and codebooks matched to each other and to the
  tokenizer (levels, offset, spelling, token ids): the sidecar they amount to;
- ``new_tokens``: which rows are new, one resolver per source in precedence order, for a
  checkpoint and for rows in memory (the API and the callback name theirs in Python);
- ``codebooks``: the RQ-VAE codebooks beside the weights, per new token's code;
- ``references``: the before the new rows' movement is measured from: ``--reference``, else
  each one the files carry (the sidecar's init, PEFT's ``original_module``, a Trainer
  run's earliest ``checkpoint-N``);
"""
