"""``ln-benchmark-results``: the recorded benchmark tables, read at build time.

The Benchmarks page shows what ``ln_tutorial.bench.load_results()`` finds in
``ln_tutorial/data/benchmarks/*.csv`` (the latest run of each GPU), as the
Triton-style tables of :func:`ln_tutorial.bench.format_table`, the LLM-shape
tables of :func:`ln_tutorial.bench.llm_table` and a provenance line, so the
page cannot drift from the shipped data. With no recorded results (or no
bench module) it says so instead of failing the build.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _literal(text: str) -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = "none"
    return block


class BenchmarkResults(SphinxDirective):
    has_content = False

    def run(self):
        try:
            from ln_tutorial import bench
        except ImportError as exc:  # the module is part of the package; be explicit if it is missing
            return [nodes.paragraph(text=f"The benchmark module could not be imported ({exc}).")]
        rows = bench.load_results()
        if not rows:
            return [
                nodes.paragraph(
                    text="No recorded results are shipped with this version yet. On a GPU, "
                    "python -m ln_tutorial.bench measures them and writes a CSV into "
                    "ln_tutorial/data/benchmarks/."
                )
            ]
        out = []
        by_gpu: dict[str, list[dict]] = {}
        for row in rows:
            by_gpu.setdefault(str(row.get("gpu", "unknown GPU")), []).append(row)
        for gpu, gpu_rows in sorted(by_gpu.items()):
            run = bench.latest_run(gpu_rows)
            section = nodes.section(ids=[nodes.make_id(f"results-{gpu}")])
            section += nodes.title(text=gpu)
            section += nodes.paragraph(text=bench.provenance(run))
            for mode in ("forward", "backward"):
                if not any(r.get("mode") == mode for r in run):
                    continue
                section += nodes.rubric(text=f"{mode}: GB/s by row length N")
                section += _literal(bench.format_table(run, mode))
                section += nodes.rubric(text=f"{mode}: LLM shapes, % of copy bandwidth")
                section += _literal(bench.llm_table(run, mode))
            out.append(section)
        return out


def setup(app):
    app.add_directive("ln-benchmark-results", BenchmarkResults)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
