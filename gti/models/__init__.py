"""Backbones: SmolLM2 from its GGUF wheel, local folders, hub ids, tiny test models."""
