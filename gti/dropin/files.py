"""What a drop-in output folder holds beside the model (import-light: no torch), so that
the CLI and the tests name them from one place."""

# Where the tokens came from: the framework's index and codebooks, by path and digest.
SOURCE_FILENAME = "gti_sid_source.json"
# The held-out probe before and after grounding, and `geodiag check` of the result.
CHECKS_FILENAME = "gti_checks.json"
CHECKS_TEXT_FILENAME = "gti_checks.txt"  # the same, as `gti init` prints it
