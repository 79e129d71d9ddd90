"""Importers of results measured outside Tunebase (Llaminar trainer CSVs, rocprof captures)."""
