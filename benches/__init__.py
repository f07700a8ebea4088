"""rush's benchmark suite: rush and its peers measured side by side, the same way, in one run.

Run it with ``make bench`` (sets everything up) or ``python -m benches --help``.
The method is written out in benches/README.md; in short, for every scenario,
repeat and server: start the server pinned to one core, wait until it answers,
check the response is right, warm up, load it with wrk pinned to the other
core, record rps, latency percentiles, server CPU per request and peak RSS,
then stop it. Repeats are interleaved between servers and the median is kept.

Modules:

- `benches.scenarios`: what is measured (declarative records, grouped);
- `benches.servers`: who is measured (command lines, where they are installed);
- `benches.wrk`: building wrk command lines and parsing their output;
- `benches.httpcheck`: the correctness check made before any timing;
- `benches.processes`: starting, watching (CPU, RSS) and stopping servers;
- `benches.runner`: one measured run, and the interleaved schedule of runs;
- `benches.results`: medians, verdicts and the results JSON;
- `benches.report`: the tables written into benches/README.md;
- `benches.chart`: PNG charts (needs matplotlib: runs in the bench venv);
- `benches.environment`: machine and tool versions recorded with results;
- `benches.catalog`: the catalog group's key spread, databases and answer checks, and the misses count;
- `benches.tools`: installs wrk, the Debian packages, the bench venv and the peer servers;
- `benches.nginx`: nginx's config, generated for each run;
- `benches.rust_peers`: building the actix-web and hyper peers of benches/rust/;
- `benches.apps`: the endpoints for each interface, peer launchers, and the static site.

Importing this package uses the standard library only, so it works from
rush's own ``.venv`` and from the tests without any benchmark tool installed.
"""

from pathlib import Path

BENCHES_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCHES_DIR.parent
