"""Medians per round of each variant in a run139 log, and each variant's range against the package.

    python tools/runs/run139/summarize.py tools/runs/run139/two_tiles.log
"""

import collections
import re
import sys

readings = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    match = re.match(r"round \d (\S+) \S+(?: \[.*\])?: (.*)", line)
    if match:
        for part in match.group(2).split("; "):
            name, value = re.match(r"(.+?) (\d+)(?: \(|$)", part).groups()
            readings[match.group(1)][name].append(int(value))
for size, variants in readings.items():
    package = variants["package"]
    cells = []
    for name, values in variants.items():
        cell = f"{name} {'/'.join(map(str, values))}"
        if name not in ("copy", "package"):
            ratios = [a / b - 1 for a, b in zip(values, package)]
            cell += f" [{min(ratios):+.1%} .. {max(ratios):+.1%}]"
        cells.append(cell)
    print(size, " | ".join(cells))
