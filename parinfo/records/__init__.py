"""Records and their JSON: what travels between the layers, declared once.

:mod:`record` makes a class a dataclass without compiling its methods per class; :mod:`source` is the
record of where a value came from (:class:`~parinfo.records.source.Source`); :mod:`convert` is the one
converter between records and JSON (strict for trusted input, bounded and lenient for hostile input);
:mod:`payload` reads the fields of a JSON-ready payload by hand, never raising; :mod:`schema` makes the
JSON Schema of a record's JSON from the same declarations. Bottom layer: usable
from every layer, imports nothing of parinfo but :mod:`parinfo.errors`.
"""
