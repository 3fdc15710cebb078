"""gti: semantic IDs, vocabulary extension, initialization (mean/random/GTI), SFT, evaluation."""
