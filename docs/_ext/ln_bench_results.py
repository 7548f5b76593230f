"""``ln-benchmark-results``: the recorded benchmark tables, read at build time.

The Benchmarks page shows what ``ln_tutorial.bench.load_results()`` finds in
``ln_tutorial/data/benchmarks/*.csv`` (the latest run of each GPU), as the
Triton-style tables of :func:`ln_tutorial.bench.format_table`, the LLM-shape
tables of :func:`ln_tutorial.bench.llm_table` and a provenance line, so the
page cannot drift from the shipped data. With no recorded results (or no
bench module) it says so instead of failing the build.

Translation: the sentences and captions this directive writes are not in the
page's source, so Sphinx's gettext builder cannot extract them. They are
marked with :func:`_` here and translated through this extension's own small
catalog, ``docs/_ext/locale/<lang>/LC_MESSAGES/ln_bench_results.po`` (read
directly, no ``.mo`` needed), for the edition's ``language``. The generated
nodes are marked ``translatable = False`` so that the page catalogs never
contain them. The tables themselves (numbers, provider names, N) stay as they
are. ``tests/test_i18n.py`` checks that this catalog has every ``_()``
string of this file, translated.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

CATALOG_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "ln_bench_results"


def _(message: str) -> str:
    """Mark a message for this extension's catalog (translated in :meth:`BenchmarkResults.tr`)."""
    return message


def load_catalog(language: str | None) -> dict[str, str]:
    """msgid -> msgstr of this extension's catalog for ``language`` (translated, not fuzzy)."""
    if not language or language == "en":
        return {}
    path = CATALOG_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"
    if not path.exists():
        return {}
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        catalog = read_po(f)
    return {m.id: m.string for m in catalog if m.id and m.string and not m.fuzzy}


_CATALOGS: dict[str | None, dict[str, str]] = {}


def _fixed(node):
    """Generated text: keep it out of the page catalogs (it is translated here)."""
    for sub in node.findall(nodes.TextElement):
        sub["translatable"] = False
    return node


def _literal(text: str) -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = "none"
    return block


class BenchmarkResults(SphinxDirective):
    has_content = False

    def tr(self, message: str, **fields) -> str:
        """``message`` in the edition's language, with ``fields`` filled in."""
        language = self.env.config.language
        if language not in _CATALOGS:
            _CATALOGS[language] = load_catalog(language)
        return _CATALOGS[language].get(message, message).format(**fields)

    def provenance(self, run: list[dict]) -> str:
        r = run[0]
        return self.tr(
            _("Measured on {gpu} with PyTorch {torch} and Triton {triton}, on {date}, at commit {commit}. "
              "Device-to-device copy on the same GPU: {copy:.0f} GB/s."),
            gpu=r.get("gpu", "?"), torch=r.get("torch", "?"), triton=r.get("triton", "?"),
            date=r.get("date", "?"), commit=r.get("commit", "?"), copy=float(r.get("copy_gbps", 0) or 0),
        )  # fmt: skip

    def run(self):
        try:
            from ln_tutorial import bench
        except ImportError as exc:  # the module is part of the package; be explicit if it is missing
            return [_fixed(nodes.paragraph(text=self.tr(_("The benchmark module could not be imported ({exc})."),
                                                        exc=exc)))]
        rows = bench.load_results()
        if not rows:
            para = nodes.paragraph()
            para += nodes.Text(self.tr(_("No recorded results are shipped with this version yet. On a GPU, ")))
            para += nodes.literal(text="python -m ln_tutorial.bench")
            para += nodes.Text(self.tr(_(" measures them and writes a CSV file into ")))
            para += nodes.literal(text="ln_tutorial/data/benchmarks/")
            para += nodes.Text(self.tr(_(".")))
            return [_fixed(para)]
        captions = {
            ("forward", "sweep"): _("Forward pass: GB/s by row length N (median)"),
            ("backward", "sweep"): _("Backward pass: GB/s by row length N (median)"),
            ("forward", "llm"): _("Forward pass: shapes of language models, % of the copy bandwidth"),
            ("backward", "llm"): _("Backward pass: shapes of language models, % of the copy bandwidth"),
        }
        out = []
        by_gpu: dict[str, list[dict]] = {}
        for row in rows:
            by_gpu.setdefault(str(row.get("gpu", "unknown GPU")), []).append(row)
        for gpu, gpu_rows in sorted(by_gpu.items()):
            run = bench.latest_run(gpu_rows)
            section = nodes.section(ids=[nodes.make_id(f"results-{gpu}")])
            section += nodes.title(text=gpu)
            section += nodes.paragraph(text=self.provenance(run))
            for mode in ("forward", "backward"):
                if not any(r.get("mode") == mode for r in run):
                    continue
                section += nodes.rubric(text=self.tr(captions[mode, "sweep"]))
                section += _literal(bench.format_table(run, mode))
                section += nodes.rubric(text=self.tr(captions[mode, "llm"]))
                section += _literal(bench.llm_table(run, mode))
            out.append(_fixed(section))
        return out


def setup(app):
    app.add_directive("ln-benchmark-results", BenchmarkResults)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
