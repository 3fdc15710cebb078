"""Recommendation baselines on the project's split: most-popular, last-item transitions, SASRec."""
