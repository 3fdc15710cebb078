"""GTI as a drop-in stage: ground a framework's own SID tokens (LC-Rec, MiniOneRec,
OpenOneRec, semantic-ids-llm) over any local causal LM, and write what that framework's SFT
continues from. ``gti init --sids FILE --items FILE`` (:func:`gti.dropin.run.run_dropin`)."""
