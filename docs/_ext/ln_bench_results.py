"""Directives that read the recorded benchmark CSV at build time.

* ``ln-benchmark-results`` (Benchmarks page): what ``ln_tutorial_book.bench.load_results()``
  finds in ``ln_tutorial_book/data/benchmarks/*.csv`` (the current result of each
  provider and point, per GPU), as the Triton-style tables of
  :func:`ln_tutorial_book.bench.format_table` and :func:`ln_tutorial_book.bench.llm_table`,
  with a provenance line and the tolerance a live rebuild is held to.
* ``ln-performance-summary`` (performance page): one table per direction, the median
  GB/s of each provider per shape class (:func:`ln_tutorial_book.bench.class_summary`)
  against the datasheet bandwidth, the copy of the same size among them.
* ``ln-host-time`` (performance page): GPU time against host-included time at the
  short rows and the shapes with fewer rows, where both are recorded.
* ``ln-host-cost`` (performance page): ln_tutorial's host-included time over torch's by
  way of calling (``ln_tutorial_book/data/host_cost/*.csv``, from ``tools/host_cost.py``), and
  training steps with either norm (``ln_tutorial_book/data/train_step/*.csv``, from
  ``tools/train_step.py``).

So the pages cannot drift from the shipped data. With no recorded results (or no
bench module) they say so instead of failing the build.

Translation: the sentences and captions these directives write are not in the
page's source, so Sphinx's gettext builder cannot extract them. They are
marked with :func:`_` here and translated through this extension's own small
catalog, ``docs/_ext/locale/<lang>/LC_MESSAGES/ln_bench_results.po`` (read
directly, no ``.mo`` needed), for the edition's ``language``. The generated
nodes are marked ``translatable = False`` so that the page catalogs never
contain them. Numbers, provider names and shapes stay as they are.
``tests/test_i18n.py`` checks that this catalog has every ``_()`` string of
this file, translated.
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


def _table(header: list[str], body: list[list[str]]) -> nodes.table:
    table = nodes.table()
    group = nodes.tgroup(cols=len(header))
    table += group
    for _unused in header:
        group += nodes.colspec(colwidth=1)
    head, rows = nodes.thead(), nodes.tbody()
    for cells, parent in [(header, head)] + [(row, rows) for row in body]:
        row_node = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph(text=cell)
            row_node += entry
        parent += row_node
    group += head
    group += rows
    return table


#: The shape classes of ``bench.SHAPE_CLASSES``, translated here.
CLASS_NAMES = {
    "short rows (N ≤ 4096)": _("short rows (N ≤ 4096)"),
    "wide rows (4096 < N < 16384)": _("wide rows (4096 < N < 16384)"),
    "LLM shapes, rows ≤ 16 KB": _("LLM shapes, rows ≤ 16 KB"),
    "LLM shapes, rows ≥ 32 KB": _("LLM shapes, rows ≥ 32 KB"),
}
MODE_NAMES = {"forward": _("Forward pass"), "backward": _("Backward pass")}


class _BenchDirective(SphinxDirective):
    has_content = False

    def tr(self, message: str, **fields) -> str:
        """``message`` in the edition's language, with ``fields`` filled in."""
        language = self.env.config.language
        if language not in _CATALOGS:
            _CATALOGS[language] = load_catalog(language)
        return _CATALOGS[language].get(message, message).format(**fields)

    def measured(self, rows: list[dict]) -> str:
        """Where, with what and when ``rows`` were measured."""

        def values(key):
            return ", ".join(dict.fromkeys(str(r.get(key, "?")) for r in rows))

        return self.tr(_("Measured on {gpu} with PyTorch {torch} and Triton {triton}, on {date}, at commit {commit}."),
                       gpu=values("gpu"), torch=values("torch"), triton=values("triton"), date=values("date"),
                       commit=values("commit"))  # fmt: skip

    def _join(self, *sentences: str) -> str:
        out = ""
        for sentence in sentences:
            out += ("" if not out or out.endswith("。") else " ") + sentence  # no space after a full-width stop
        return out

    def provenance(self, rows: list[dict]) -> str:
        """:meth:`measured` (one sentence per run where the rows come from several), and the
        bandwidths the benchmark rows are read against: the datasheet's and the 1 GB copy's."""
        from ln_tutorial_book import bench

        found = bench.runs(rows)
        if len(found) == 1:
            sentences = [self.measured(rows)]
        else:
            sentences = [self.tr(_("These results come from {count} runs, each timing only some providers; "
                                   "compare providers within one run."), count=len(found))]  # fmt: skip
            for (commit, _date, _copy), providers in found.items():
                sentences.append(self.tr(_("{providers}: {measured}"), providers=", ".join(providers),
                                         measured=self.measured([r for r in rows if r["commit"] == commit])))
        copy, peak = rows[0].get("copy_gbps"), bench.datasheet_gbps(rows[0].get("gpu"))
        if copy and peak:
            sentences.append(self.tr(_("The GPU's memory bandwidth is {peak:.0f} GB/s by its datasheet, the "
                                       "ceiling; a device-to-device copy of 1 GB reaches {copy:.0f} GB/s, "
                                       "{share:.0f}% of it."), peak=peak, copy=float(copy),
                                     share=bench.copy_share(rows)))  # fmt: skip
        elif copy:
            sentences.append(self.tr(_("Device-to-device copy of 1 GB on the same GPU: {copy:.0f} GB/s."),
                                     copy=float(copy)))
        return self._join(*sentences)

    def timers(self, rows: list[dict]) -> str:
        """Which timer the rows' GB/s come from."""
        kinds = {r.get("timer") for r in rows}
        sentences = {
            "graph": _("GB/s from GPU time: the replay of a CUDA graph of many calls, divided by the number "
                   "of calls: no host time is in it."),
            "events": _("GB/s from GPU time: CUDA events around each call (providers a graph cannot capture)."),
            "do_bench": _("GB/s from triton.testing.do_bench (L2 flushed before each call; these rows carry no "
                          "separate host-included time)."),
        }  # fmt: skip
        return _sentences(*(self.tr(sentences[k]) for k in ("graph", "events", "do_bench") if k in kinds))

    def results(self):
        """The current rows per GPU, or a paragraph saying why there are none."""
        try:
            from ln_tutorial_book import bench
        except ImportError as exc:  # the book's package is installed with the library; be explicit if it is missing
            return None, [_fixed(nodes.paragraph(text=self.tr(_("The benchmark module could not be imported ({exc})."),
                                                               exc=exc)))]  # fmt: skip
        found = bench.by_gpu(bench.load_results())
        if not found:
            para = nodes.paragraph()
            para += nodes.Text(self.tr(_("No recorded results are shipped with this version yet. On a GPU, ")))
            para += nodes.literal(text="python -m ln_tutorial_book.bench")
            para += nodes.Text(self.tr(_(" measures them and writes a CSV file that can be copied into ")))
            para += nodes.literal(text="ln_tutorial_book/data/benchmarks/")
            para += nodes.Text(self.tr(_(".")))
            return None, [_fixed(para)]
        return bench, list(found.items())


class BenchmarkResults(_BenchDirective):
    def run(self):
        bench, found = self.results()
        if bench is None:
            return found
        captions = {
            ("forward", "gpu"): _("Forward pass: GB/s by row length N, from the median GPU time"),
            ("backward", "gpu"): _("Backward pass: GB/s by row length N, from the median GPU time"),
            ("forward", "host"): _("Forward pass: GB/s by row length N, from the median host-included time"),
            ("backward", "host"): _("Backward pass: GB/s by row length N, from the median host-included time"),
            ("forward", "do_bench"): _("Forward pass: GB/s by row length N (median)"),
            ("backward", "do_bench"): _("Backward pass: GB/s by row length N (median)"),
            ("forward", "llm"): _("Forward pass: shapes of language models, % of the datasheet bandwidth"),
            ("backward", "llm"): _("Backward pass: shapes of language models, % of the datasheet bandwidth"),
        }
        out = [_fixed(nodes.paragraph(text=self.tr(
            _("The noise rule: within one run, two medians of GPU time less than {noise:.0f}% apart are a tie. "
              "A run on another machine of the same model may differ by more (torch.compile most: its "
              "autotuning may pick other kernels on each compile); python -m ln_tutorial_book.bench --compare "
              "FILE lists the points that differ by more than {noise:.0f}% in GPU time or {host:.0f}% in "
              "host-included time, which follows the host's CPU and load."),
            noise=100 * bench.NOISE, host=100 * bench.TOLERANCE["host"])))]  # fmt: skip
        for gpu, run in found:
            section = nodes.section(ids=[nodes.make_id(f"results-{gpu}")])
            section += nodes.title(text=gpu)
            section += nodes.paragraph(text=self.provenance(run) + " " + self.timers(run))
            for mode in ("forward", "backward"):
                # a record may hold only some of the sets: a table for each set it has
                sweep = [r for r in run if r.get("mode") == mode and (r["M"], r["N"]) in bench.SETS["tutorial"]]
                for figure in ("gpu", "host"):
                    if any(bench.gbps(r, figure) for r in sweep):
                        timed = any(r.get("gpu_us_p50") for r in sweep)
                        caption = captions[mode, "do_bench" if figure == "gpu" and not timed else figure]
                        section += nodes.rubric(text=self.tr(caption))
                        section += _literal(bench.format_table(run, mode, figure=figure))
                if any(r.get("mode") == mode and (r["M"], r["N"]) in bench.SETS["llm"] for r in run):
                    section += nodes.rubric(text=self.tr(captions[mode, "llm"]))
                    section += _literal(bench.llm_table(run, mode))
            out.append(_fixed(section))
        return out


class PerformanceSummary(_BenchDirective):
    """Median GB/s per shape class and provider, the copy of the same size, the datasheet bandwidth,
    and ln_tutorial's and the copy's share of it."""

    def run(self):
        bench, found = self.results()
        if bench is None:
            return found
        out = []
        for gpu, rows in found:
            out.append(nodes.paragraph(text=self.provenance(rows) + " " + self.timers(rows)))
            for mode in ("forward", "backward"):
                summary = bench.class_summary(rows, mode)
                if not summary:
                    continue
                providers = [p for p in dict.fromkeys(p for c in summary for p in c["gbps"]) if p != bench.COPY]
                header = ([self.tr(MODE_NAMES[mode]), self.tr(_("shapes"))] + providers
                          + [self.tr(_("copy of the same size")), self.tr(_("datasheet")),
                             self.tr(_("ln_tutorial, % of the datasheet")), self.tr(_("copy, % of the datasheet"))])
                body = []
                for c in summary:
                    peak = c["datasheet"]

                    def share(value):
                        return f"{100 * value / peak:.0f}%" if value and peak else "-"

                    ours, copy = c["gbps"].get("ln_tutorial"), c["gbps"].get(bench.COPY)
                    body.append([self.tr(CLASS_NAMES.get(c["shape_class"], c["shape_class"])), str(c["shapes"])]
                                + [f"{c['gbps'][p]:.0f}" if p in c["gbps"] else "-" for p in providers]
                                + [f"{copy:.0f}" if copy else "-", f"{peak:.0f}" if peak else "-",
                                   share(ours), share(copy)])  # fmt: skip
                out.append(_table(header, body))
        return [_fixed(node) for node in out]


class HostTime(_BenchDirective):
    """Median GPU time and host-included time per call (µs) where the host may set the pace: the
    short rows of the sweep and the shapes with fewer rows; and how often ours is at or below torch's."""

    def run(self):
        bench, found = self.results()
        if bench is None:
            return found
        out = []
        for gpu, rows in found:
            shapes = [s for s in bench.SETS["tutorial"] if s[1] <= 4096] + bench.SETS["small"]
            timed = [r for r in rows if r.get("host_us_p50") and r.get("gpu_us_p50") and (r["M"], r["N"]) in shapes
                     and r["provider"] != bench.COPY]  # fmt: skip
            if not timed:
                out.append(nodes.paragraph(text=self.tr(
                    _("The results recorded for {gpu} carry no host-included time yet."), gpu=gpu)))  # fmt: skip
                continue
            for mode in ("forward", "backward"):
                cells = {(r["provider"], r["M"], r["N"]): r for r in timed if r["mode"] == mode}
                providers = list(dict.fromkeys(p for p, _, _ in cells))  # those timed in this direction
                here = [s for s in shapes if any((p, *s) in cells for p in providers)]
                if not here:
                    continue
                header = [self.tr(MODE_NAMES[mode]) + ", M × N"] + [
                    self.tr(_("{provider}: GPU / host-included µs"), provider=p) for p in providers]
                body = [[f"{m} × {n}"] + [f"{cells[p, m, n]['gpu_us_p50']:.1f} / {cells[p, m, n]['host_us_p50']:.1f}"
                                          if (p, m, n) in cells else "-" for p in providers]
                        for m, n in here]  # fmt: skip
                out.append(_table(header, body))
            out.append(nodes.paragraph(text=self._versus_torch(timed)))
            out.append(nodes.paragraph(text=self.provenance(timed)))
        return [_fixed(node) for node in out]


    def _versus_torch(self, timed):
        """How many of the points (shape and direction) give ln_tutorial a host-included time at or below torch's."""
        host = {(r["provider"], r["mode"], r["M"], r["N"]): float(r["host_us_p50"]) for r in timed}
        points = [k[1:] for k in host if k[0] == "torch" and ("ln_tutorial", *k[1:]) in host]
        below = sum(host[("ln_tutorial", *k)] <= host[("torch", *k)] for k in points)
        return self.tr(_("ln_tutorial's median host-included time is at or below torch's at {below} of these "
                         "{points} points."), below=below, points=len(points))  # fmt: skip


class HostCost(_BenchDirective):
    """ln_tutorial's host-included time per call over torch's, by way of calling (``tools/host_cost.py``),
    and a training step with either norm (``tools/train_step.py``), from the files recorded with them."""

    def run(self):
        bench, found = self.results()
        if bench is None:
            return found
        data, out = bench.RESULTS_DIR.parent, []
        for path in sorted((data / "host_cost").glob("*.csv")):
            out += self._host_cost(_read_rows(path))
        files = [_read_rows(path) for path in sorted((data / "train_step").glob("*.csv"))]
        for rows in files:
            out += self._train_step(rows)
        out += self._compiled_spread([_norms_by_step(rows) for rows in files])
        return [_fixed(node) for node in out]

    def _compiled_spread(self, files):
        """The range of the compiled rows' ratios over every file (each as :func:`_norms_by_step` groups it):
        the same kernels run with either norm there (a test of the package checks the graphs), so the range
        is the host's work before each call (the guards Dynamo checks) and the measurement's own spread,
        which the range of the compiled rows' A/A checks shows, in the files that have them."""
        ratios = sorted(float(norms["ln_tutorial"]["vs_torch_p50"]) for steps in files for key, norms in steps.items()
                        if key[1] == "compiled" and len(norms) == 2)  # fmt: skip
        if len(ratios) < 2:
            return []
        text = self.tr(_("In the compiled rows both models run the same kernels, so their ratios, from {low} to "
                         "{high} over the files above, differ only by the host's work before each call (the "
                         "guards Dynamo checks) and by the spread of this measurement."),
                       low=f"{ratios[0]:.3f}", high=f"{ratios[-1]:.3f}")  # fmt: skip
        equal = sorted(float(r["aa_p50"]) for steps in files for key, norms in steps.items() if key[1] == "compiled"
                       for r in norms.values() if r.get("aa_p50"))  # fmt: skip
        if equal:
            text = _sentences(text, self.tr(_("Two copies of one compiled model, equal work, come out from {low} to "
                                              "{high} (the A/A columns)."), low=f"{equal[0]:.3f}", high=f"{equal[-1]:.3f}"))  # fmt: skip
        return [nodes.paragraph(text=text)]

    def _host_cost(self, rows):
        import statistics

        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            groups.setdefault((r["via"], r["amp"], r["dtype"]), []).append(r)
        header = [self.tr(_("call")), self.tr(_("autocast")), self.tr(_("input")), self.tr(_("forward")),
                  self.tr(_("forward and backward")), self.tr(_("forward and backward, without C++"))]  # fmt: skip
        body = []
        for (via, amp, dtype), group in groups.items():
            cells = []
            for mode, column in (("forward", "ours_us"), ("step", "ours_us"), ("step", "python_us")):
                ratios = [float(r[column]) / float(r["torch_us"]) for r in group if r["mode"] == mode]
                cells.append(f"{statistics.median(ratios):.2f} ({max(ratios):.2f})")
            body.append([via, self.tr(_("none")) if amp == "none" else amp, dtype, *cells])
        shapes = list(dict.fromkeys(f"{r['M']} × {r['N']}" for r in rows))
        below = sum(float(r["ours_us"]) <= float(r["torch_us"]) for r in rows)
        text = self.tr(_("ln_tutorial's host-included time per call divided by torch's: the median over {count} "
                         "shapes ({shapes}), the highest in brackets. Below 1, ln_tutorial's call is the shorter; "
                         "it is at or below torch's in {below} of {cases} cases."),
                       count=len(shapes), shapes=", ".join(shapes), below=below, cases=len(rows))  # fmt: skip
        return [_table(header, body), nodes.paragraph(text=text), nodes.paragraph(text=self.measured(rows))]

    def _train_step(self, rows):
        steps = _norms_by_step(rows)
        header = [self.tr(_("model")), self.tr(_("mode")), self.tr(_("layers × width")), self.tr(_("batch × sequence")),
                  self.tr(_("torch: ms per step")), self.tr(_("ln_tutorial: ms per step")), self.tr(_("ratio"))]  # fmt: skip
        body = [[model, self.tr(_(mode)), f"{layers} × {width}", f"{batch} × {seq}", norms["torch"]["ms_p50"],
                 norms["ln_tutorial"]["ms_p50"], norms["ln_tutorial"]["vs_torch_p50"]]
                for (model, mode, layers, width, batch, seq, amp), norms in steps.items()]  # fmt: skip
        text = self.tr(_("ms per step: the median over rounds in which every model takes one step, in a random order, "
                         "each norm's two models averaged. Ratio: the median over rounds of ln_tutorial's step over "
                         "torch's in the same round."))  # fmt: skip
        if all("aa_p50" in r for r in rows):  # recorded since the tool writes the A/A check
            header.append(self.tr(_("A/A: torch, ln_tutorial")))
            for line, norms in zip(body, steps.values()):
                line.append(f'{norms["torch"]["aa_p50"]}, {norms["ln_tutorial"]["aa_p50"]}')
            text = _sentences(text, self.tr(_("A/A: the same median for each norm's second model over its first, "
                                              "two copies of the same model: how far apart equal work comes out.")))  # fmt: skip
        return [_table(header, body), nodes.paragraph(text=text), nodes.paragraph(text=self.measured(rows))]


def _sentences(*texts: str) -> str:
    """Sentences in a row: a space between them, none after a full-width mark (a Chinese sentence)."""
    return "".join(t if i == 0 or texts[i - 1][-1:] in "。）：；" else " " + t for i, t in enumerate(texts))


def _norms_by_step(rows: list[dict]) -> dict[tuple, dict[str, dict]]:
    """A training-step file's rows by (model, mode, layers, width, batch, seq, amp), then by norm."""
    steps: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        key = (r["model"], r["mode"], r["layers"], r["width"], r["batch"], r["seq"], r["amp"])
        steps.setdefault(key, {})[r["norm"]] = r
    return steps


def _read_rows(path: Path) -> list[dict]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def setup(app):
    app.add_directive("ln-benchmark-results", BenchmarkResults)
    app.add_directive("ln-performance-summary", PerformanceSummary)
    app.add_directive("ln-host-time", HostTime)
    app.add_directive("ln-host-cost", HostCost)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
