"""The one boundary to NVML.

Only :mod:`exporter.nvml.library` imports ``pynvml`` (from nvidia-ml-py); only
:mod:`exporter.nvml.boundary` calls it (its MIG reads, :mod:`exporter.nvml.mig_reads`, through
the boundary's one call). Everything above gets plain Python values or a typed
:class:`~exporter.nvml.results.Failure` — never an ``NVMLError`` — and never sees bytes. The
library object is injected: the real ``pynvml`` module by default, or the fake NVML of
:mod:`exporter.simulate.fake_nvml`, which implements the same functions, so the collector code
that runs under test and in the demo is the code that runs on a GPU node.
"""
