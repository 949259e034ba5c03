#!/usr/bin/env python3
"""test_web.py - the web page (make web) in headless Chromium, against the oomless CLI.

usage: python3 tests/web/test_web.py [BUILD]      (make check-web; BUILD defaults to build)

Serves BUILD/web on 127.0.0.1, drives Chromium through the DevTools protocol (tests/web/cdp.py),
chooses settings as a person would (selects, inputs, a chosen and a dropped config.json, keys),
reads the verdict and the numbers from the page and checks them against `oomless estimate` and
`oomless plan` run with the same settings: the JSON documents byte for byte, the sizes and shares
as the CLI's text output writes them, the exit statuses. Screenshots go to BUILD/web-screenshots/.
"""
import functools
import gzip
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import cdp  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else
                        os.path.join(ROOT, "build"))
SITE = os.path.join(BUILD, "web")
OOMLESS = os.path.join(BUILD, "oomless")
SHOTS = os.path.join(BUILD, "web-screenshots")
# the CLI without a GPU and without the user's own files, as the page is
TMP = tempfile.mkdtemp(prefix="oomless-web-test-")
CLI_ENV = {k: v for k, v in os.environ.items() if k not in ("OOMLESS_GPU", "GPU_PROFILE", "OOMLESS_BATCH_SIZE",
                                                            "CUDA_VISIBLE_DEVICES")}
CLI_ENV.update(XDG_CONFIG_HOME=os.path.join(TMP, "config"), XDG_CACHE_HOME=os.path.join(TMP, "cache"),
               OOMLESS_DATA_DIR=os.path.join(ROOT, "data"), OOMLESS_NVML_LIBRARY=os.path.join(TMP, "no-nvml.so"))

COMPONENT_LABELS = {  # the page's rows and the CLI's text rows
    "weights": "weights", "gradients": "gradients", "optimizer": "optimizer states",
    "activations": "activations", "logits": "logits / loss", "kv_cache": "KV cache",
    "temporaries": "temporaries", "cache": "allocator cache", "overhead": "CUDA context / overhead",
    "device_peak": "total (device peak)",
}


def cli(*args, cwd=None):
    return subprocess.run([OOMLESS, *args], capture_output=True, text=True, env=CLI_ENV, cwd=cwd)


def cli_args(options):
    out = []
    for k, v in options.items():
        out += ["--" + k, v]
    return out


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = dict(http.server.SimpleHTTPRequestHandler.extensions_map, **{".wasm": "application/wasm"})

    def log_message(self, *args):
        pass


class WebTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for f in ("index.html", "app.js", "style.css", "oomless.js", "oomless.wasm", "accuracy.json"):
            if not os.path.isfile(os.path.join(SITE, f)):
                raise unittest.SkipTest(f"{SITE}/{f} is missing: run make web")
        if not os.access(OOMLESS, os.X_OK):
            raise unittest.SkipTest(f"{OOMLESS} is missing: run make")
        handler = functools.partial(QuietHandler, directory=SITE)
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        cls.url = f"http://127.0.0.1:{cls.server.server_address[1]}/"
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.b = cdp.Browser(width=1280, height=1000)
        os.makedirs(SHOTS, exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.b.close()
        cls.server.shutdown()
        cls.server.server_close()

    # ---- page helpers ----------------------------------------------------------------------------

    def open(self, fragment=""):
        b = self.b
        b.navigate("about:blank")
        b.wait_for("document.readyState === 'complete' && location.href === 'about:blank'")
        b.events.clear()
        b.navigate(self.url + fragment)
        b.wait_for("document.body && Number(document.body.dataset.ready || 0) >= 1", timeout=30)
        return b

    def updates(self):
        return int(self.b.eval("Number(document.body.dataset.ready || 0)"))

    def choose(self, **fields):
        """Sets form fields as a person would (the value, then the element's input/change event),
        all in one task, then waits for the page's next update."""
        before = self.updates()
        self.b.eval(f"""(() => {{ for (const [name, value] of Object.entries({json.dumps(fields)})) {{
                const e = document.getElementById(name);
                e.focus(); e.value = value;
                if (e.value !== value) throw new Error('cannot set #' + name + ' to ' + value);
                e.dispatchEvent(new Event('input', {{bubbles: true}}));
                e.dispatchEvent(new Event('change', {{bubbles: true}})); }} }})()""")
        self.b.wait_for(f"Number(document.body.dataset.ready) > {before}")

    def page(self):
        return self.b.eval("""(() => ({
            estimate: document.getElementById('estimate-json').textContent,
            plan: document.getElementById('plan-json').textContent,
            table: document.getElementById('table-json').textContent,
            tableRows: [...document.querySelectorAll('#others tbody tr')].map(r => ({
                gpu: r.dataset.gpu, found: r.dataset.found, text: r.textContent})),
            verdict: document.getElementById('verdict').textContent,
            fits: document.getElementById('verdict').dataset.fits,
            error: document.getElementById('error').hidden ? '' : document.getElementById('error').textContent,
            configError: document.getElementById('config-error').hidden ? '' :
                document.getElementById('config-error').textContent,
            linkError: document.getElementById('link-error').hidden ? '' :
                document.getElementById('link-error').textContent,
            best: (document.getElementById('plan-best') || {}).textContent || '',
            rows: [...document.querySelectorAll('#breakdown tbody tr')].map(r => ({
                key: r.dataset.key, bytes: r.dataset.bytes, label: r.cells[0].textContent,
                size: r.cells[1].textContent, share: r.cells[2].textContent})),
            segments: document.querySelectorAll('#bar .seg').length,
            curvePoints: document.querySelectorAll('#curve circle.pt').length,
            commands: document.getElementById('commands').textContent,
            alternatives: [...document.querySelectorAll('#plan li[data-fits]')].map(li => li.dataset.fits),
            headings: [...document.querySelectorAll('#plan h3')].map(h => h.textContent),
            href: location.href,
        }))()""")

    def check_estimate(self, p, args, cwd=None):
        """The page's estimate against `oomless estimate ARGS`: JSON, verdict, every number shown."""
        j = cli("estimate", "--json", *args, cwd=cwd)
        self.assertIn(j.returncode, (0, 1), j.stderr)
        self.assertEqual(p["estimate"], j.stdout, f"estimate JSON differs for {args}")
        doc = json.loads(j.stdout)
        m = doc["memory"]
        want = dict(m, cache=m["reserved_peak"] - m["allocated_peak"])
        text = cli("estimate", *args, cwd=cwd).stdout
        self.assertEqual(len(p["rows"]), len(COMPONENT_LABELS))
        for row in p["rows"]:
            self.assertEqual(int(row["bytes"]), want[row["key"]], row)
            label = COMPONENT_LABELS[row["key"]]
            self.assertEqual(row["label"], label)
            # the CLI's text row: "  weights                       :     5.64 GiB   30.1%"
            mt = re.search(r"^  " + re.escape(label) + r"\s*:\s*(.+?)\s+([0-9.]+%)$", text, re.M)
            self.assertTrue(mt, f"no row {label!r} in the CLI's text output")
            self.assertEqual((row["size"], row["share"]), (mt.group(1), mt.group(2)), label)
        if "budget" in doc:
            self.assertEqual(p["fits"], "true" if doc["budget"]["fits"] else "false")
            self.assertEqual(j.returncode, 0 if doc["budget"]["fits"] else 1)
            # "  fits : yes (9.83 GiB of the usable 23.00 GiB to spare)", "NO (1.2 GiB over the
            # usable 22.99 GiB)": the amount and its direction, as the page says them
            verdict = re.search(r"^  fits\s*:\s*(yes|NO) \((\S+ \S+)(?: of the usable \S+ \S+)? "
                                r"(to spare|over)(?: the usable \S+ \S+)?\)$", text, re.M)
            self.assertTrue(verdict, "no verdict line in the CLI's text output")
            self.assertTrue(p["verdict"].startswith("Fits" if verdict.group(1) == "yes" else "Does not fit"),
                            p["verdict"])
            self.assertIn(f"({verdict.group(2)} {verdict.group(3)})", p["verdict"])
        return doc

    def check_plan(self, p, args, cwd=None):
        j = cli("plan", "--json", *args, cwd=cwd)
        self.assertIn(j.returncode, (0, 1), j.stderr)
        self.assertEqual(p["plan"], j.stdout, f"plan JSON differs for {args}")
        doc = json.loads(j.stdout)
        if doc["found"]:
            self.assertEqual(j.returncode, 0)
            # the alternatives that fit first, those that do not under their own heading
            fits = [a["fits"] for a in doc["alternatives"]]
            self.assertEqual(fits, sorted(fits, reverse=True), "alternatives that fit come first")
            self.assertEqual(p["alternatives"], [str(f).lower() for f in fits])
            self.assertEqual(p["headings"], (["Next best"] if True in fits else []) +
                             (["Faster, but they do not fit"] if False in fits else []))
            pl = doc["plan"]
            self.assertTrue(p["best"].startswith(f"batch {pl['batch_size']} × {pl['grad_accum']} accumulation "
                                                 f"(effective {pl['effective_batch']}), seq {pl['seq_len']}, "
                                                 f"checkpointing {pl['checkpointing']}, {pl['precision']}"), p["best"])
        else:
            self.assertEqual(j.returncode, 1)
            first = next(ln for ln in j.stderr.splitlines() if ln.startswith("oomless plan: "))
            self.assertEqual(p["best"], first)
        return doc

    def check_table(self, p, args, gpus):
        j = cli("table", "--format", "json", *args, "--gpus", ",".join(gpus))
        self.assertEqual(j.returncode, 0, j.stderr)
        self.assertEqual(p["table"], j.stdout, f"table JSON differs for {args}")
        rows = json.loads(j.stdout)["tables"][0]["rows"]
        self.assertEqual([(r["gpu"], r["found"]) for r in p["tableRows"]],
                         [(g, "true" if row["found"] else "false") for g, row in zip(gpus, rows)])
        for r, row in zip(p["tableRows"], rows):  # the knob named beside its value ('full' alone
            if row["found"]:                      # reads as a full fine-tune)
                self.assertIn("ckpt " + row["plan"]["checkpointing"], r["text"])

    # ---- tests ------------------------------------------------------------------------------------

    def test_1_default_view_and_screenshot(self):
        b = self.open()
        p = self.page()
        self.check_estimate(p, ["--model", "llama-3.1-8b", "--method", "lora", "--seq", "2048", "--gpu", "rtx-4090"])
        self.check_plan(p, ["--model", "llama-3.1-8b", "--method", "lora", "--seq", "2048", "--gpu", "rtx-4090",
                            "--target-effective-batch", "32"])
        self.check_table(p, ["--model", "llama-3.1-8b", "--method", "lora", "--seq", "2048",
                             "--target-effective-batch", "32"],
                         ["rtx-3090", "rtx-4090", "a100-40gb", "a100-80gb", "h100-sxm"])
        self.assertGreater(p["segments"], 3)
        self.assertGreater(p["curvePoints"], 4)
        version = b.eval("document.getElementById('version').textContent")
        cli_version = re.search(r"\b(\d+\.\d+\.\d+)\b", cli("--version").stdout).group(1)
        self.assertEqual(version, f"oomless {cli_version} (WebAssembly)")
        acc = b.wait_for("document.getElementById('accuracy-source').textContent")
        self.assertRegex(acc, r"median \|error\| [0-9.]+% \(max [0-9.]+%\) over \d+ public measurements")
        b.screenshot(os.path.join(SHOTS, "desktop.png"))
        self.assertEqual(b.console_errors(), [])

    def test_2_choices_match_the_cli(self):
        self.open()
        cases = [
            ({"model": "qwen2.5-7b", "method": "qlora", "batch": "4", "seq": "1024", "checkpointing": "full",
              "gpu": "a100-40gb"},
             ["--model", "qwen2.5-7b", "--method", "qlora", "--batch", "4", "--seq", "1024",
              "--checkpointing", "full", "--gpu", "a100-40gb"]),
            # does not fit: estimate exits 1, the planner finds nothing either
            ({"model": "llama-3.1-70b", "method": "full", "batch": "1", "seq": "4096", "checkpointing": "none",
              "gpu": "rtx-4090"},
             ["--model", "llama-3.1-70b", "--seq", "4096", "--gpu", "rtx-4090"]),
            ({"model": "mistral-7b", "method": "inference", "precision": "int8", "batch": "8", "seq": "4096",
              "attention": "flash", "gpu": "l4", "margin": "10%"},
             ["--model", "mistral-7b", "--method", "inference", "--precision", "int8", "--batch", "8",
              "--seq", "4096", "--attention", "flash", "--gpu", "l4", "--vram-safety-margin", "10%"]),
            ({"model": "gpt2-xl", "method": "full", "precision": "auto", "optimizer": "adamw-8bit",
              "loss": "chunked", "batch": "16", "seq": "1024", "attention": "sdpa", "gpu": "custom",
              "vram": "20", "margin": "1GiB", "effective": "64"},
             ["--model", "gpt2-xl", "--optimizer", "adamw-8bit", "--batch", "16", "--seq", "1024",
              "--loss", "chunked", "--vram", "20"]),
            # several GPUs, sharded and offloaded: the planner may use the offload asked for
            ({"model": "llama-3.1-8b", "method": "full", "precision": "auto", "optimizer": "adamw",
              "loss": "standard", "batch": "2", "seq": "1024", "gpu": "a100-40gb", "margin": "1GiB",
              "effective": "32", "gpus": "4", "sharding": "zero3", "offload": "optimizer"},
             ["--model", "llama-3.1-8b", "--batch", "2", "--seq", "1024", "--gpu", "a100-40gb",
              "--gpus", "4", "--sharding", "zero3", "--offload", "optimizer"]),
        ]
        for fields, args in cases:
            with self.subTest(fields=fields):
                self.choose(**fields)
                p = self.page()
                self.assertEqual(p["error"], "")
                self.check_estimate(p, args)
                plan_args = [a for i, a in enumerate(args)
                             if not (a in ("--batch", "--checkpointing") or (i and args[i - 1] in ("--batch", "--checkpointing")))]
                plan_args += ["--target-effective-batch", fields.get("effective", "32")]
                if fields.get("offload", "none") != "none":
                    plan_args += ["--allow", "checkpointing,sharding,offload"]
                self.check_plan(p, plan_args)
                gpus = ["rtx-3090", "rtx-4090", "a100-40gb", "a100-80gb", "h100-sxm"]
                if fields["gpu"] not in gpus + ["custom"]:
                    gpus.insert(0, fields["gpu"])
                table_args = [a for i, a in enumerate(plan_args)
                              if not (a in ("--gpu", "--vram") or (i and plan_args[i - 1] in ("--gpu", "--vram")))]
                # table's --gpus is its list of GPUs: a row's GPUs are its --gpus-per-node
                table_args = ["--gpus-per-node" if a == "--gpus" else a for a in table_args]
                self.check_table(p, table_args, gpus)

    def test_3_every_preset_and_method(self):
        """Every preset with every method through the page's module, against the CLI."""
        b = self.open()
        presets = json.loads(cli("estimate", "--list-models", "--json").stdout)
        for preset in presets:
            for method in ("full", "lora", "qlora", "inference"):
                opts = {"model": preset["name"], "method": method, "seq": "256", "gpu": "a100-80gb"}
                r = b.eval(f"window.oomlessPage.call('oomw_estimate', {json.dumps(opts)})")
                c = cli("estimate", "--json", *cli_args(opts))
                self.assertEqual((r["rc"], r["out"]), (c.returncode, c.stdout), opts)
                if c.returncode > 1:
                    self.assertEqual(r["err"], c.stderr.strip(), opts)
            opts = {"model": preset["name"], "method": "lora", "gpu": "rtx-4090"}
            r = b.eval(f"window.oomlessPage.call('oomw_plan', {json.dumps(opts)})")
            c = cli("plan", "--json", *cli_args(opts))
            self.assertEqual((r["rc"], r["out"]), (c.returncode, c.stdout), opts)
        # a table of three GPUs, and of every catalog GPU (268 characters: once over the bound)
        catalog = ",".join(g["id"] for g in json.loads(cli("gpus", "--catalog", "--json").stdout)["gpus"])
        self.assertGreater(len(catalog), 256)
        for gpus in ("rtx-3090,a100-80gb,h100-sxm", catalog):
            opts = {"model": "llama-3.1-8b", "method": "lora", "seq": "2048", "gpus": gpus}
            r = b.eval(f"window.oomlessPage.call('oomw_table', {json.dumps(opts)})")
            c = cli("table", "--format", "json", *cli_args(opts))
            self.assertEqual((r["rc"], r["out"]), (c.returncode, c.stdout))
            self.assertEqual(c.returncode, 0, c.stderr)

    def test_4_bad_values_give_the_cli_message(self):
        self.open()
        base = ["--model", "llama-3.1-8b", "--method", "lora"]
        cases = [({"batch": "0"}, base + ["--batch", "0", "--seq", "2048", "--gpu", "rtx-4090"]),
                 ({"seq": ""}, base + ["--seq", "", "--gpu", "rtx-4090"]),  # a cleared field
                 ({"gpu": "custom", "vram": "16 XB"}, base + ["--seq", "2048", "--vram", "16 XB"]),
                 ({"margin": "200%"}, base + ["--seq", "2048", "--gpu", "rtx-4090", "--vram-safety-margin", "200%"])]
        for fields, args in cases:
            with self.subTest(fields=fields):
                self.choose(batch="1", seq="2048", gpu="rtx-4090", margin="1GiB")
                self.choose(**fields)
                p = self.page()
                c = cli("estimate", *args)
                self.assertEqual(c.returncode, 2, c.stderr)
                self.assertEqual(p["error"], c.stderr.strip())

    def _config_dir(self):
        d = tempfile.mkdtemp(dir=TMP)
        with open(os.path.join(ROOT, "data", "models", "qwen2.5-1.5b.json")) as f:
            cfg = json.load(f)
        cfg["_name_or_path"] = "my-org/my-model"
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        return d

    def test_5_chosen_and_dropped_config(self):
        d = self._config_dir()
        b = self.open()
        self.choose(method="lora", batch="2", seq="1024", checkpointing="none", gpu="rtx-3090")
        before = self.updates()
        b.set_file("#config-file", os.path.join(d, "config.json"))
        b.wait_for(f"Number(document.body.dataset.ready) > {before}")
        p = self.page()
        self.assertEqual(p["error"], "")
        args = ["--model", "config.json", "--method", "lora", "--batch", "2", "--seq", "1024", "--gpu", "rtx-3090"]
        self.check_estimate(p, args, cwd=d)
        self.check_plan(p, ["--model", "config.json", "--method", "lora", "--seq", "1024", "--gpu", "rtx-3090",
                            "--target-effective-batch", "32"], cwd=d)
        self.assertIn("--model config.json", p["commands"])
        # dropped onto the drop zone (a drop event carrying the file, as the browser makes one)
        b.eval("document.getElementById('config-clear').click()")
        with open(os.path.join(d, "config.json")) as f:
            text = f.read()
        before = self.updates()
        b.eval(f"""(() => {{ const dt = new DataTransfer();
            dt.items.add(new File([{json.dumps(text)}], 'config.json', {{type: 'application/json'}}));
            const zone = document.getElementById('drop');
            zone.dispatchEvent(new DragEvent('dragover', {{bubbles: true, cancelable: true, dataTransfer: dt}}));
            zone.dispatchEvent(new DragEvent('drop', {{bubbles: true, cancelable: true, dataTransfer: dt}})); }})()""")
        b.wait_for(f"Number(document.body.dataset.ready) > {before}")
        p2 = self.page()
        self.assertEqual(p2["estimate"], p["estimate"])
        self.assertEqual(p2["plan"], p["plan"])
        self.assertIn("config=config.json", p2["href"])
        # dropped somewhere else on the page: taken as well, and the page stays
        b.eval("document.getElementById('config-clear').click()")
        before = self.updates()
        b.eval(f"""(() => {{ const dt = new DataTransfer();
            dt.items.add(new File([{json.dumps(text)}], 'config.json', {{type: 'application/json'}}));
            document.getElementById('plan').dispatchEvent(
                new DragEvent('drop', {{bubbles: true, cancelable: true, dataTransfer: dt}})); }})()""")
        b.wait_for(f"Number(document.body.dataset.ready) > {before}")
        self.assertEqual(self.page()["estimate"], p["estimate"])

    def test_6_bad_config_gives_a_readable_error(self):
        d = tempfile.mkdtemp(dir=TMP)
        cases = {
            "broken.json": '{"model_type": "llama", "hidden_size": 4096,',
            "nokey.json": '{"model_type": "llama", "hidden_size": 4096}',
            "notjson.json": "this is not JSON\n",
        }
        b = self.open()
        for name, text in cases.items():
            with self.subTest(file=name):
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    f.write(text)
                before = self.updates()
                b.set_file("#config-file", path)
                b.wait_for(f"Number(document.body.dataset.ready) > {before}")
                p = self.page()
                c = cli("estimate", "--model", name, "--method", "lora", "--seq", "2048", "--gpu", "rtx-4090", cwd=d)
                self.assertEqual(c.returncode, 2)
                self.assertEqual(p["error"], c.stderr.strip())
                self.assertEqual(p["configError"], c.stderr.strip())
                self.assertIn(name, p["configError"])
                visible = b.eval("getComputedStyle(document.getElementById('config-error')).display !== 'none'")
                self.assertTrue(visible)
                b.eval("document.getElementById('config-clear').click()")
        b.screenshot(os.path.join(SHOTS, "after-errors.png"))

    def test_7_shared_url_restores_the_state(self):
        d = self._config_dir()
        b = self.open()
        self.choose(method="qlora", precision="4bit", batch="3", seq="3000", checkpointing="selective",
                    attention="eager", loss="chunked", optimizer="adamw-8bit", stack="torchtune", gpu="custom",
                    vram="22.5", margin="5%", effective="48")
        before = self.updates()
        b.set_file("#config-file", os.path.join(d, "config.json"))
        # the file is read asynchronously: an update scheduled by choose() can come first, so
        # wait for the config to be in use (useConfig updates the page before it returns)
        b.wait_for(f"Number(document.body.dataset.ready) > {before} && "
                   "!document.getElementById('config-loaded').hidden")
        first = self.page()
        # the page names the stack the figures model, with its versions
        self.assertIn("Modelled for torchtune (torchtune 0.6.1",
                      b.eval("document.getElementById('verdict').textContent"))
        fields = ["model", "method", "precision", "batch", "seq", "checkpointing", "attention", "loss",
                  "optimizer", "stack", "gpu", "vram", "margin", "effective"]
        values = b.eval("(" + json.dumps(fields) + ").map(f => document.getElementById(f).value)")
        url = first["href"]
        self.assertIn("#", url)
        # a new page from the link alone
        b.navigate("about:blank")
        b.wait_for("location.href === 'about:blank'")
        b.navigate(url)
        b.wait_for("document.body && Number(document.body.dataset.ready || 0) >= 1", timeout=30)
        second = self.page()
        self.assertEqual(b.eval("(" + json.dumps(fields) + ").map(f => document.getElementById(f).value)"), values)
        self.assertEqual(second["estimate"], first["estimate"])
        self.assertEqual(second["plan"], first["plan"])
        self.assertEqual(second["href"], url)
        self.assertTrue(b.eval("!document.getElementById('config-loaded').hidden"))
        self.check_estimate(second, ["--model", "config.json", "--method", "qlora", "--precision", "4bit", "--optimizer",
                                     "adamw-8bit", "--batch", "3", "--seq", "3000", "--checkpointing", "selective",
                                     "--attention", "eager", "--loss", "chunked", "--stack", "torchtune",
                                     "--vram", "22.5", "--vram-safety-margin", "5%"], cwd=d)

    def test_8_keyboard_and_labels(self):
        b = self.open()
        unlabeled = b.eval("""[...document.querySelectorAll('input, select')].filter(e =>
            !(e.labels && e.labels.length && e.labels[0].textContent.trim())).map(e => e.id)""")
        self.assertEqual(unlabeled, [])
        # Tab from the page's start reaches the form; arrow keys change a select; results follow
        b.eval("document.activeElement.blur()")
        seen = []
        for _ in range(6):
            b.press("Tab", key_code=9)
            seen.append(b.eval("document.activeElement.id || document.activeElement.tagName"))
        self.assertIn("model", seen)
        b.eval("document.getElementById('method').focus()")
        before = self.updates()
        b.press("ArrowDown", key_code=40)
        b.wait_for(f"Number(document.body.dataset.ready) > {before}")
        self.assertEqual(b.eval("document.getElementById('method').value"), "qlora")
        p = self.page()
        self.check_estimate(p, ["--model", "llama-3.1-8b", "--method", "qlora", "--seq", "2048", "--gpu", "rtx-4090"])
        # a bitsandbytes base: the page names its quantizer and release
        self.assertIn("4-bit base: quantizer transformers, bitsandbytes 0.44 or later.",
                      b.eval("document.getElementById('verdict').textContent"))
        # typing a number
        b.eval("(() => { const e = document.getElementById('batch'); e.focus(); e.select(); })()")
        before = self.updates()
        b.press("4", code="Digit4", key_code=52)
        b.wait_for(f"Number(document.body.dataset.ready) > {before}")
        self.assertEqual(b.eval("document.getElementById('batch').value"), "4")

    def test_9_phone_width_and_size(self):
        b = self.b
        b.set_viewport(390, 844, mobile=True)
        try:
            self.open()
            width = b.eval("document.documentElement.scrollWidth")
            self.assertLessEqual(width, 390, "the page scrolls sideways on a phone")
            b.screenshot(os.path.join(SHOTS, "phone.png"))
        finally:
            b.send("Emulation.clearDeviceMetricsOverride")
        # what a browser downloads for the calculator, compressed (gzip -9, as a server would send it)
        total = 0
        for f in ("oomless.wasm", "oomless.js", "app.js", "style.css", "index.html"):
            with open(os.path.join(SITE, f), "rb") as fh:
                total += len(gzip.compress(fh.read(), 9))
        print(f"\n  page transfer (gzip -9): {total} bytes", file=sys.stderr)
        self.assertLess(total, 2 * 1024 * 1024)

    def test_10_crafted_link_fields_are_bounded(self):
        # a link whose fields are about 2 million characters (it used to trap the module:
        # "memory access out of bounds", and the page died): those fields are left out and said,
        # the rest of the link is used, and the page goes on working
        b = self.open()
        for hash_js, said in (
                ("'gpu=custom&vram=' + '1'.repeat(1900000) + '&seq=1024'",
                 '"vram" is 1,900,000 characters long (at most 1,024)'),
                ("'seq=1024&model=' + 'x'.repeat(2000000)", '"model" is 2,000,000 characters long'),
                ("'seq=1024&config=c.json&config-data=' + 'A'.repeat(2000000)",
                 "the config.json is 2,000,000 characters long (at most 1,398,104)")):
            with self.subTest(said=said):
                before = self.updates()
                b.eval(f"location.hash = {hash_js}")
                b.wait_for(f"Number(document.body.dataset.ready) > {before}", timeout=30)
                p = self.page()
                self.assertIn("This link was cut short: " + said, p["linkError"])
                self.assertEqual(p["error"], "")
                self.assertEqual(b.eval("document.getElementById('seq').value"), "1024")
                self.assertLess(len(p["href"]), 2000, "the long field is not written back")
                self.choose(batch="2")  # the module still answers
                self.assertEqual(self.page()["error"], "")
        args = ["--model", "llama-3.1-8b", "--method", "lora", "--batch", "2", "--seq", "1024",
                "--gpu", "rtx-4090"]
        self.check_estimate(self.page(), args)
        # a value typed past the bound (a number the field keeps: '1' x 1100, infinite, it empties):
        # said, the library not called with it
        before = self.updates()
        b.eval("""(() => { const e = document.getElementById('seq');
            e.value = '0.' + '0'.repeat(1100) + '1'; e.dispatchEvent(new Event('input', {bubbles: true})); })()""")
        b.wait_for("!document.getElementById('error').hidden")
        self.assertEqual(self.page()["error"], 'The field "seq" is 1,103 characters long (at most 1,024).')
        # the C entry points bound what they are given, whatever the page does
        r = b.eval("oomlessPage.call('oomw_estimate', {model: 'gpt2', vram: '1'.repeat(1100)})")
        self.assertEqual(r["rc"], 2)
        self.assertEqual(r["err"], "oomless estimate: option '--vram' is 1100 characters long: at most 1024")
        r = b.eval("oomlessPage.call('oomw_plan', {model: 'gpt2', x: 'y'.repeat(200), "
                   "z: 'y'.repeat(16384)})")
        self.assertEqual((r["rc"], r["err"]), (2, "oomless plan: the options are longer than 16384 bytes"))
        rc = b.eval("oomlessPage.module().ccall('oomw_write_file', 'number', ['string', 'array', 'number'], "
                    "['c.json', new Uint8Array(8), 2000000])")
        self.assertEqual(rc, 2)
        self.assertIn("'c.json' is 2000000 bytes",
                      b.eval("oomlessPage.module().UTF8ToString(oomlessPage.module()._oomw_error())"))
        self.assertEqual(b.console_errors(), [])

    def test_11_hub_field(self):
        """A Hub id typed in: the page fetches <endpoint>/<id>/resolve/main/config.json itself
        (cross-origin: the Hub sends Access-Control-Allow-Origin), and plans on it as the CLI
        plans on the same file; a gated, a missing, an unreachable model and a bad id are said.
        The endpoint is the page's ?hub=, here a local server."""
        d = self._config_dir()
        with open(os.path.join(d, "config.json"), "rb") as f:
            body = f.read()
        with open(os.path.join(d, "test--tiny.json"), "wb") as f:
            f.write(body)
        served = []

        class Hub(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                served.append(self.path)
                cors = not self.path.startswith("/nocors/")
                status, data = {"/test/tiny/resolve/main/config.json": (200, body),
                                "/test/gated/resolve/main/config.json": (401, b"{}"),
                                "/nocors/tiny/resolve/main/config.json": (200, body),
                                }.get(self.path, (404, b'{"error": "Repository not found"}'))
                self.send_response(status)
                if cors:
                    self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
        threading.Thread(target=hub.serve_forever, daemon=True).start()
        endpoint = "http://127.0.0.1:%d" % hub.server_address[1]
        try:
            b = self.open("?hub=" + endpoint)
            self.choose(method="lora", batch="2", seq="1024", checkpointing="none", gpu="rtx-3090")

            def fetch(model):
                before = self.updates()
                b.eval(f"""(() => {{ const e = document.getElementById('hub-id');
                    e.value = {json.dumps(model)}; e.dispatchEvent(new Event('input', {{bubbles: true}}));
                    document.getElementById('hub-fetch').click(); }})()""")
                b.wait_for("!document.getElementById('hub-fetch').disabled && "
                           "(document.getElementById('hub-status').textContent.startsWith('Fetched') || "
                           "!document.getElementById('config-error').hidden)", timeout=30)
                return before

            before = fetch("test/tiny")
            b.wait_for(f"Number(document.body.dataset.ready) > {before}")
            p = self.page()
            self.assertEqual((p["error"], p["configError"]), ("", ""))
            self.assertEqual(served[-1], "/test/tiny/resolve/main/config.json")
            self.assertIn("Fetched test/tiny (%d bytes) from %s." % (len(body), endpoint),
                          b.eval("document.getElementById('hub-status').textContent"))
            args = ["--model", "test--tiny.json", "--method", "lora", "--batch", "2", "--seq", "1024",
                    "--gpu", "rtx-3090"]
            self.check_estimate(p, args, cwd=d)
            self.check_plan(p, ["--model", "test--tiny.json", "--method", "lora", "--seq", "1024", "--gpu",
                                "rtx-3090", "--target-effective-batch", "32"], cwd=d)
            self.assertIn("oomless --model test/tiny fetches the same", p["commands"])
            b.screenshot(os.path.join(SHOTS, "hub.png"))
            for model, said in (
                    ("test/gated", "test/gated is gated or private on the Hub (HTTP 401): this page fetches "
                                   "public models only. Accept its licence on %s/test/gated" % endpoint),
                    ("test/missing", "test/missing is not on the Hub, or has no config.json (HTTP 404)"),
                    ("nocors/tiny", "The Hub could not be reached (%s/nocors/tiny/resolve/main/config.json)"
                     % endpoint),
                    ("no-slash", '"no-slash" is not a Hub model id: ORGANISATION/NAME')):
                with self.subTest(model=model):
                    fetch(model)
                    self.assertIn(said, self.page()["configError"])
            # the fetched config stays in use after a failed fetch
            self.assertEqual(self.page()["estimate"], p["estimate"])
        finally:
            hub.shutdown()
            hub.server_close()


if __name__ == "__main__":
    try:
        unittest.main(argv=[sys.argv[0], "-v"], exit=True)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
