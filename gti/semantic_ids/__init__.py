"""Semantic IDs: content embeddings -> RQ-VAE codes -> collision-free SIDs."""
