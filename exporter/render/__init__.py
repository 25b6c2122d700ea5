"""The render step: one snapshot (and its shares) -> metric families -> exposition bytes.

:mod:`~exporter.render.families` builds the GPU families, :mod:`~exporter.render.label_text` owns
every label of them (built once and cached), :mod:`~exporter.render.exposition` writes the
text and OpenMetrics formats.
"""
