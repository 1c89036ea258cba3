"""The registry's entries: one instance of each library family, in registry order.

The families are classes in :mod:`~parinfo.process.library_runtimes` (OpenMP runtimes, oneTBB),
:mod:`~parinfo.process.library_blas` (MKL, OpenBLAS, BLIS, FlexiBLAS, Accelerate),
:mod:`~parinfo.process.library_modules` (numexpr, torch, Inductor, numba, Python, parinfo),
:mod:`~parinfo.process.library_learners` (XGBoost, LightGBM),
:mod:`~parinfo.process.library_frames` (Arrow, Polars, DuckDB) and
:mod:`~parinfo.process.library_inference` (ONNX Runtime, tokenizers, OpenCV) and
:mod:`~parinfo.process.library_ml` (TensorFlow, JAX), subclasses of
:class:`~parinfo.process.library_base.Library`. Adding a library: write its class beside its kin
and put one instance of it here (and its variables in :mod:`parinfo.process.thread_vars` when it
brings its own).
"""
from __future__ import annotations

from parinfo.process.library_base import Library
from parinfo.process.library_blas import Accelerate, Blis, FlexiBLAS, Mkl, OpenBLAS
from parinfo.process.library_frames import Arrow, DuckDB, Polars
from parinfo.process.library_inference import OnnxRuntime, OpenCV, Tokenizers
from parinfo.process.library_learners import LightGBM, XGBoost
from parinfo.process.library_ml import Jax, TensorFlow
from parinfo.process.library_modules import Inductor, Interpreter, Numba, Numexpr, ParinfoRuntime, Torch
from parinfo.process.library_runtimes import GnuOpenMP, IntelOpenMP, LlvmOpenMP, OneTBB

# Registry order matters: it is the order of a variable's readers within each group.
RECORDS: tuple[Library, ...] = (
    GnuOpenMP(), IntelOpenMP(), LlvmOpenMP(),
    Mkl(), OpenBLAS(), Blis(), FlexiBLAS(), Accelerate(), OneTBB(),
    Numexpr(), Torch(), Inductor(), Numba(), XGBoost(), LightGBM(),
    Arrow(), Polars(), DuckDB(),
    OnnxRuntime(), Tokenizers(), OpenCV(),
    TensorFlow(), Jax(),
    Interpreter(), ParinfoRuntime(),
)
