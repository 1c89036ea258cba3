"""Facts about a process: thread variables, native pools, frameworks, live threads, provenance.

The library registry (:mod:`parinfo.process.libraries`) is the one place that knows a library;
every other module asks it.
"""
