#!/usr/bin/env python3
"""web_speed.py - the planner's searches in the page: liboomless compiled to WebAssembly (make web),
called in headless Chromium through the page's own entry points (window.oomlessPage.call, the
functions app.js calls: oomw_plan, oomw_table), each the median of RUNS calls in the loaded page
(performance.now() around the call). Exits 1 when a search is over its limit.

    bench/speed/web_speed.py [BUILD] [RUNS]      (after make web; BUILD defaults to build)

The searches: the page's own first view (plan and table), then issue 34's searches, whose first
row took 4.9 s in the page (oomw_plan of the first; limit 100 ms each), and the table of all 31
catalog GPUs (limit 500 ms, as native).
"""
import functools
import http.server
import json
import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "web"))
import cdp  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 11
SITE = os.path.join(BUILD, "web")
ALL31 = ("rtx-2060,rtx-2080-ti,rtx-3060,rtx-3080,rtx-3090,rtx-4060-ti,rtx-4070-ti,rtx-4080,"
         "rtx-4090,rtx-5090,quadro-rtx-6000,rtx-a4000,rtx-a5000,rtx-a6000,rtx-6000-ada,t4,"
         "v100-16gb,v100-32gb,a10,a10g,l4,l40s,a100-40gb,a100-80gb,h100-pcie,h100-sxm,h100-nvl,"
         "h200,b200,mi250,mi300x")
H100 = {"model": "llama-3.1-8b", "gpu": "h100", "seq": "2048", "gpus": "8", "allow": "all"}
CASES = [
    (None, "oomw_plan", "the page's first view", "page"),
    (None, "oomw_table", "the page's first view", "table"),
    (100, "oomw_plan", "llama-3.1-8b h100 x8 --allow all, effective 8192",
     dict(H100, **{"target-effective-batch": "8192"})),
    (100, "oomw_plan", "the same, --checkpointing-variants all --packing padding-free, 4096",
     dict(H100, **{"target-effective-batch": "4096", "checkpointing-variants": "all",
                   "packing": "padding-free"})),
    (100, "oomw_plan", "qwen3-0.6b h100 x8 --allow all --checkpointing-variants all, 8192",
     dict(H100, **{"model": "qwen3-0.6b", "target-effective-batch": "8192",
                   "checkpointing-variants": "all"})),
    (500, "oomw_table", "llama-3.1-8b, 31 GPUs, --allow all --checkpointing-variants all, 4096",
     {"model": "llama-3.1-8b", "seq": "2048", "target-effective-batch": "4096", "allow": "all",
      "checkpointing-variants": "all", "gpus": ALL31}),
]


class Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = dict(http.server.SimpleHTTPRequestHandler.extensions_map,
                          **{".wasm": "application/wasm"})

    def log_message(self, *a):
        pass


def timed(b, fn, options):
    """median ms of RUNS calls, the exit status and the candidates of the last"""
    js = ("(() => { const o = %s === 'page' ? window.oomlessPage.options().plan : "
          "%s === 'table' ? window.oomlessPage.options().table : %s; const t = []; let r; "
          "for (let i = 0; i < %d; i++) { const a = performance.now(); "
          "r = window.oomlessPage.call(%s, o); t.push(performance.now() - a); } "
          "t.sort((x, y) => x - y); let c = null; try { const d = JSON.parse(r.out); "
          "c = d.search ? d.search.candidates : d.tables ? d.tables[0].rows.reduce("
          "(s, x) => s + x.search.candidates, 0) : null; } catch (e) {} "
          "return JSON.stringify({ms: t[t.length >> 1], max: t[t.length - 1], rc: r.rc, c: c}); })()"
          % (json.dumps(options), json.dumps(options), json.dumps(options), RUNS, json.dumps(fn)))
    return json.loads(b.eval(js))


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=SITE))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    over = 0
    try:
        with cdp.Browser() as b:
            b.navigate(f"http://127.0.0.1:{server.server_address[1]}/")
            b.wait_for("document.body && document.body.dataset.readyMs", timeout=60)
            print("== the page's searches (WebAssembly, headless Chromium, median of %d calls)"
                  % RUNS)
            for limit, fn, what, options in CASES:
                r = timed(b, fn, options)
                bad = limit is not None and (r["ms"] > limit or r["rc"] not in (0, 1))
                over += bad
                print(f"{'OVER ' if bad else ''}{r['ms']:8.1f} ms (max {r['max']:.1f}"
                      f"{', limit %d' % limit if limit else ''}) {fn} {what}: exit {r['rc']}, "
                      f"{r['c']} configurations estimated")
    finally:
        server.shutdown()
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
