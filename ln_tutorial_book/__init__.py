"""The code of the book: the kernels the tutorial pages teach, and the benchmark that measures them.

:mod:`ln_tutorial_book.plain` holds the forward and backward kernels of the core
pages, written to be read (it is also the standalone script the pages offer for
download); :mod:`ln_tutorial_book.reference` the pure-PyTorch layer norm, in float64,
that tests and pages compare the kernels with; :mod:`ln_tutorial_book.bench` is the GB/s benchmark harness, with the
results recorded by it and by ``tools/`` in ``data/`` (``benchmarks/``,
``host_cost/``, ``train_step/``). The library itself is :mod:`ln_tutorial`, which
never imports this package.
"""
