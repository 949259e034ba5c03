#!/usr/bin/env python3
"""web_load.py - how big the web page is and how fast it shows its first result.

usage: bench/web_load.py [BUILD] [RUNS]     (after make web; BUILD defaults to build, RUNS to 10)
       bench/web_load.py --sizes [BUILD]   the sizes alone, raw and gzip -9 (docs/web.md shows them)

Sizes: each file a browser downloads for the calculator, raw, gzip -9 and (when the brotli
command is installed, and not with --sizes) brotli -q 11. Load: the page served from 127.0.0.1
by Python's http.server to headless Chromium (tests/web/cdp.py), a fresh profile each run (empty cache); the time from
navigation start to the first estimate and plan drawn (performance.now() when the page's first
update ends: module download, compile, data, two library calls, drawing). Median and max of RUNS.
"""
import functools, gzip, http.server, os, shutil, statistics, subprocess, sys, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "web"))
import cdp  # noqa: E402

SIZES_ONLY = sys.argv[1:2] == ["--sizes"]
ARGS = sys.argv[2:] if SIZES_ONLY else sys.argv[1:]
BUILD = os.path.abspath(ARGS[0] if ARGS else os.path.join(ROOT, "build"))
RUNS = int(ARGS[1]) if len(ARGS) > 1 else 10
SITE = os.path.join(BUILD, "web")
FILES = ["index.html", "style.css", "app.js", "oomless.js", "oomless.wasm", "accuracy.json"]


class Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = dict(http.server.SimpleHTTPRequestHandler.extensions_map, **{".wasm": "application/wasm"})

    def log_message(self, *a):
        pass


def sizes():
    brotli = None if SIZES_ONLY else shutil.which("brotli")
    tot = [0, 0, 0]
    print(f"{'file':<16}{'bytes':>10}{'gzip -9':>10}" + ("" if SIZES_ONLY else f"{'brotli':>10}"))
    for f in FILES:
        data = open(os.path.join(SITE, f), "rb").read()
        gz = len(gzip.compress(data, 9))
        br = len(subprocess.run([brotli, "-q", "11", "-c"], input=data, capture_output=True).stdout) if brotli else 0
        for i, v in enumerate((len(data), gz, br)):
            tot[i] += v
        print(f"{f:<16}{len(data):>10}{gz:>10}" + ("" if SIZES_ONLY else f"{br if brotli else '-':>10}"))
    print(f"{'total':<16}{tot[0]:>10}{tot[1]:>10}" + ("" if SIZES_ONLY else f"{tot[2] if brotli else '-':>10}"))


def load_times():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=SITE))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    times = []
    try:
        for _ in range(RUNS):
            with cdp.Browser() as b:
                b.navigate(url)
                times.append(int(b.wait_for("document.body && document.body.dataset.readyMs", timeout=30)))
    finally:
        server.shutdown()
    print(f"first result after (ms, {RUNS} cold loads): median {statistics.median(times):.0f}, "
          f"max {max(times)}; all: {times}")


if __name__ == "__main__":
    sizes()
    if not SIZES_ONLY:
        load_times()
