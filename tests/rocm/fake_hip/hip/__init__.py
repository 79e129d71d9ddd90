"""FAKE hip-python package for tests: no AMD GPU can exist here; `from hip import hip` lands on this."""
